#include "core/layout/copy_runs.h"

#include <array>
#include <string>

#include "modelcast/error.h"

namespace modelcast::layout {

std::vector<CopyRun> copy_runs(const Box& src, const Box& dst, const Box& region, std::size_t element_size) {
  std::vector<CopyRun> out;
  append_copy_runs(src, dst, region, element_size, out);
  return out;
}

void append_copy_runs(const Box& src, const Box& dst, const Box& region, std::size_t element_size,
                      std::vector<CopyRun>& out) {
  std::vector<StridedRun> strided;
  append_strided_runs(src, dst, region, element_size, strided);
  for (const StridedRun& r : strided) {
    for (std::uint64_t i = 0; i < r.count; ++i) {
      const std::uint64_t s = r.src_offset + i * r.src_stride;
      const std::uint64_t t = r.dst_offset + i * r.dst_stride;
      if (!out.empty() && out.back().src_offset + out.back().bytes == s && out.back().dst_offset + out.back().bytes == t) {
        out.back().bytes += r.bytes;
      } else {
        out.push_back({s, t, r.bytes});
      }
    }
  }
}

void append_strided_runs(const Box& src, const Box& dst, const Box& region, std::size_t element_size,
                         std::vector<StridedRun>& out) {
  if (element_size == 0) throw Error(ErrorCode::kInvalidArgument, "copy runs: element size 0");
  if (src.rank() != region.rank() || dst.rank() != region.rank()) {
    throw Error(ErrorCode::kInvalidArgument, "copy runs: boxes of different rank: source " + src.to_string() +
                                                 ", destination " + dst.to_string() + ", region " +
                                                 region.to_string());
  }
  if (region.empty()) return;
  if (!src.contains(region) || !dst.contains(region)) {
    throw Error(ErrorCode::kInvalidArgument, "copy runs: region " + region.to_string() +
                                                 " is not inside both the source " + src.to_string() +
                                                 " and the destination " + dst.to_string());
  }
  const std::size_t rank = region.rank();

  // The run: the innermost dimensions that region spans fully on both sides, plus the first one
  // outward that it does not (its part of that dimension is still contiguous on both sides).
  std::uint64_t run_elements = 1;
  std::size_t outer = rank;  // dimensions [0, outer) are walked, [outer, rank) are inside a run
  while (outer > 0) {
    std::size_t d = outer - 1;
    run_elements *= static_cast<std::uint64_t>(region.extent(d));
    outer = d;
    if (region.extent(d) != src.extent(d) || region.extent(d) != dst.extent(d)) break;
  }
  const std::uint64_t run_bytes = run_elements * element_size;

  std::array<std::uint64_t, kMaxRank> src_stride{};
  std::array<std::uint64_t, kMaxRank> dst_stride{};
  std::uint64_t src_start = 0;
  std::uint64_t dst_start = 0;
  {
    std::uint64_t s = element_size;
    std::uint64_t t = element_size;
    for (std::size_t i = rank; i-- > 0;) {
      src_stride[i] = s;
      dst_stride[i] = t;
      src_start += static_cast<std::uint64_t>(region.offset(i) - src.offset(i)) * s;
      dst_start += static_cast<std::uint64_t>(region.offset(i) - dst.offset(i)) * t;
      s *= static_cast<std::uint64_t>(src.extent(i));
      t *= static_cast<std::uint64_t>(dst.extent(i));
    }
  }

  // The innermost walked dimension becomes the strided run's count; an odometer walks the rest,
  // innermost fastest, so runs come in increasing order on both sides.
  StridedRun run{src_start, dst_start, run_bytes, 1, 0, 0};
  std::size_t walked = outer;
  if (walked > 0) {
    --walked;
    run.count = static_cast<std::uint64_t>(region.extent(walked));
    if (run.count > 1) {
      run.src_stride = src_stride[walked];
      run.dst_stride = dst_stride[walked];
    }
  }
  std::array<std::int64_t, kMaxRank> index{};
  while (true) {
    out.push_back(run);
    std::size_t d = walked;
    while (true) {
      if (d == 0) return;
      --d;
      if (++index[d] < region.extent(d)) {
        run.src_offset += src_stride[d];
        run.dst_offset += dst_stride[d];
        break;
      }
      run.src_offset -= static_cast<std::uint64_t>(region.extent(d) - 1) * src_stride[d];
      run.dst_offset -= static_cast<std::uint64_t>(region.extent(d) - 1) * dst_stride[d];
      index[d] = 0;
    }
  }
}

}  // namespace modelcast::layout
