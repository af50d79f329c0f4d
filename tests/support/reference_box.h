// Test references for tensors kept in parts: the box of a row-major tensor cut element by element
// (independent of the layout library the code under test uses) and torch.chunk's split.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace testing_support {

// Bytes of box [offset, offset + extent) of a row-major tensor of `shape` whose elements are
// `element_size` bytes at `bytes`, in row-major order.
inline std::vector<std::byte> cut_box(const std::byte* bytes, const std::vector<std::int64_t>& shape,
                                      std::size_t element_size, const std::vector<std::int64_t>& offset,
                                      const std::vector<std::int64_t>& extent) {
  const std::size_t rank = shape.size();
  std::int64_t volume = 1;
  for (auto e : extent) volume *= e;
  std::vector<std::byte> out;
  out.reserve(static_cast<std::size_t>(volume) * element_size);
  std::vector<std::int64_t> index(rank, 0);
  for (std::int64_t n = 0; n < volume; ++n) {
    std::int64_t flat = 0;
    for (std::size_t d = 0; d < rank; ++d) flat = flat * shape[d] + offset[d] + index[d];
    const auto* from = bytes + flat * static_cast<std::int64_t>(element_size);
    out.insert(out.end(), from, from + element_size);
    for (std::size_t d = rank; d-- > 0;) {
      if (++index[d] < extent[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

// torch.chunk's part k of n of a dimension of `size`: (offset, extent).
inline std::pair<std::int64_t, std::int64_t> chunk_of(std::int64_t size, std::size_t k, std::size_t n) {
  const std::int64_t step = (size + static_cast<std::int64_t>(n) - 1) / static_cast<std::int64_t>(n);
  const std::int64_t begin = std::min<std::int64_t>(size, step * static_cast<std::int64_t>(k));
  return {begin, std::min<std::int64_t>(size, begin + step) - begin};
}

}  // namespace testing_support
