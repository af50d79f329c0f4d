// A directory nothing can be written to, for the tests of a repository that refuses writes.
#pragma once

#include <sys/mount.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace daemon_test {

// A read-only repository: a read-only tmpfs where we may mount one (as root, root ignores
// directory permissions; mode 0755: a tmpfs is world-writable, which the daemon refuses for a
// repository), else a directory without write permission.
struct ReadOnlyDirectory {
  explicit ReadOnlyDirectory(const std::string& p) : path(p) {
    std::filesystem::create_directories(path);
    if (geteuid() == 0) {
      mounted = mount("tmpfs", path.c_str(), "tmpfs", MS_RDONLY, "size=1m,mode=0755") == 0;
    } else {
      std::filesystem::permissions(path, std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
    }
  }
  ~ReadOnlyDirectory() {
    if (mounted) umount(path.c_str());
  }
  bool usable() const { return mounted || geteuid() != 0; }
  // Lets writes in again (the disk came back), with room for a few small versions.
  bool make_writable() const {
    if (mounted) return mount("tmpfs", path.c_str(), "tmpfs", MS_REMOUNT, "size=16m,mode=0755") == 0;
    std::error_code failed;
    std::filesystem::permissions(path, std::filesystem::perms::owner_all, failed);
    return !failed;
  }
  std::string path;
  bool mounted = false;
};

}  // namespace daemon_test
