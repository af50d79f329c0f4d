// The unit of work of the pmix64 kernel, shared by the host planner (pmix64.cpp, C++20) and
// the kernel (pmix64_kernel.cu, compiled as C++17): plain C++17, no CUDA headers.
#pragma once

#include <cstddef>
#include <cstdint>

struct CUstream_st;  // cudaStream_t without the CUDA headers

namespace modelcast::pmix64 {

// What one thread block of the kernel hashes: part of one tensor. offset and first_word are
// 16-byte / 2-word aligned for every segment but a tensor's first when the tensor is unaligned.
struct Segment {
  std::uint64_t offset = 0;      // from the buffer's base
  std::uint64_t bytes = 0;
  std::uint64_t first_word = 0;  // word index of the segment's first byte inside its tensor
  std::uint32_t tensor = 0;
  std::uint32_t reserved = 0;
};
inline constexpr std::uint64_t kSegmentBytes = std::uint64_t{1} << 20;

namespace detail {
// In pmix64_kernel.cu: enqueues the kernel; returns the cudaError_t of the launch as int.
int launch_segments(const void* base, const Segment* device_segments, std::size_t count,
                    unsigned long long* device_sums, CUstream_st* stream);
}  // namespace detail

}  // namespace modelcast::pmix64
