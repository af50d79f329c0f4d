// Opening a repository file for reading without hanging on something that is not a file: a FIFO
// (or a device) at a version's path would block open() or read() until a writer came, and with it
// the daemon's recovery, its reload and its shutdown.
#pragma once

#include <cstddef>
#include <string>

namespace modelcast::repository {

// An open descriptor of a regular file, closed when destroyed.
class RegularFile {
 public:
  // Opens `path` for reading. Throws Error(kResource) naming the path if it cannot be opened, and
  // Error(kIntegrity) naming it if it is not a regular file (a directory, a FIFO, a device).
  explicit RegularFile(const std::string& path);
  ~RegularFile();
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;

  int fd() const { return fd_; }
  std::size_t size() const { return size_; }  // when opened

  // The whole file, which must hold at most `max_bytes`: Error(kIntegrity) naming the path
  // otherwise, Error(kResource) if it cannot be read.
  std::string read_all(std::size_t max_bytes) const;

 private:
  std::string path_;
  int fd_ = -1;
  std::size_t size_ = 0;
};

}  // namespace modelcast::repository
