// XXH3-64 compiled for AVX2, chosen at run time by digest.cpp on CPUs that have it.
//
// Debian's libxxhash is built for the x86-64 baseline (SSE2): 68 ms a GiB on this project's
// machine, against 38 ms for the same function built for AVX2, and the block digests are on
// the path of every version (the producer's digest thread, each consumer's check of each
// block). The library's own runtime dispatch (XXH3_64bits_dispatch) is as fast, but leaves the
// upper halves of the AVX registers dirty: SSE code run afterwards on the same thread became
// three times slower here. Compiled here, GCC ends the function with vzeroupper.
// The same xxhash.h as the library's (libxxhash-dev), inlined: the result is XXH3-64 bit for bit
// (XXH3 is defined independently of the vector unit; tests/unit/manifest_test.cpp checks it
// against the library). This file includes nothing else of ours but digest.h's plain
// declarations, so no inline function of another header is compiled for AVX2 and shared with
// code that runs on older CPUs.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstddef>
#include <cstdint>

#include "common/digest.h"

namespace modelcast::detail {

std::uint64_t digest_bytes_avx2(const void* data, std::size_t size) noexcept { return XXH3_64bits(data, size); }

// digest.cpp's baseline, word for word: the same source compiled for AVX2 is the point.
std::uint64_t digest_pieces_avx2(const DigestPiece* pieces, std::size_t count) noexcept {
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  for (std::size_t i = 0; i < count; ++i) XXH3_64bits_update(&state, pieces[i].data, pieces[i].size);
  return XXH3_64bits_digest(&state);
}

}  // namespace modelcast::detail
