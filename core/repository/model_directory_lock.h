// Who writes a model's directory of a repository: one process at a time. A second modelcastd
// (or a daemon restarted while the old one still stops) serving the same model from the same
// repository removed the first one's unfinished writes as leftovers of a crash and pruned the
// versions it read back; the lock turns that into a refusal naming the directory.
//
// An advisory flock(2) on the model directory itself (no lock file for Triton to find beside the
// versions); the kernel lets it go when the process ends, however it ends, so a crash leaves no
// stale lock. Threads: an object is made, held and destroyed by one owner; no shared state.
#pragma once

#include <string>

namespace modelcast::repository {

class ModelDirectoryLock {
 public:
  // Creates `directory` if missing and locks it. Throws modelcast::Error(kState) when another
  // open of it holds the lock (another process, or another lock in this one), kResource when it
  // cannot be made or opened. A file system that takes no locks (Lustre mounted without flock,
  // some NFS) is no reason to stop writing: the object is made unlocked, and unlocked() says why.
  explicit ModelDirectoryLock(const std::string& directory);
  ~ModelDirectoryLock();
  ModelDirectoryLock(const ModelDirectoryLock&) = delete;
  ModelDirectoryLock& operator=(const ModelDirectoryLock&) = delete;

  // Empty while the lock is held; else why it could not be taken (to be logged by the owner).
  const std::string& unlocked() const { return unlocked_; }

 private:
  int fd_ = -1;
  std::string unlocked_;
};

}  // namespace modelcast::repository
