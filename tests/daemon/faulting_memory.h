// Memory whose pages stay missing until the test supplies them (userfaultfd): a thread that
// reads it, even inside a write() system call, waits there, so a test can hold a repository write
// in progress at a known point without a slow disk and without sleeping.
//
// Threads: the test's thread calls next_fault() and supply(); any thread may read the memory.
// Closing the userfaultfd (the destructor) wakes every waiting reader with zero pages.
#pragma once

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

namespace daemon_test {

class FaultingMemory {
 public:
  explicit FaultingMemory(std::size_t bytes) : bytes_(bytes) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      why_ = std::string("mmap: ") + std::strerror(errno);
      return;
    }
    data_ = static_cast<std::uint8_t*>(p);
    // Faults taken inside the kernel (write() reading the buffer) need a userfaultfd that is
    // not user-mode only: root, or vm.unprivileged_userfaultfd = 1.
    uffd_ = static_cast<int>(syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
    if (uffd_ < 0) {
      why_ = std::string("userfaultfd: ") + std::strerror(errno) + " (needs root or vm.unprivileged_userfaultfd=1)";
      return;
    }
    uffdio_api api{.api = UFFD_API, .features = 0, .ioctls = 0};
    uffdio_register reg{.range = {.start = reinterpret_cast<std::uintptr_t>(data_), .len = bytes_},
                        .mode = UFFDIO_REGISTER_MODE_MISSING,
                        .ioctls = 0};
    if (ioctl(uffd_, UFFDIO_API, &api) != 0 || ioctl(uffd_, UFFDIO_REGISTER, &reg) != 0) {
      why_ = std::string("userfaultfd ioctl: ") + std::strerror(errno);
      close(uffd_);
      uffd_ = -1;
    }
  }
  ~FaultingMemory() {
    if (uffd_ >= 0) close(uffd_);
    if (data_) munmap(data_, bytes_);
  }
  FaultingMemory(const FaultingMemory&) = delete;
  FaultingMemory& operator=(const FaultingMemory&) = delete;

  bool usable() const { return uffd_ >= 0; }
  const std::string& why_not() const { return why_; }
  const std::uint8_t* data() const { return data_; }
  std::size_t size() const { return bytes_; }

  // The offset of the next missing page some thread waits on, or nothing after `limit`.
  std::optional<std::size_t> next_fault(std::chrono::milliseconds limit) {
    pollfd p{uffd_, POLLIN, 0};
    for (;;) {
      int ready = poll(&p, 1, static_cast<int>(limit.count()));
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) return std::nullopt;
      uffd_msg message{};
      if (read(uffd_, &message, sizeof message) != sizeof message) continue;  // taken by a wake-up
      if (message.event != UFFD_EVENT_PAGEFAULT) continue;
      return static_cast<std::size_t>(message.arg.pagefault.address - reinterpret_cast<std::uintptr_t>(data_));
    }
  }

  // Maps zero pages over [offset, offset + length) (page-aligned, clipped to the memory) and
  // wakes the readers waiting there.
  void supply(std::size_t offset, std::size_t length) {
    const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    offset -= offset % page;
    if (offset >= bytes_) return;
    length = std::min((length + page - 1) / page * page, bytes_ - offset);
    uffdio_zeropage zero{.range = {.start = reinterpret_cast<std::uintptr_t>(data_) + offset, .len = length},
                         .mode = 0,
                         .zeropage = 0};
    ioctl(uffd_, UFFDIO_ZEROPAGE, &zero);  // EEXIST where a page is already there: nothing to do
  }

 private:
  std::size_t bytes_;
  std::uint8_t* data_ = nullptr;
  int uffd_ = -1;
  std::string why_;
};

}  // namespace daemon_test
