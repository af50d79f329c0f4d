// Who writes a model's directory of a repository: one process at a time. A second modelcastd
// (or a daemon restarted while the old one still stops) serving the same model from the same
// repository removed the first one's unfinished writes as leftovers of a crash and pruned the
// versions it read back; the lock turns that into a refusal naming the directory.
//
// An advisory flock(2) on the model directory itself (no lock file for Triton to find beside the
// versions); the kernel lets it go when the process ends, however it ends, so a crash leaves no
// stale lock. The lock is on the directory, not its name: a directory removed while held leaves
// the lock on the removed one, and lost() says so (RepositoryWriter then locks the new one).
// Threads: made and destroyed by one owner; lost() and unlocked() from any thread.
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
  // Whether the directory at the path is no longer the one locked (removed, or replaced by
  // another of the same name); false for a lock the file system did not take.
  bool lost() const;
  const std::string& directory() const { return directory_; }

 private:
  std::string directory_;
  int fd_ = -1;
  std::string unlocked_;
};

}  // namespace modelcast::repository
