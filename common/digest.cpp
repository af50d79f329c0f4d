#include "common/digest.h"

#include <xxhash.h>

namespace modelcast {

#if MODELCAST_DIGEST_AVX2
namespace detail {
std::uint64_t digest_bytes_avx2(const void* data, std::size_t size) noexcept;  // digest_avx2.cpp
}  // namespace detail
#endif

namespace {

using Digest = std::uint64_t (*)(const void*, std::size_t) noexcept;

std::uint64_t digest_bytes_baseline(const void* data, std::size_t size) noexcept { return XXH3_64bits(data, size); }

Digest pick_digest() noexcept {
#if MODELCAST_DIGEST_AVX2
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) return detail::digest_bytes_avx2;
#endif
  return digest_bytes_baseline;
}

}  // namespace

std::uint64_t digest_bytes(const void* data, std::size_t size) noexcept {
  static const Digest digest = pick_digest();
  return digest(data, size);
}

}  // namespace modelcast
