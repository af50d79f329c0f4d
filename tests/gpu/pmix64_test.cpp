// pmix64-v1 on the host: its definition, its guarantees, and the segment plan the kernel uses.
#include "device/pmix64.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "device/pmix64_mix.h"
#include "modelcast/error.h"

namespace modelcast::pmix64 {
namespace {

std::vector<unsigned char> random_bytes(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<unsigned char> v(n);
  for (auto& b : v) b = static_cast<unsigned char>(rng());
  return v;
}

// The definition written out independently: bytes assembled one by one, no memcpy.
std::uint64_t naive(const unsigned char* p, std::size_t n) {
  std::uint64_t sum = 0;
  for (std::size_t word = 0; word * 8 < n; ++word) {
    std::uint64_t w = 0;
    for (std::size_t b = 0; b < 8 && word * 8 + b < n; ++b) w |= std::uint64_t{p[word * 8 + b]} << (8 * b);
    std::uint64_t z = w ^ ((word + 1) * 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    sum += z ^ (z >> 31);
  }
  return mix(sum + mix(n + kSizeKey));
}

// What the kernel computes, block by block, for one segment (16-byte pairs, then the tail).
std::uint64_t kernel_model(const unsigned char* base, const Segment& s) {
  const unsigned char* p = base + s.offset;
  std::uint64_t acc = 0;
  const std::uint64_t pairs = s.bytes / 16;
  for (std::uint64_t i = 0; i < pairs; ++i) {
    std::uint64_t a, b;
    std::memcpy(&a, p + 16 * i, 8);
    std::memcpy(&b, p + 16 * i + 8, 8);
    acc += term(s.first_word + 2 * i, a) + term(s.first_word + 2 * i + 1, b);
  }
  std::uint64_t word = s.first_word + 2 * pairs;
  for (std::uint64_t at = 16 * pairs; at < s.bytes; at += 8, ++word) {
    std::uint64_t w = 0;
    std::memcpy(&w, p + at, std::min<std::uint64_t>(8, s.bytes - at));
    acc += term(word, w);
  }
  return acc;
}

TEST(Pmix64, HostMatchesTheDefinition) {
  const auto data = random_bytes(4096 + 64, 1);
  for (std::size_t size : {0, 1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 1000, 4096}) {
    for (std::size_t misalign : {0, 1, 3}) {
      EXPECT_EQ(digest_host(data.data() + misalign, size), naive(data.data() + misalign, size))
          << "size " << size << " misalign " << misalign;
    }
  }
}

TEST(Pmix64, FrozenValues) {
  // The digest travels in manifests: changing its definition is a wire change. These pin it
  // (values computed by an independent Python implementation of the definition in pmix64.h).
  std::vector<unsigned char> counting(1000);
  for (std::size_t i = 0; i < counting.size(); ++i) counting[i] = static_cast<unsigned char>(i);
  EXPECT_EQ(digest_host(nullptr, 0), 0xa385577d708904ccull);
  EXPECT_EQ(digest_host(counting.data(), 1000), 0xc9bbbface3595a76ull);
}

TEST(Pmix64, EverySingleByteChangeIsDetected) {
  auto data = random_bytes(100, 2);
  const std::uint64_t original = digest_host(data.data(), data.size());
  for (std::size_t i = 0; i < data.size(); ++i) {
    for (unsigned flip : {0x01u, 0x80u, 0xFFu, 0x5Au}) {
      data[i] ^= static_cast<unsigned char>(flip);
      ASSERT_NE(digest_host(data.data(), data.size()), original) << "byte " << i << " ^ " << flip;
      data[i] ^= static_cast<unsigned char>(flip);
    }
  }
  EXPECT_EQ(digest_host(data.data(), data.size()), original);
}

TEST(Pmix64, OrderAndLengthCount) {
  auto data = random_bytes(64, 3);
  const std::uint64_t original = digest_host(data.data(), 64);
  std::vector<unsigned char> swapped(data);
  std::swap_ranges(swapped.begin(), swapped.begin() + 8, swapped.begin() + 8);  // swap words 0 and 1
  ASSERT_NE(std::memcmp(swapped.data(), data.data(), 64), 0);
  EXPECT_NE(digest_host(swapped.data(), 64), original);
  std::vector<unsigned char> zeros(16, 0);
  EXPECT_NE(digest_host(zeros.data(), 15), digest_host(zeros.data(), 16));  // same padded words, other size
  EXPECT_NE(digest_host(zeros.data(), 8), digest_host(zeros.data(), 0));
}

TEST(Pmix64, SegmentPlanCoversEachTensorExactly) {
  const std::vector<Range> tensors = {
      {0, 3 * kSegmentBytes + 24}, {3 * kSegmentBytes + 256, 0}, {4 * kSegmentBytes, 5}, {5 * kSegmentBytes, kSegmentBytes}};
  const auto segments = plan_segments(tensors);
  std::vector<std::uint64_t> covered(tensors.size(), 0);
  for (const Segment& s : segments) {
    ASSERT_LT(s.tensor, tensors.size());
    const Range& t = tensors[s.tensor];
    EXPECT_EQ(s.offset, t.offset + covered[s.tensor]) << "segments of a tensor are contiguous, in order";
    EXPECT_EQ(s.first_word * 8, covered[s.tensor]);
    EXPECT_GT(s.bytes, 0u);
    EXPECT_LE(s.bytes, kSegmentBytes);
    covered[s.tensor] += s.bytes;
  }
  for (std::size_t t = 0; t < tensors.size(); ++t) EXPECT_EQ(covered[t], tensors[t].size) << "tensor " << t;
  EXPECT_EQ(segments.size(), 4u + 0u + 1u + 1u);
}

// Splitting into segments and adding the kernel's per-block sums in any order gives the host
// digest: what makes the GPU result independent of the launch shape.
TEST(Pmix64, SegmentedSumsGiveTheHostDigest) {
  const std::uint64_t sizes[] = {kSegmentBytes * 2 + 13, 40, 0, kSegmentBytes};
  std::vector<Range> tensors;
  std::uint64_t at = 0;
  for (auto size : sizes) {
    tensors.push_back({at, size});
    at += (size + 255) / 256 * 256;
  }
  const auto buffer = random_bytes(at + 16, 4);
  auto segments = plan_segments(tensors);
  std::shuffle(segments.begin(), segments.end(), std::mt19937(5));
  std::vector<std::uint64_t> sums(tensors.size(), 0);
  for (const Segment& s : segments) sums[s.tensor] += kernel_model(buffer.data(), s);
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    EXPECT_EQ(finish(sums[t], tensors[t].size), digest_host(buffer.data() + tensors[t].offset, tensors[t].size))
        << "tensor " << t;
  }
}

TEST(Pmix64, DeviceEntryPointMatchesTheBuild) {
#if MODELCAST_HAVE_CUDA
  EXPECT_TRUE(device_digest_available());
#else
  EXPECT_FALSE(device_digest_available());
  const Range r{0, 8};
  try {
    digest_device(0, nullptr, std::span(&r, 1), nullptr);
    FAIL() << "a build without CUDA cannot digest device memory";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kState);
  }
#endif
}

}  // namespace
}  // namespace modelcast::pmix64
