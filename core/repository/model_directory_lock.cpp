#include "core/repository/model_directory_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/closed_in_forked_children.h"
#include "common/shown_text.h"
#include "core/repository/repository.h"
#include "modelcast/error.h"

namespace modelcast::repository {

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
  // A flock belongs to the open file, which a forked child shares: a child that outlived the
  // lock's owner (a DataLoader worker) kept the directory locked.
  modelcast::close_in_forked_children(fd_);
}

bool ModelDirectoryLock::lost() const {
  if (fd_ < 0) return false;
  struct stat held{}, named{};
  if (fstat(fd_, &held) != 0) return false;  // cannot happen for an open descriptor; no claim made
  return stat(directory_.c_str(), &named) != 0 || named.st_dev != held.st_dev || named.st_ino != held.st_ino;
}

ModelDirectoryLock::~ModelDirectoryLock() {
  if (fd_ < 0) return;
  modelcast::forget_in_forked_children(fd_);  // first: a child forked after the close would close a reused number
  close(fd_);                       // lets the lock go
}

}  // namespace modelcast::repository
