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

// The runs that copy `region` from a buffer holding box `src` (row-major, contiguous, element
// size `element_size`) into a buffer holding box `dst`, in increasing source and destination
// order. Dimensions that `region` spans fully on both sides are merged into one run, so a dim-0
// slice of a whole tensor is one run and a dim-1 half of an [R, C] tensor R runs. An empty region
// gives none. Throws Error(kInvalidArgument) when the ranks differ, element_size is 0, or region
// is not inside both src and dst.
std::vector<CopyRun> copy_runs(const Box& src, const Box& dst, const Box& region, std::size_t element_size);

// As copy_runs, appending to `out` (the planner reuses one vector for many regions). A run that
// continues the last one already in `out` on both sides extends it.
void append_copy_runs(const Box& src, const Box& dst, const Box& region, std::size_t element_size,
                      std::vector<CopyRun>& out);

}  // namespace modelcast::layout
