// pmix64 digests built from byte ranges landing in any order equal the digest of the whole
// tensor, wherever the ranges cut the tensors' 8-byte words.
#include <algorithm>
#include <random>

#include <gtest/gtest.h>

#include "device/pmix64.h"
#include "device/pmix64_accumulator.h"

namespace pmix64 = modelcast::pmix64;

namespace {

struct Layout {
  std::vector<std::byte> buffer;
  std::vector<pmix64::Range> tensors;
};

// Tensors of assorted sizes (empty, shorter than a word, not a multiple of 8) at offsets that are
// not word-aligned, with gaps between them.
Layout make_layout(std::mt19937_64& rng) {
  Layout l;
  std::uint64_t at = 3;
  for (std::uint64_t size : {0ull, 5ull, 8ull, 13ull, 4096ull, 70001ull, 1ull, 65536ull}) {
    l.tensors.push_back({at, size});
    at += size + (rng() % 11);
  }
  l.buffer.resize(at + 7);
  for (auto& b : l.buffer) b = static_cast<std::byte>(rng());
  return l;
}

std::vector<std::uint64_t> whole_digests(const Layout& l) {
  std::vector<std::uint64_t> d;
  for (const auto& t : l.tensors) d.push_back(pmix64::digest_host(l.buffer.data() + t.offset, t.size));
  return d;
}

// The buffer cut at `cuts` (sorted, inside it), added in a shuffled order.
std::vector<std::uint64_t> accumulated(const Layout& l, std::vector<std::uint64_t> cuts, std::mt19937_64& rng) {
  cuts.insert(cuts.begin(), 0);
  cuts.push_back(l.buffer.size());
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  for (std::size_t i = 0; i + 1 < cuts.size(); ++i) ranges.emplace_back(cuts[i], cuts[i + 1] - cuts[i]);
  std::shuffle(ranges.begin(), ranges.end(), rng);
  pmix64::Accumulator acc(l.tensors);
  for (auto [offset, length] : ranges) acc.add(l.buffer.data(), offset, length);
  return acc.finish(l.buffer.data());
}

}  // namespace

TEST(Pmix64Accumulator, RangesInAnyOrderGiveTheWholeTensorsDigests) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 200; ++round) {
    Layout l = make_layout(rng);
    std::vector<std::uint64_t> cuts;
    const int n = 1 + static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) cuts.push_back(1 + rng() % (l.buffer.size() - 1));
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    ASSERT_EQ(accumulated(l, cuts, rng), whole_digests(l)) << "round " << round;
  }
}

TEST(Pmix64Accumulator, RangesShorterThanAWordAddEachCutWordOnce) {
  std::mt19937_64 rng(11);
  Layout l = make_layout(rng);
  std::vector<std::uint64_t> cuts;
  for (std::uint64_t at = 3; at < l.buffer.size(); at += 3) cuts.push_back(at);  // 3-byte ranges
  EXPECT_EQ(accumulated(l, cuts, rng), whole_digests(l));
}

TEST(Pmix64Accumulator, ACorruptByteChangesItsTensorsDigestAndNoOther) {
  std::mt19937_64 rng(3);
  Layout l = make_layout(rng);
  const auto& big = l.tensors[5];
  const auto expected = whole_digests(l);
  pmix64::Accumulator acc(l.tensors);
  const std::uint64_t half = big.offset + big.size / 2;
  l.buffer[big.offset + 100] ^= std::byte{1};
  acc.add(l.buffer.data(), 0, half);
  acc.add(l.buffer.data(), half, l.buffer.size() - half);
  auto got = acc.finish(l.buffer.data());
  EXPECT_NE(got[5], expected[5]);
  for (std::size_t t = 0; t < got.size(); ++t) {
    if (t != 5) {
      EXPECT_EQ(got[t], expected[t]) << t;
    }
  }
}

TEST(Pmix64Accumulator, SumWordsOfTheWholeTensorIsItsDigestsSum) {
  std::vector<std::byte> bytes(1001);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::byte>(i * 37);
  const auto sum = pmix64::sum_words(bytes.data(), bytes.size(), 0, bytes.size());
  pmix64::Accumulator acc({{0, bytes.size()}});
  acc.add(bytes.data(), 0, bytes.size());
  EXPECT_EQ(acc.finish(bytes.data())[0], pmix64::digest_host(bytes.data(), bytes.size()));
  EXPECT_EQ(pmix64::sum_words(bytes.data(), bytes.size(), 1, 8), 0u) << "no whole word inside bytes [1, 8)";
  EXPECT_NE(sum, 0u);
}
