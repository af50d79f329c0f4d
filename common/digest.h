// Integrity digests of host bytes (a version's blocks): XXH3-64, built for AVX2 where the CPU
// has it (digest_avx2.cpp says why), fast enough to run at memory speed.
#pragma once

#include <cstddef>
#include <cstdint>

namespace modelcast {

// XXH3-64 of `size` bytes. Any thread.
std::uint64_t digest_bytes(const void* data, std::size_t size) noexcept;

// Bytes that are not contiguous but hashed as if they were, in order.
struct DigestPiece {
  const void* data = nullptr;
  std::size_t size = 0;
};
// XXH3-64 of the pieces' bytes one after another: digest_bytes() of their concatenation, bit for
// bit (XXH3's streaming form). Any thread.
std::uint64_t digest_pieces(const DigestPiece* pieces, std::size_t count) noexcept;

}  // namespace modelcast
