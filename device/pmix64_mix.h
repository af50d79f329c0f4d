// pmix64-v1, the per-tensor digest computed on the GPU: the arithmetic shared by the
// host reference (pmix64.cpp) and the kernel (pmix64_kernel.cu). See pmix64.h for why.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define MODELCAST_HD __host__ __device__ __forceinline__
#else
#define MODELCAST_HD inline
#endif

namespace modelcast::pmix64 {

inline constexpr std::uint64_t kPositionKey = 0x9E3779B97F4A7C15ull;  // odd: i -> (i+1)*K is a bijection
inline constexpr std::uint64_t kSizeKey = 0x6D6F64656C636173ull;      // "modelcas"

// SplitMix64's finaliser: a bijection of 64-bit words with full avalanche.
MODELCAST_HD std::uint64_t mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Contribution of the 8-byte little-endian word at word index `index` of a tensor.
MODELCAST_HD std::uint64_t term(std::uint64_t index, std::uint64_t word) {
  return mix(word ^ ((index + 1) * kPositionKey));
}

// The digest from the sum (mod 2^64) of all terms and the tensor's size in bytes.
MODELCAST_HD std::uint64_t finish(std::uint64_t sum, std::uint64_t size) {
  return mix(sum + mix(size + kSizeKey));
}

}  // namespace modelcast::pmix64
