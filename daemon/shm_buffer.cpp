#include "daemon/shm_buffer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

#include <spdlog/spdlog.h>

#include "modelcast/error.h"

namespace modelcastd {
namespace {

[[noreturn]] void fail(const std::string& what) {
  throw modelcast::Error(modelcast::ErrorCode::kResource, "shared-memory buffer: " + what + ": " + std::strerror(errno));
}

std::atomic<std::uint64_t> next_id{1};

}  // namespace

ShmBuffer::ShmBuffer(const std::string& name, std::size_t bytes) : id_(next_id++) {
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  size_ = (bytes + page - 1) / page * page;
  // The name is a label (/proc/PID/fd), cut to the 249 bytes memfd_create takes.
  fd_ = memfd_create(name.substr(0, 249).c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd_ < 0) fail("memfd_create");
  if (ftruncate(fd_, static_cast<off_t>(size_)) != 0) {
    close(fd_);
    fail("ftruncate to " + std::to_string(size_) + " bytes");
  }
  // Clients must not resize what the daemon and every other client have mapped (and refuse a
  // buffer not sealed against shrinking).
  if (fcntl(fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) {
    close(fd_);
    fail("sealing the memfd");
  }
  void* p = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) {
    close(fd_);
    fail("mmap");
  }
  base_ = static_cast<std::byte*>(p);
  // Nor write it: the read-only descriptor below keeps a client from mapping it writable, but
  // not from opening it again through /proc/self/fd read-write (a memfd's mode is 0777, so
  // another user could too) and writing what every other reader sees. F_SEAL_FUTURE_WRITE
  // (Linux 5.1) refuses every later writable mapping and write(), and leaves the daemon's own
  // mapping, made above, writable.
  if (fcntl(fd_, F_ADD_SEALS, F_SEAL_FUTURE_WRITE | F_SEAL_SEAL) != 0) {
    // A kernel before 5.1 has no such seal (EINVAL): served as before it, said once.
    const bool unknown = errno == EINVAL;
    if (!unknown || fcntl(fd_, F_ADD_SEALS, F_SEAL_SEAL) != 0) {
      munmap(base_, size_);
      close(fd_);
      fail(unknown ? "sealing the memfd" : "sealing the memfd against writes");
    }
    static std::once_flag said;
    std::call_once(said, [] {
      // Said once per process, so to spdlog's default logger where the daemon's is not made yet.
      auto log = spdlog::get("modelcastd");
      if (!log) log = spdlog::default_logger();
      log->warn("this kernel cannot seal shared memory against writes (F_SEAL_FUTURE_WRITE, Linux 5.1): a client "
                "that opens a served buffer again through /proc can write what other clients read");
    });
  }
  // Reopening through /proc gives a new open file description with O_RDONLY, so a client's
  // mmap(PROT_WRITE, MAP_SHARED) of what it receives fails with EACCES.
  std::string self = "/proc/self/fd/" + std::to_string(fd_);
  read_only_fd_ = open(self.c_str(), O_RDONLY | O_CLOEXEC);
  if (read_only_fd_ < 0) {
    munmap(base_, size_);
    close(fd_);
    fail("reopen read-only");
  }
}

ShmBuffer::~ShmBuffer() {
  munmap(base_, size_);
  close(read_only_fd_);
  close(fd_);
}

}  // namespace modelcastd
