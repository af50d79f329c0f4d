#include "common/host_identity.h"

#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>

namespace modelcast {

std::string host_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

std::uint64_t process_token() {
  static const std::uint64_t token = [] {
    std::random_device device;
    return (std::uint64_t{device()} << 32) ^ device();
  }();
  return token;
}

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

}  // namespace modelcast
