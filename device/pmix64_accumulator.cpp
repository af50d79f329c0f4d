#include "device/pmix64_accumulator.h"

#include <algorithm>
#include <cstring>

#include "device/pmix64_mix.h"

namespace modelcast::pmix64 {
namespace {

std::uint64_t word_at(const std::byte* tensor, std::uint64_t size, std::uint64_t index) noexcept {
  std::uint64_t w = 0;
  const std::uint64_t at = index * 8;
  std::memcpy(&w, tensor + at, std::min<std::uint64_t>(8, size - at));  // little-endian, as pmix64.cpp
  return w;
}

}  // namespace

std::uint64_t sum_words(const std::byte* tensor, std::uint64_t size, std::uint64_t from, std::uint64_t to) noexcept {
  const std::uint64_t first = (from + 7) / 8;
  const std::uint64_t end = to >= size ? (size + 7) / 8 : to / 8;  // words [first, end)
  std::uint64_t sum = 0;
  std::uint64_t i = first;
  const std::uint64_t full_end = std::min(end, size / 8);
  for (; i < full_end; ++i) {
    std::uint64_t w;
    std::memcpy(&w, tensor + i * 8, 8);
    sum += term(i, w);
  }
  for (; i < end; ++i) sum += term(i, word_at(tensor, size, i));  // the short last word
  return sum;
}

Accumulator::Accumulator(std::vector<Range> tensors) : tensors_(std::move(tensors)), sums_(tensors_.size(), 0) {
  by_offset_.resize(tensors_.size());
  for (std::size_t i = 0; i < by_offset_.size(); ++i) by_offset_[i] = i;
  std::sort(by_offset_.begin(), by_offset_.end(),
            [&](std::size_t a, std::size_t b) { return tensors_[a].offset < tensors_[b].offset; });
}

void Accumulator::add(const std::byte* base, std::uint64_t offset, std::uint64_t length) {
  const std::uint64_t end = offset + length;
  // The first tensor that may reach into the range: the last one starting at or before it.
  auto it = std::upper_bound(by_offset_.begin(), by_offset_.end(), offset,
                             [&](std::uint64_t at, std::size_t t) { return at < tensors_[t].offset; });
  if (it != by_offset_.begin()) --it;
  for (; it != by_offset_.end() && tensors_[*it].offset < end; ++it) {
    const Range& t = tensors_[*it];
    const std::uint64_t t_end = t.offset + t.size;
    if (t.size == 0 || t_end <= offset) continue;
    const std::uint64_t from = std::max(offset, t.offset) - t.offset;
    const std::uint64_t to = std::min(end, t_end) - t.offset;
    sums_[*it] += sum_words(base + t.offset, t.size, from, to);
    if (from % 8 != 0) cut_words_.emplace(*it, from / 8);
    if (to < t.size && to % 8 != 0) cut_words_.emplace(*it, to / 8);
  }
}

std::vector<std::uint64_t> Accumulator::finish(const std::byte* base) const {
  std::vector<std::uint64_t> sums = sums_;
  for (const auto& [t, index] : cut_words_) {
    sums[t] += term(index, word_at(base + tensors_[t].offset, tensors_[t].size, index));
  }
  std::vector<std::uint64_t> digests(tensors_.size());
  for (std::size_t t = 0; t < tensors_.size(); ++t) digests[t] = pmix64::finish(sums[t], tensors_[t].size);
  return digests;
}

}  // namespace modelcast::pmix64
