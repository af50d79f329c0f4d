#include "core/repository/model_directory_lock.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/shown_text.h"
#include "core/repository/repository.h"
#include "modelcast/error.h"

namespace modelcast::repository {
namespace {

// The descriptors of the locks this process holds, closed in a child it forks. A flock belongs to
// the open file, which a forked child shares: a child that outlived the lock's owner (a
// DataLoader worker, a helper process forked from the trainer) kept the directory locked, and
// the trainer could not persist there again, nor a restarted one, until the child ended.
// Slots of atomics, not a container: the child's handler may only do what a signal handler may
// (no allocation, no locks). A process holding more locks than slots leaves the rest to its
// children (a daemon holds one per model).
constexpr std::size_t kForkSlots = 256;
std::atomic<int> held_descriptors[kForkSlots];

void close_held_in_child() {
  for (auto& slot : held_descriptors) {
    const int fd = slot.exchange(-1);
    if (fd >= 0) close(fd);  // the parent's lock stays: its own descriptor still holds the open file
  }
}

// Registered once per process, before the first lock.
void close_in_forked_children(int fd) {
  static const bool registered = [] {
    for (auto& slot : held_descriptors) slot.store(-1);
    return pthread_atfork(nullptr, nullptr, close_held_in_child) == 0;
  }();
  if (!registered) return;
  for (auto& slot : held_descriptors) {
    int empty = -1;
    if (slot.compare_exchange_strong(empty, fd)) return;
  }
}

void forget_for_forked_children(int fd) {
  for (auto& slot : held_descriptors) {
    int held = fd;
    if (slot.compare_exchange_strong(held, -1)) return;
  }
}

}  // namespace

ModelDirectoryLock::ModelDirectoryLock(const std::string& directory) : directory_(directory) {
  std::error_code ec;
  make_directories(directory, ec);
  if (ec) {
    throw Error(ErrorCode::kResource, "repository: cannot create directory " + shown_text(directory, 4096) + ": " + ec.message());
  }
  fd_ = open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd_ < 0) {
    throw Error(ErrorCode::kResource, "repository: cannot open directory " + shown_text(directory, 4096) + ": " + std::strerror(errno));
  }
  int rc;
  do {
    rc = flock(fd_, LOCK_EX | LOCK_NB);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    const int saved = errno;
    if (saved == EWOULDBLOCK) {
      close(fd_);
      fd_ = -1;
      throw Error(ErrorCode::kState, "repository directory " + shown_text(directory, 4096) +
                                         " is in use by another writer (a modelcastd serving this model from this "
                                         "repository, or a producer persisting it there): one writes a model's "
                                         "directory at a time");
    }
    close(fd_);
    fd_ = -1;
    unlocked_ = "cannot lock directory " + shown_text(directory, 4096) + " (" + std::strerror(saved) +
                "): another writer of it would not be refused";
    return;
  }
  close_in_forked_children(fd_);
}

bool ModelDirectoryLock::lost() const {
  if (fd_ < 0) return false;
  struct stat held{}, named{};
  if (fstat(fd_, &held) != 0) return false;  // cannot happen for an open descriptor; no claim made
  return stat(directory_.c_str(), &named) != 0 || named.st_dev != held.st_dev || named.st_ino != held.st_ino;
}

ModelDirectoryLock::~ModelDirectoryLock() {
  if (fd_ < 0) return;
  forget_for_forked_children(fd_);  // first: a child forked after the close would close a reused number
  close(fd_);                       // lets the lock go
}

}  // namespace modelcast::repository
