// Integrity digests of host bytes (a version's blocks): XXH3-64, built for AVX2 where the CPU
// has it (digest_avx2.cpp says why), fast enough to run at memory speed.
#pragma once

#include <cstddef>
#include <cstdint>

namespace modelcast {

// XXH3-64 of `size` bytes. Any thread.
std::uint64_t digest_bytes(const void* data, std::size_t size) noexcept;

}  // namespace modelcast
