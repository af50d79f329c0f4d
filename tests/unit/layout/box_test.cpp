// Boxes: intersection, containment, subtraction (checked element by element against a brute
// force over a small grid) and tensor-parallel shards.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <random>
#include <set>
#include <vector>

#include "core/layout/box.h"
#include "modelcast/error.h"

namespace {

using modelcast::Error;
using modelcast::ErrorCode;
using modelcast::layout::Box;
using modelcast::layout::intersect;
using modelcast::layout::overlaps;
using modelcast::layout::shard_box;
using modelcast::layout::subtract;

TEST(Box, ToStringShowsOffsetToEndPerDimension) {
  EXPECT_EQ(Box({0, 256}, {512, 768}).to_string(), "[0:512, 256:1024]");
  EXPECT_EQ(Box().to_string(), "[]");
  EXPECT_EQ(Box({7}, {0}).to_string(), "[7:7]");
}

TEST(Box, VolumeOfScalarIsOneAndOfAZeroExtentIsZero) {
  EXPECT_EQ(Box().volume(), 1u);
  EXPECT_FALSE(Box().empty());
  EXPECT_EQ(Box({1, 2, 3}, {2, 3, 4}).volume(), 24u);
  EXPECT_TRUE(Box({0, 0}, {5, 0}).empty());
  // Emptiness is an extent of 0, not a volume that wrapped around 2^64.
  EXPECT_FALSE(Box({0, 0}, {std::int64_t{1} << 32, std::int64_t{1} << 32}).empty());
}

TEST(Box, RefusesNegativeMismatchedAndTooHighRank) {
  EXPECT_THROW(Box({-1}, {2}), Error);
  EXPECT_THROW(Box({0}, {-2}), Error);
  EXPECT_THROW(Box({0, 0}, {2}), Error);
  // An end past 2^63 - 1 is refused rather than wrapped.
  EXPECT_THROW(Box({std::numeric_limits<std::int64_t>::max() - 1}, {2}), Error);
  EXPECT_EQ(Box({std::numeric_limits<std::int64_t>::max() - 2}, {2}).end(0), std::numeric_limits<std::int64_t>::max());
  std::vector<std::int64_t> seventeen(17, 1);
  try {
    Box::whole(seventeen);
    FAIL() << "rank 17 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  }
  std::vector<std::int64_t> sixteen(16, 1);
  EXPECT_EQ(Box::whole(sixteen).volume(), 1u);
}

TEST(Box, IntersectionOfOverlappingDisjointTouchingAndNested) {
  Box a({0, 0}, {4, 4});
  EXPECT_EQ(intersect(a, Box({2, 1}, {4, 2})), Box({2, 1}, {2, 2}));
  EXPECT_TRUE(intersect(a, Box({4, 0}, {2, 4})).empty());  // touching at a face shares nothing
  EXPECT_FALSE(overlaps(a, Box({4, 0}, {2, 4})));
  EXPECT_TRUE(intersect(a, Box({5, 5}, {1, 1})).empty());
  EXPECT_EQ(intersect(a, Box({1, 1}, {1, 1})), Box({1, 1}, {1, 1}));
  EXPECT_EQ(intersect(Box(), Box()), Box());
  EXPECT_TRUE(overlaps(Box(), Box()));
  EXPECT_FALSE(overlaps(a, Box({1, 1}, {0, 2})));  // an empty box overlaps nothing
  EXPECT_THROW(intersect(a, Box({0}, {1})), Error);
}

TEST(Box, ContainsAndWithin) {
  Box a({2, 2}, {4, 4});
  EXPECT_TRUE(a.contains(Box({2, 2}, {4, 4})));
  EXPECT_TRUE(a.contains(Box({3, 3}, {3, 1})));
  EXPECT_FALSE(a.contains(Box({3, 3}, {4, 1})));
  EXPECT_FALSE(a.contains(Box({1, 3}, {1, 1})));
  EXPECT_TRUE(a.contains(Box({100, 100}, {0, 0})));
  EXPECT_TRUE(a.within(std::vector<std::int64_t>{6, 6}));
  EXPECT_FALSE(a.within(std::vector<std::int64_t>{6, 5}));
  EXPECT_FALSE(a.within(std::vector<std::int64_t>{6}));
}

// The set of points of `boxes` inside a grid of `n` per side (rank 2 or 3), counted with
// multiplicity so that overlaps between the parts show.
std::multiset<std::vector<std::int64_t>> points(const std::vector<Box>& boxes) {
  std::multiset<std::vector<std::int64_t>> out;
  for (const Box& b : boxes) {
    if (b.empty()) continue;
    std::vector<std::int64_t> i(b.offsets().begin(), b.offsets().end());
    bool more = true;
    while (more) {
      out.insert(i);
      more = false;
      for (std::size_t d = b.rank(); d-- > 0;) {
        if (++i[d] < b.end(d)) {
          more = true;
          break;
        }
        i[d] = b.offset(d);
      }
    }
  }
  return out;
}

TEST(Box, SubtractionMatchesPointSetsOnRandomBoxes) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::int64_t> coordinate(0, 6);
  for (int trial = 0; trial < 2000; ++trial) {
    const std::size_t rank = 1 + trial % 3;
    auto random_box = [&] {
      std::vector<std::int64_t> offset(rank), extent(rank);
      for (std::size_t d = 0; d < rank; ++d) {
        offset[d] = coordinate(rng);
        extent[d] = coordinate(rng) % 4;
      }
      return Box(offset, extent);
    };
    Box a = random_box();
    std::vector<Box> holes{random_box(), random_box()};
    std::vector<Box> parts = subtract(a, holes);
    auto expected = points({a});
    for (const Box& h : holes) {
      for (const auto& p : points({h})) expected.erase(p);
    }
    for (const Box& part : parts) {
      EXPECT_FALSE(part.empty());
      EXPECT_TRUE(a.contains(part));
    }
    ASSERT_EQ(points(parts), expected) << "a " << a.to_string() << " minus " << holes[0].to_string() << ", "
                                       << holes[1].to_string();
  }
}

TEST(Box, SubtractionEdgeCases) {
  Box a({0, 0}, {4, 4});
  EXPECT_TRUE(subtract(a, a).empty());
  EXPECT_TRUE(subtract(a, Box({0, 0}, {10, 10})).empty());
  EXPECT_EQ(subtract(a, Box({4, 4}, {1, 1})), std::vector<Box>{a});  // disjoint: a itself
  EXPECT_EQ(subtract(a, Box({2, 0}, {2, 4})), std::vector<Box>{Box({0, 0}, {2, 4})});
  EXPECT_EQ(subtract(a, Box({1, 1}, {2, 2})).size(), 4u);  // a ring
  EXPECT_TRUE(subtract(Box(), Box()).empty());
  EXPECT_EQ(subtract(Box(), std::vector<Box>{}), std::vector<Box>{Box()});
  EXPECT_TRUE(subtract(Box({0}, {0}), Box({5}, {1})).empty());  // nothing of an empty box is left
  EXPECT_THROW(subtract(a, Box({0}, {1})), Error);
}

TEST(Box, ShardsFollowTorchChunk) {
  std::vector<std::int64_t> shape{1024, 512};
  EXPECT_EQ(shard_box(shape, 0, 1, 2), Box({512, 0}, {512, 512}));
  EXPECT_EQ(shard_box(shape, 1, 3, 4), Box({0, 384}, {1024, 128}));
  // torch.chunk(arange(10), 4): sizes 3, 3, 3, 1; of 5 into 4: 2, 2, 1, 0.
  std::vector<std::int64_t> ten{10};
  EXPECT_EQ(shard_box(ten, 0, 0, 4), Box({0}, {3}));
  EXPECT_EQ(shard_box(ten, 0, 3, 4), Box({9}, {1}));
  std::vector<std::int64_t> five{5};
  EXPECT_EQ(shard_box(five, 0, 2, 4), Box({4}, {1}));
  EXPECT_EQ(shard_box(five, 0, 3, 4), Box({5}, {0}));
  // The shards of any split tile the tensor.
  for (std::int64_t size = 0; size < 20; ++size) {
    for (std::size_t n = 1; n < 8; ++n) {
      std::vector<std::int64_t> s{3, size};
      std::int64_t next = 0;
      for (std::size_t k = 0; k < n; ++k) {
        Box b = shard_box(s, 1, k, n);
        EXPECT_EQ(b.offset(1), next);
        next = b.end(1);
      }
      EXPECT_EQ(next, size);
    }
  }
  EXPECT_THROW(shard_box(shape, 2, 0, 2), Error);
  EXPECT_THROW(shard_box(shape, 0, 2, 2), Error);
  EXPECT_THROW(shard_box(shape, 0, 0, 0), Error);
}

// Counts near 2^63 and 2^64 overflowed a signed ceil: part 0 of 8 rows was empty, or its extent
// negative (every version then rejected). torch.chunk gives each of the first 8 parts one row.
TEST(Box, ShardsOfHugeCountsAreOneRowEachThenEmpty) {
  std::vector<std::int64_t> eight{8, 2};
  for (std::size_t n : {std::size_t{16}, std::size_t{INT64_MAX}, std::size_t{1} << 63, SIZE_MAX}) {
    EXPECT_EQ(shard_box(eight, 0, 0, n), Box({0, 0}, {1, 2})) << n;
    EXPECT_EQ(shard_box(eight, 0, 7, n), Box({7, 0}, {1, 2})) << n;
    EXPECT_EQ(shard_box(eight, 0, 8, n), Box({8, 0}, {0, 2})) << n;
    EXPECT_EQ(shard_box(eight, 0, n - 1, n), Box({8, 0}, {0, 2})) << n;
  }
  std::vector<std::int64_t> huge{INT64_MAX};
  EXPECT_EQ(shard_box(huge, 0, 1, 2), Box({INT64_MAX / 2 + 1}, {INT64_MAX / 2}));
}

}  // namespace
