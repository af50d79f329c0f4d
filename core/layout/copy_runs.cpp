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

  auto emit = [&](std::uint64_t s, std::uint64_t t) {
    if (!out.empty()) {
      CopyRun& last = out.back();
      if (last.src_offset + last.bytes == s && last.dst_offset + last.bytes == t) {
        last.bytes += run_bytes;
        return;
      }
    }
    out.push_back({s, t, run_bytes});
  };

  // Odometer over the walked dimensions, innermost fastest, so runs come in increasing order.
  std::array<std::int64_t, kMaxRank> index{};
  std::uint64_t s = src_start;
  std::uint64_t t = dst_start;
  while (true) {
    emit(s, t);
    std::size_t d = outer;
    while (d > 0) {
      --d;
      if (++index[d] < region.extent(d)) {
        s += src_stride[d];
        t += dst_stride[d];
        break;
      }
      s -= static_cast<std::uint64_t>(region.extent(d) - 1) * src_stride[d];
      t -= static_cast<std::uint64_t>(region.extent(d) - 1) * dst_stride[d];
      index[d] = 0;
      if (d == 0) return;
    }
    if (outer == 0) return;
  }
}

}  // namespace modelcast::layout
