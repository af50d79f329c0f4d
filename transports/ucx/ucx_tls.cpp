#include "transports/ucx/ucx_tls.h"

#include <cstdlib>
#include <sstream>
#include <initializer_list>
#include <string>
#include <vector>

namespace modelcast::transport {

namespace {

// Whether UCX_TLS (its list, or what its '^' list leaves out) keeps one of `names` on: "all"
// counts as each of them, and with `shared_memory` the aliases that cover shared-memory transports
// (sm, shm; mm for posix, sysv and xpmem) do too.
bool allowed_by_ucx_tls(std::initializer_list<const char*> names, bool shared_memory) {
  const char* tls = std::getenv("UCX_TLS");
  if (tls == nullptr || *tls == '\0') return true;
  const bool exclusion = *tls == '^';
  std::vector<std::string> items;
  std::stringstream list(tls + (exclusion ? 1 : 0));
  for (std::string item; std::getline(list, item, ',');) items.push_back(item);
  auto listed = [&](const char* name) {
    for (const auto& item : items) {
      if (item == name || item == "all") return true;
      if (!shared_memory) continue;
      if (item == "sm" || item == "shm") return true;
      if (item == "mm" && (std::string(name) == "posix" || std::string(name) == "sysv" || std::string(name) == "xpmem")) {
        return true;
      }
    }
    return false;
  };
  for (const char* name : names) {
    if (listed(name) != exclusion) return true;  // listed and allowed, or not excluded
  }
  return false;
}

}  // namespace

bool ucx_shared_memory_allowed() { return allowed_by_ucx_tls({"posix", "sysv", "cma", "knem", "xpmem"}, true); }

bool ucx_mm_transports_allowed() { return allowed_by_ucx_tls({"posix", "sysv"}, true); }

bool ucx_tcp_allowed() { return allowed_by_ucx_tls({"tcp"}, false); }

}  // namespace modelcast::transport
