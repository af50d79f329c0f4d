// pmix64 digests of the tensors of a buffer, taken from byte ranges as they land, in any order:
// what lets a host consumer check a device producer's version while the rest still arrives,
// instead of hashing the whole model at a few GB/s once the last byte is in.
//
// pmix64 sums one term per 8-byte word (pmix64.h), so a tensor's sum can be built from any split
// of its bytes. A word cut by a range's edge is left out of both ranges' sums and recorded; it is
// added once, when every range is in (finish).
#pragma once

#include <cstddef>
#include <cstdint>
#include <set>
#include <span>
#include <utility>
#include <vector>

#include "device/pmix64.h"

namespace modelcast::pmix64 {

class Accumulator {
 public:
  // `tensors`: where each tensor lies in the buffer (any order, disjoint). The digests come back
  // in this order.
  explicit Accumulator(std::vector<Range> tensors);

  // Adds the words of every tensor that lie wholly inside [offset, offset + length) of the buffer
  // at `base`. Each byte of the buffer is to be added once; ranges may come in any order.
  void add(const std::byte* base, std::uint64_t offset, std::uint64_t length);

  // The digests, equal to digest_host() of each tensor, once every byte of every tensor has been
  // added; reads the words cut by range edges from `base`.
  std::vector<std::uint64_t> finish(const std::byte* base) const;

 private:
  std::vector<Range> tensors_;
  std::vector<std::size_t> by_offset_;  // indices into tensors_, by offset
  std::vector<std::uint64_t> sums_;
  std::set<std::pair<std::size_t, std::uint64_t>> cut_words_;  // (tensor, word index)
};

// The sum of the terms of the words of a tensor of `size` bytes at `tensor` that lie wholly
// inside its bytes [from, to) (the last word, shorter than 8 bytes, ends at `size`).
std::uint64_t sum_words(const std::byte* tensor, std::uint64_t size, std::uint64_t from, std::uint64_t to) noexcept;

}  // namespace modelcast::pmix64
