#include "core/producer/snapshot_copy.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) || defined(_M_X64)
#include <emmintrin.h>  // SSE2: part of every x86-64 CPU
#define MODELCAST_HAVE_STREAMING_STORES 1
#endif

namespace modelcast {

void snapshot_copy(void* dst_ptr, const void* src_ptr, std::size_t n, bool streaming) noexcept {
#if MODELCAST_HAVE_STREAMING_STORES
  if (streaming && n >= 4096) {
    auto* dst = static_cast<unsigned char*>(dst_ptr);
    const auto* src = static_cast<const unsigned char*>(src_ptr);
    std::size_t head = std::min(n, (16 - reinterpret_cast<std::uintptr_t>(dst) % 16) % 16);
    std::memcpy(dst, src, head);
    dst += head;
    src += head;
    n -= head;
    for (std::size_t blocks = n / 64; blocks > 0; --blocks) {
      __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
      __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 16));
      __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 32));
      __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 48));
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst), a);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 16), b);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 32), c);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 48), d);
      src += 64;
      dst += 64;
    }
    // Streaming stores are weakly ordered: fence so the slot is complete before it is handed
    // to other threads.
    _mm_sfence();
    std::memcpy(dst, src, n % 64);
    return;
  }
#endif
  (void)streaming;
  std::memcpy(dst_ptr, src_ptr, n);
}

}  // namespace modelcast
