#include "core/repository/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/shown_text.h"
#include "modelcast/error.h"

namespace modelcast::repository {

RegularFile::RegularFile(const std::string& path) : path_(path) {
  // O_NONBLOCK so that opening a FIFO returns at once; it does nothing to a regular file's reads.
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd_ < 0) throw Error(ErrorCode::kResource, "cannot open " + shown_text(path, 4096) + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int e = errno;
    ::close(fd_);
    throw Error(ErrorCode::kResource, "cannot stat " + shown_text(path, 4096) + ": " + std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    throw Error(ErrorCode::kIntegrity,
                shown_text(path, 4096) + " " + (S_ISDIR(st.st_mode) ? "is a directory" : "is not a regular file") + ", not a repository file");
  }
  size_ = static_cast<std::size_t>(st.st_size);
}

RegularFile::~RegularFile() { ::close(fd_); }

std::string RegularFile::read_all(std::size_t max_bytes) const {
  if (size_ > max_bytes) {
    throw Error(ErrorCode::kIntegrity, shown_text(path_, 4096) + " holds " + std::to_string(size_) + " bytes, more than the " +
                                           std::to_string(max_bytes) + " such a file may hold");
  }
  std::string text(size_, '\0');
  std::size_t done = 0;
  while (done < size_) {
    const ssize_t n = ::pread(fd_, text.data() + done, size_ - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(ErrorCode::kResource, "cannot read " + shown_text(path_, 4096) + ": " + std::strerror(errno));
    if (n == 0) break;  // shrank since it was opened: what is there is parsed, and judged
    done += static_cast<std::size_t>(n);
  }
  text.resize(done);
  return text;
}

}  // namespace modelcast::repository
