#include "common/digest.h"

#include <xxhash.h>

namespace modelcast {

std::uint64_t digest_bytes(const void* data, std::size_t size) noexcept { return XXH3_64bits(data, size); }

}  // namespace modelcast
