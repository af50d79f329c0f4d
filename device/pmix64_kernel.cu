// The pmix64-v1 kernel: see pmix64.h. The only file nvcc compiles (kept small for CI).
#include <cuda_runtime.h>

#include "device/pmix64_segment.h"
#include "device/pmix64_mix.h"

namespace modelcast::pmix64 {
namespace {

constexpr unsigned kThreads = 256;

// Little-endian word from up to 8 bytes (zero-padded), for unaligned data and tails.
__device__ std::uint64_t load_bytes(const unsigned char* p, std::uint64_t n) {
  std::uint64_t w = 0;
  for (std::uint64_t b = 0; b < n && b < 8; ++b) w |= std::uint64_t{p[b]} << (8 * b);
  return w;
}

__global__ void __launch_bounds__(kThreads) segments_kernel(const unsigned char* base, const Segment* segments,
                                                             unsigned long long* sums) {
  const Segment s = segments[blockIdx.x];
  const unsigned char* p = base + s.offset;
  const std::uint64_t pairs = s.bytes / 16;
  std::uint64_t acc = 0;
  if ((reinterpret_cast<std::uintptr_t>(p) & 15u) == 0) {
    const ulonglong2* v = reinterpret_cast<const ulonglong2*>(p);
    for (std::uint64_t i = threadIdx.x; i < pairs; i += kThreads) {
      const ulonglong2 x = __ldcs(v + i);  // streamed once: do not keep in cache
      acc += term(s.first_word + 2 * i, x.x) + term(s.first_word + 2 * i + 1, x.y);
    }
  } else {
    for (std::uint64_t i = threadIdx.x; i < pairs; i += kThreads) {
      acc += term(s.first_word + 2 * i, load_bytes(p + 16 * i, 8)) +
             term(s.first_word + 2 * i + 1, load_bytes(p + 16 * i + 8, 8));
    }
  }
  if (threadIdx.x == 0) {  // the last < 16 bytes of the segment: one or two words
    std::uint64_t word = s.first_word + 2 * pairs;
    for (std::uint64_t at = 16 * pairs; at < s.bytes; at += 8, ++word) acc += term(word, load_bytes(p + at, s.bytes - at));
  }
  for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, offset);
  __shared__ std::uint64_t warp_sums[kThreads / 32];
  const unsigned lane = threadIdx.x & 31u;
  const unsigned warp = threadIdx.x >> 5;
  if (lane == 0) warp_sums[warp] = acc;
  __syncthreads();
  if (warp == 0) {
    acc = lane < kThreads / 32 ? warp_sums[lane] : 0;
    for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, offset);
    if (lane == 0) atomicAdd(sums + s.tensor, static_cast<unsigned long long>(acc));
  }
}

}  // namespace

namespace detail {
int launch_segments(const void* base, const Segment* device_segments, std::size_t count,
                    unsigned long long* device_sums, CUstream_st* stream) {
  if (count == 0) return static_cast<int>(cudaSuccess);
  segments_kernel<<<static_cast<unsigned>(count), kThreads, 0, stream>>>(static_cast<const unsigned char*>(base),
                                                                         device_segments, device_sums);
  return static_cast<int>(cudaGetLastError());
}
}  // namespace detail

}  // namespace modelcast::pmix64
