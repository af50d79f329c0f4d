#include "common/host_buffer.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "modelcast/error.h"

namespace modelcast {
namespace {
constexpr std::size_t kHugePage = 2u << 20;
}

HostBuffer::HostBuffer(std::size_t size) : size_(size) {
  mapped_ = (size + kHugePage - 1) / kHugePage * kHugePage;
  if (mapped_ == 0) mapped_ = kHugePage;
  void* p = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    throw Error(ErrorCode::kResource, "cannot map " + std::to_string(size) + " bytes: " + std::strerror(errno));
  }
  // Huge pages: fewer TLB misses in copies and transfers, fewer pages for a transport to register.
  // Asked before the touch so the range is backed by them at once (measured: with 4 KiB pages a
  // 1 GiB transfer took twice as long). The price is paid once, at allocation: with THP
  // defrag=madvise the kernel may compact memory on these faults, which took seconds per GiB on a
  // fragmented, loaded host. Failure only costs speed.
  madvise(p, mapped_, MADV_HUGEPAGE);
  data_ = static_cast<std::byte*>(p);
  // Touch every page now: first-touch faults would otherwise land in the trainer's stall.
  for (std::size_t off = 0; off < mapped_; off += 4096) data_[off] = std::byte{0};
}

HostBuffer::~HostBuffer() {
  if (data_) munmap(data_, mapped_);
}

HostBuffer::HostBuffer(HostBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      mapped_(std::exchange(other.mapped_, 0)) {}

HostBuffer& HostBuffer::operator=(HostBuffer&& other) noexcept {
  if (this != &other) {
    if (data_) munmap(data_, mapped_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapped_ = std::exchange(other.mapped_, 0);
  }
  return *this;
}

}  // namespace modelcast
