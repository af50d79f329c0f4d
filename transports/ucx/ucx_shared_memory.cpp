#include "transports/ucx/ucx_shared_memory.h"

#include <cstdlib>
#include <sstream>
#include <string>

namespace modelcast::transport {

bool ucx_shared_memory_allowed() {
  const char* tls = std::getenv("UCX_TLS");
  if (tls == nullptr || *tls == '\0' || *tls == '^') return true;  // default or an exclusion list
  std::stringstream list(tls);
  for (std::string item; std::getline(list, item, ',');) {
    for (const char* shm : {"all", "sm", "shm", "posix", "sysv", "cma", "knem", "xpmem"}) {
      if (item == shm) return true;
    }
  }
  return false;
}

}  // namespace modelcast::transport
