// One shared-memory receive buffer: a memfd the daemon maps read-write (the Consumer receives
// into it) and hands to clients as a read-only descriptor, sealed so that no one but that first
// mapping can ever write it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace modelcastd {

class ShmBuffer {
 public:
  // Creates a memfd of `bytes` (rounded up to the page size) and maps it. Pages are not touched:
  // memory is committed as versions are written. Throws modelcast::Error(kResource) on failure.
  ShmBuffer(const std::string& name, std::size_t bytes);
  ~ShmBuffer();
  ShmBuffer(const ShmBuffer&) = delete;
  ShmBuffer& operator=(const ShmBuffer&) = delete;

  std::span<std::byte> memory() const { return {base_, size_}; }
  bool contains(const void* p) const {
    auto* b = static_cast<const std::byte*>(p);
    return b >= base_ && b < base_ + size_;
  }
  std::size_t offset_of(const void* p) const { return static_cast<std::size_t>(static_cast<const std::byte*>(p) - base_); }
  // A descriptor opened read-only: a client can map it PROT_READ but never writable. Owned here.
  int read_only_fd() const { return read_only_fd_; }
  std::uint64_t id() const { return id_; }  // unique within this daemon process
  std::size_t size() const { return size_; }

 private:
  int fd_ = -1;
  int read_only_fd_ = -1;
  std::byte* base_ = nullptr;
  std::size_t size_ = 0;
  std::uint64_t id_ = 0;
};

}  // namespace modelcastd
