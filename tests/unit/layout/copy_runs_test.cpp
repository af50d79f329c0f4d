// Copy runs: the run shapes the data path relies on (one run for a dim-0 slice, one per row for
// a dim-1 half), and random boxes checked by copying bytes with the runs.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "core/layout/copy_runs.h"
#include "modelcast/error.h"

namespace {

using modelcast::Error;
using modelcast::layout::append_copy_runs;
using modelcast::layout::Box;
using modelcast::layout::copy_runs;
using modelcast::layout::CopyRun;
using modelcast::layout::append_strided_runs;
using modelcast::layout::StridedRun;

TEST(CopyRuns, Dim0SliceOfAWholeTensorIsOneRun) {
  Box whole({0, 0}, {1024, 256});
  Box slice({512, 0}, {512, 256});
  EXPECT_EQ(copy_runs(whole, slice, slice, 4), (std::vector<CopyRun>{{512u * 256 * 4, 0, 512u * 256 * 4}}));
  EXPECT_EQ(copy_runs(whole, whole, whole, 2), (std::vector<CopyRun>{{0, 0, 1024u * 256 * 2}}));
}

TEST(CopyRuns, Dim1HalfIsOneRunPerRow) {
  Box whole({0, 0}, {4, 8});
  Box half({0, 4}, {4, 4});
  auto runs = copy_runs(whole, half, half, 2);
  ASSERT_EQ(runs.size(), 4u);
  for (std::uint64_t r = 0; r < 4; ++r) EXPECT_EQ(runs[r], (CopyRun{(r * 8 + 4) * 2, r * 4 * 2, 8}));
  // From the half back into the whole: the same runs, sides swapped.
  auto back = copy_runs(half, whole, half, 2);
  ASSERT_EQ(back.size(), 4u);
  for (std::uint64_t r = 0; r < 4; ++r) EXPECT_EQ(back[r], (CopyRun{r * 4 * 2, (r * 8 + 4) * 2, 8}));
}

TEST(CopyRuns, RowsOfACutAreOneStridedRun) {
  Box whole({0, 0}, {4, 8});
  Box half({0, 4}, {4, 4});
  std::vector<StridedRun> runs;
  append_strided_runs(whole, half, half, 2, runs);
  EXPECT_EQ(runs, (std::vector<StridedRun>{{4 * 2, 0, 8, 4, 8 * 2, 4 * 2}}));
  // Rank 3: a box cutting dims 1 and 2 walks dim 0 and strides along dim 1.
  Box cube({0, 0, 0}, {3, 4, 5});
  Box inner({1, 1, 1}, {2, 2, 3});
  runs.clear();
  append_strided_runs(cube, inner, inner, 1, runs);
  EXPECT_EQ(runs, (std::vector<StridedRun>{{20 + 5 + 1, 0, 3, 2, 5, 3}, {40 + 5 + 1, 6, 3, 2, 5, 3}}));
  // A slice of one row is a plain run with strides 0.
  runs.clear();
  append_strided_runs(whole, whole, Box({2, 1}, {1, 3}), 4, runs);
  EXPECT_EQ(runs, (std::vector<StridedRun>{{(16 + 1) * 4, (16 + 1) * 4, 12, 1, 0, 0}}));
}

TEST(CopyRuns, FullInnerDimensionsCoalesceOutward) {
  // Region spans dims 1 and 2 of both sides fully: each dim-0 index is one run of 3*5 elements,
  // and since src and dst both span dim 0 exactly too, it is all one run.
  Box src({2, 0, 0}, {4, 3, 5});
  EXPECT_EQ(copy_runs(src, src, src, 1).size(), 1u);
  // A dim-1 strip of a rank-3 tensor: runs of dim 2 only, per (dim 0, dim 1) index.
  Box strip({2, 1, 0}, {4, 1, 5});
  EXPECT_EQ(copy_runs(src, strip, strip, 1).size(), 4u);
}

TEST(CopyRuns, ScalarAndEmpty) {
  EXPECT_EQ(copy_runs(Box(), Box(), Box(), 8), (std::vector<CopyRun>{{0, 0, 8}}));
  Box a({0}, {4});
  EXPECT_TRUE(copy_runs(a, a, Box({2}, {0}), 4).empty());
}

TEST(CopyRuns, RefusesRegionOutsideEitherSideAndBadArguments) {
  Box a({0, 0}, {4, 4});
  Box b({2, 0}, {4, 4});
  EXPECT_THROW(copy_runs(a, b, Box({0, 0}, {3, 4}), 4), Error);  // outside b
  EXPECT_THROW(copy_runs(a, b, Box({2, 0}, {3, 4}), 4), Error);  // outside a
  EXPECT_THROW(copy_runs(a, b, Box({2, 0}, {2, 4}), 0), Error);
  EXPECT_THROW(copy_runs(a, Box({0}, {4}), Box({0}, {1}), 4), Error);
}

TEST(CopyRuns, AppendExtendsAContinuingRun) {
  Box whole({0}, {16});
  std::vector<CopyRun> out;
  append_copy_runs(whole, whole, Box({0}, {8}), 1, out);
  append_copy_runs(whole, whole, Box({8}, {8}), 1, out);
  EXPECT_EQ(out, (std::vector<CopyRun>{{0, 0, 16}}));
}

// Calls f(point) for every point of `box`, row-major.
template <typename F>
void for_each_point(const Box& box, F&& f) {
  if (box.empty()) return;
  std::vector<std::int64_t> i(box.offsets().begin(), box.offsets().end());
  while (true) {
    f(i);
    std::size_t d = box.rank();
    while (true) {
      if (d == 0) return;
      --d;
      if (++i[d] < box.end(d)) break;
      i[d] = box.offset(d);
    }
  }
}

// Byte b of the element at global point i: a value derived from both, so that a byte in the
// wrong place shows.
std::uint8_t byte_at(const std::vector<std::int64_t>& i, const std::vector<std::int64_t>& global, std::size_t b) {
  std::uint64_t flat = 0;
  for (std::size_t d = 0; d < i.size(); ++d) flat = flat * static_cast<std::uint64_t>(global[d]) + static_cast<std::uint64_t>(i[d]);
  return static_cast<std::uint8_t>((flat * 31 + b * 7 + 1) % 251);
}

// A buffer holding `box` of the global tensor; with `only`, the bytes outside `only` are 0.
std::vector<std::uint8_t> fill(const Box& box, const std::vector<std::int64_t>& global, std::size_t element_size,
                               const Box* only = nullptr) {
  std::vector<std::uint8_t> out;
  for_each_point(box, [&](const std::vector<std::int64_t>& i) {
    bool inside = true;
    if (only != nullptr) {
      for (std::size_t d = 0; d < i.size(); ++d) inside = inside && i[d] >= only->offset(d) && i[d] < only->end(d);
    }
    for (std::size_t b = 0; b < element_size; ++b) out.push_back(inside ? byte_at(i, global, b) : 0);
  });
  return out;
}

TEST(CopyRuns, RandomBoxesCopyEveryByteToItsPlace) {
  std::mt19937 rng(11);
  int checked = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const std::size_t rank = 1 + trial % 4;
    const std::size_t element_size = std::size_t{1} << (trial % 4);
    std::vector<std::int64_t> global(rank);
    for (auto& g : global) g = 1 + static_cast<std::int64_t>(rng() % 6);
    auto random_box = [&] {
      std::vector<std::int64_t> offset(rank), extent(rank);
      for (std::size_t d = 0; d < rank; ++d) {
        offset[d] = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(global[d]));
        extent[d] = 1 + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(global[d] - offset[d]));
      }
      return Box(offset, extent);
    };
    Box src = random_box();
    Box dst = random_box();
    // Keep the trial when src and dst meet; the region is a random sub-box of their overlap.
    Box common = modelcast::layout::intersect(src, dst);
    if (common.empty()) continue;
    std::vector<std::int64_t> offset(rank), extent(rank);
    for (std::size_t d = 0; d < rank; ++d) {
      offset[d] = common.offset(d) + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(common.extent(d)));
      extent[d] = 1 + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(common.end(d) - offset[d]));
    }
    Box region(offset, extent);

    auto source = fill(src, global, element_size);
    std::vector<std::uint8_t> target(dst.volume() * element_size, 0);
    std::uint64_t copied = 0;
    for (const CopyRun& run : copy_runs(src, dst, region, element_size)) {
      ASSERT_LE(run.src_offset + run.bytes, source.size());
      ASSERT_LE(run.dst_offset + run.bytes, target.size());
      std::memcpy(target.data() + run.dst_offset, source.data() + run.src_offset, run.bytes);
      copied += run.bytes;
    }
    EXPECT_EQ(copied, region.volume() * element_size);
    ++checked;
    ASSERT_EQ(target, fill(dst, global, element_size, &region))
        << "src " << src.to_string() << " dst " << dst.to_string() << " region " << region.to_string();
  }
  EXPECT_GT(checked, 1000);  // most trials' boxes meet
}

}  // namespace
