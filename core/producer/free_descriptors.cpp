#include "core/producer/free_descriptors.h"

#include <dirent.h>
#include <sys/resource.h>

#include <cerrno>

namespace modelcast::producer {

std::optional<Descriptors> free_descriptors() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return std::nullopt;
  Descriptors d;
  d.limit = static_cast<std::size_t>(limit.rlim_cur);
  DIR* directory = opendir("/proc/self/fd");
  if (!directory) {
    if (errno == EMFILE || errno == ENFILE) return d;
    return std::nullopt;
  }
  std::size_t open = 0;
  while (const dirent* entry = readdir(directory)) {
    if (entry->d_name[0] != '.') ++open;
  }
  closedir(directory);
  open = open > 0 ? open - 1 : 0;  // the directory's own descriptor
  d.free = open >= d.limit ? 0 : d.limit - open;
  return d;
}

}  // namespace modelcast::producer
