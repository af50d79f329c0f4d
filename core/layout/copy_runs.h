// The contiguous byte runs that copy a box of a tensor from one row-major buffer to another.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/layout/box.h"

namespace modelcast::layout {

// One memcpy: `bytes` bytes from src_offset in the source buffer to dst_offset in the destination.
struct CopyRun {
  std::uint64_t src_offset = 0;
  std::uint64_t dst_offset = 0;
  std::uint64_t bytes = 0;
  friend bool operator==(const CopyRun&, const CopyRun&) = default;
};

// `count` copies of `bytes` bytes, copy i from src_offset + i * src_stride to dst_offset + i *
// dst_stride: the runs along one dimension in one entry, so that a box cut across the rows of
// another (a dim-1 shard of dim-0 pieces) costs an entry per piece, not one per row. count 1
// has strides 0.
struct StridedRun {
  std::uint64_t src_offset = 0;
  std::uint64_t dst_offset = 0;
  std::uint64_t bytes = 0;
  std::uint64_t count = 1;
  std::uint64_t src_stride = 0;
  std::uint64_t dst_stride = 0;
  friend bool operator==(const StridedRun&, const StridedRun&) = default;
};

// The runs that copy `region` from a buffer holding box `src` (row-major, contiguous, element
// size `element_size`) into a buffer holding box `dst`, in increasing source and destination
// order. Dimensions that `region` spans fully on both sides are merged into one run, so a dim-0
// slice of a whole tensor is one run and a dim-1 half of an [R, C] tensor R runs. An empty region
// gives none. Throws Error(kInvalidArgument) when the ranks differ, element_size is 0, or region
// is not inside both src and dst.
std::vector<CopyRun> copy_runs(const Box& src, const Box& dst, const Box& region, std::size_t element_size);

// As copy_runs, appending to `out`. A run that continues the last one already in `out` on both
// sides extends it.
void append_copy_runs(const Box& src, const Box& dst, const Box& region, std::size_t element_size,
                      std::vector<CopyRun>& out);

// The same runs as copy_runs, those along the innermost dimension that is walked (not merged into
// a run) folded into one StridedRun, appended to `out` (the planner reuses one vector). Same
// errors as copy_runs.
void append_strided_runs(const Box& src, const Box& dst, const Box& region, std::size_t element_size,
                         std::vector<StridedRun>& out);

}  // namespace modelcast::layout
