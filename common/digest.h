// Integrity digests of host bytes (a version's blocks): XXH3-64 from libxxhash, fast enough to
// run at memory speed.
#pragma once

#include <cstddef>
#include <cstdint>

namespace modelcast {

std::uint64_t digest_bytes(const void* data, std::size_t size) noexcept;

}  // namespace modelcast
