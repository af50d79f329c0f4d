// Page-aligned host memory for snapshot slots and receive buffers.
#pragma once

#include <cstddef>
#include <span>

namespace modelcast {

// Owns an anonymous mapping. Pages are touched at allocation (MAP_POPULATE) and huge pages are
// requested, so the first publish into a slot pays no page faults. Move-only.
class HostBuffer {
 public:
  HostBuffer() = default;
  // Throws Error(kResource) naming the size if the mapping fails.
  explicit HostBuffer(std::size_t size);
  ~HostBuffer();
  HostBuffer(HostBuffer&& other) noexcept;
  HostBuffer& operator=(HostBuffer&& other) noexcept;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;

  std::byte* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  std::span<std::byte> span() const noexcept { return {data_, size_}; }

 private:
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t mapped_ = 0;
};

}  // namespace modelcast
