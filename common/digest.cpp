#include "common/digest.h"

// The streaming state on the stack (its layout is the header's, which matches the library of the
// same package).
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

namespace modelcast {

#if MODELCAST_DIGEST_AVX2
namespace detail {
std::uint64_t digest_bytes_avx2(const void* data, std::size_t size) noexcept;  // digest_avx2.cpp
std::uint64_t digest_pieces_avx2(const DigestPiece* pieces, std::size_t count) noexcept;
}  // namespace detail
#endif

namespace {

using Digest = std::uint64_t (*)(const void*, std::size_t) noexcept;
using DigestOfPieces = std::uint64_t (*)(const DigestPiece*, std::size_t) noexcept;

std::uint64_t digest_bytes_baseline(const void* data, std::size_t size) noexcept { return XXH3_64bits(data, size); }

std::uint64_t digest_pieces_baseline(const DigestPiece* pieces, std::size_t count) noexcept {
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  for (std::size_t i = 0; i < count; ++i) XXH3_64bits_update(&state, pieces[i].data, pieces[i].size);
  return XXH3_64bits_digest(&state);
}

bool has_avx2() noexcept {
#if MODELCAST_DIGEST_AVX2
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2");
#else
  return false;
#endif
}

Digest pick_digest() noexcept {
#if MODELCAST_DIGEST_AVX2
  if (has_avx2()) return detail::digest_bytes_avx2;
#endif
  return digest_bytes_baseline;
}

DigestOfPieces pick_digest_pieces() noexcept {
#if MODELCAST_DIGEST_AVX2
  if (has_avx2()) return detail::digest_pieces_avx2;
#endif
  return digest_pieces_baseline;
}

}  // namespace

std::uint64_t digest_bytes(const void* data, std::size_t size) noexcept {
  static const Digest digest = pick_digest();
  return digest(data, size);
}

std::uint64_t digest_pieces(const DigestPiece* pieces, std::size_t count) noexcept {
  static const DigestOfPieces digest = pick_digest_pieces();
  return digest(pieces, count);
}

}  // namespace modelcast
