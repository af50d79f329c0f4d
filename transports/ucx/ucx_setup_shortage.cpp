#include "transports/ucx/ucx_setup_shortage.h"

#include <dirent.h>
#include <sys/resource.h>
#include <sys/statvfs.h>

#include <cstdint>

#include "transports/ucx/ucx_tls.h"

namespace modelcast::transport {
namespace {

// A worker opens a few dozen descriptors (event descriptors, its shared-memory segments, the TCP
// transport's sockets), and its shared-memory segments take a few MiB: less than this left is
// what a failed setup was short of.
constexpr std::uint64_t kFewDescriptors = 64;
constexpr std::uint64_t kLittleShm = 16ULL << 20;

std::optional<std::uint64_t> open_descriptors() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return std::nullopt;
  std::uint64_t count = 0;
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  closedir(dir);
  return count > 0 ? count - 1 : 0;  // less the one this directory stream holds
}

std::string mib(std::uint64_t bytes) {
  return std::to_string(bytes >> 20) + "." + std::to_string(((bytes & ((1ULL << 20) - 1)) * 10) >> 20) + " MiB";
}

}  // namespace

std::optional<std::string> ucx_setup_shortage() {
  std::string found;
  rlimit files{};
  if (const auto open = open_descriptors(); open && getrlimit(RLIMIT_NOFILE, &files) == 0 &&
                                            files.rlim_cur != RLIM_INFINITY && files.rlim_cur < *open + kFewDescriptors) {
    found = "this process has " + std::to_string(*open) + " of its " + std::to_string(files.rlim_cur) +
            " file descriptors open (`ulimit -n`)";
  }
  struct statvfs shm {};
  if (ucx_mm_transports_allowed() && statvfs("/dev/shm", &shm) == 0 && shm.f_blocks > 0) {
    const std::uint64_t free = static_cast<std::uint64_t>(shm.f_bavail) * shm.f_frsize;
    const std::uint64_t size = static_cast<std::uint64_t>(shm.f_blocks) * shm.f_frsize;
    if (free < kLittleShm) {
      if (!found.empty()) found += "; ";
      found += "/dev/shm, where UCX's shared-memory transport makes its segments, has " + mib(free) + " free of " +
               mib(size);
    }
  }
  if (found.empty()) return std::nullopt;
  return found;
}

}  // namespace modelcast::transport
