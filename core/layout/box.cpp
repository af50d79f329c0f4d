#include "core/layout/box.h"

#include <algorithm>
#include <limits>

#include "modelcast/error.h"

namespace modelcast::layout {
namespace {

[[noreturn]] void invalid(const std::string& message) { throw Error(ErrorCode::kInvalidArgument, message); }

void require_same_rank(const Box& a, const Box& b, const char* operation) {
  if (a.rank() != b.rank()) {
    invalid(std::string(operation) + ": boxes of different rank " + a.to_string() + " and " + b.to_string());
  }
}

}  // namespace

Box::Box(std::span<const std::int64_t> offset, std::span<const std::int64_t> extent) {
  if (offset.size() != extent.size()) {
    invalid("box: " + std::to_string(offset.size()) + " offsets for " + std::to_string(extent.size()) +
            " extents");
  }
  if (offset.size() > kMaxRank) {
    invalid("box: rank " + std::to_string(offset.size()) + " exceeds the maximum " + std::to_string(kMaxRank));
  }
  rank_ = offset.size();
  for (std::size_t d = 0; d < rank_; ++d) {
    if (offset[d] < 0 || extent[d] < 0) {
      invalid("box: negative offset or extent in dimension " + std::to_string(d) + " (offset " +
              std::to_string(offset[d]) + ", extent " + std::to_string(extent[d]) + ")");
    }
    // end() must be representable: boxes come from consumers' wants, not only from shapes.
    if (extent[d] > std::numeric_limits<std::int64_t>::max() - offset[d]) {
      invalid("box: offset " + std::to_string(offset[d]) + " + extent " + std::to_string(extent[d]) +
              " in dimension " + std::to_string(d) + " exceeds 2^63 - 1");
    }
    offset_[d] = offset[d];
    extent_[d] = extent[d];
  }
}

Box::Box(std::initializer_list<std::int64_t> offset, std::initializer_list<std::int64_t> extent)
    : Box(std::span<const std::int64_t>(offset.begin(), offset.size()),
          std::span<const std::int64_t>(extent.begin(), extent.size())) {}

Box Box::whole(std::span<const std::int64_t> shape) {
  std::array<std::int64_t, kMaxRank> zeros{};
  if (shape.size() > kMaxRank) {
    invalid("box: rank " + std::to_string(shape.size()) + " exceeds the maximum " + std::to_string(kMaxRank));
  }
  return Box(std::span<const std::int64_t>(zeros.data(), shape.size()), shape);
}

std::uint64_t Box::volume() const noexcept {
  std::uint64_t v = 1;
  for (std::size_t d = 0; d < rank_; ++d) v *= static_cast<std::uint64_t>(extent_[d]);
  return v;
}

bool Box::empty() const noexcept {
  for (std::size_t d = 0; d < rank_; ++d) {
    if (extent_[d] == 0) return true;
  }
  return false;
}

bool Box::contains(const Box& inner) const {
  require_same_rank(*this, inner, "contains");
  if (inner.empty()) return true;
  for (std::size_t d = 0; d < rank_; ++d) {
    if (inner.offset_[d] < offset_[d] || inner.end(d) > end(d)) return false;
  }
  return true;
}

bool Box::within(std::span<const std::int64_t> shape) const noexcept {
  if (shape.size() != rank_) return false;
  for (std::size_t d = 0; d < rank_; ++d) {
    if (end(d) > shape[d]) return false;
  }
  return true;
}

std::string Box::to_string() const {
  std::string s = "[";
  for (std::size_t d = 0; d < rank_; ++d) {
    if (d > 0) s += ", ";
    s += std::to_string(offset_[d]) + ":" + std::to_string(end(d));
  }
  return s + "]";
}

bool operator==(const Box& a, const Box& b) noexcept {
  if (a.rank_ != b.rank_) return false;
  for (std::size_t d = 0; d < a.rank_; ++d) {
    if (a.offset_[d] != b.offset_[d] || a.extent_[d] != b.extent_[d]) return false;
  }
  return true;
}

std::string shape_to_string(std::span<const std::int64_t> shape) {
  std::string s = "[";
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (d > 0) s += ", ";
    s += std::to_string(shape[d]);
  }
  return s + "]";
}

Box intersect(const Box& a, const Box& b) {
  require_same_rank(a, b, "intersect");
  std::array<std::int64_t, kMaxRank> offset{};
  std::array<std::int64_t, kMaxRank> extent{};
  for (std::size_t d = 0; d < a.rank(); ++d) {
    std::int64_t lo = std::max(a.offset(d), b.offset(d));
    std::int64_t hi = std::min(a.end(d), b.end(d));
    if (hi <= lo) {
      // Disjoint: an empty box at a's place, so that callers never see negative extents.
      std::array<std::int64_t, kMaxRank> zeros{};
      return Box(a.offsets(), std::span<const std::int64_t>(zeros.data(), a.rank()));
    }
    offset[d] = lo;
    extent[d] = hi - lo;
  }
  return Box(std::span<const std::int64_t>(offset.data(), a.rank()),
             std::span<const std::int64_t>(extent.data(), a.rank()));
}

bool overlaps(const Box& a, const Box& b) {
  require_same_rank(a, b, "overlaps");
  if (a.empty() || b.empty()) return false;
  for (std::size_t d = 0; d < a.rank(); ++d) {
    if (std::max(a.offset(d), b.offset(d)) >= std::min(a.end(d), b.end(d))) return false;
  }
  return true;
}

std::vector<Box> subtract(const Box& a, const Box& b) {
  require_same_rank(a, b, "subtract");
  std::vector<Box> out;
  if (a.empty()) return out;
  if (!overlaps(a, b)) {
    out.push_back(a);
    return out;
  }
  // Peel slabs off a, one dimension after another: the part before b and the part after b in
  // dimension d, over the range that earlier dimensions have already narrowed to b's. The slabs
  // are disjoint and what is left at the end is a ∩ b.
  std::array<std::int64_t, kMaxRank> offset{};
  std::array<std::int64_t, kMaxRank> extent{};
  for (std::size_t d = 0; d < a.rank(); ++d) {
    offset[d] = a.offset(d);
    extent[d] = a.extent(d);
  }
  auto span_of = [&](std::array<std::int64_t, kMaxRank>& v) {
    return std::span<const std::int64_t>(v.data(), a.rank());
  };
  for (std::size_t d = 0; d < a.rank(); ++d) {
    std::int64_t lo = std::max(a.offset(d), b.offset(d));
    std::int64_t hi = std::min(a.end(d), b.end(d));
    std::int64_t a_lo = offset[d];
    std::int64_t a_hi = offset[d] + extent[d];
    if (lo > a_lo) {
      offset[d] = a_lo;
      extent[d] = lo - a_lo;
      out.emplace_back(span_of(offset), span_of(extent));
    }
    if (hi < a_hi) {
      offset[d] = hi;
      extent[d] = a_hi - hi;
      out.emplace_back(span_of(offset), span_of(extent));
    }
    offset[d] = lo;
    extent[d] = hi - lo;
  }
  return out;
}

std::vector<Box> subtract(const Box& a, std::span<const Box> holes) {
  std::vector<Box> left;
  if (!a.empty()) left.push_back(a);
  std::vector<Box> next;
  for (const Box& hole : holes) {
    next.clear();
    for (const Box& piece : left) {
      std::vector<Box> parts = subtract(piece, hole);
      next.insert(next.end(), parts.begin(), parts.end());
    }
    left.swap(next);
    if (left.empty()) break;
  }
  return left;
}

// Ceil-sized chunks, like torch.chunk and DTensor's Shard(dim): an FSDP2 or tensor-parallel
// trainer registers its pieces this way, so a consumer asking for shard k of the trainer's n gets
// exactly one rank's piece. Refusing sizes that n does not divide would make common tensors
// (vocabularies of odd size) unservable at any parallelism.
Box shard_box(std::span<const std::int64_t> global_shape, std::size_t dim, std::size_t k, std::size_t n) {
  if (dim >= global_shape.size()) {
    invalid("shard_box: dimension " + std::to_string(dim) + " of a tensor of shape " +
            shape_to_string(global_shape));
  }
  if (n == 0 || k >= n) {
    invalid("shard_box: shard " + std::to_string(k) + " of " + std::to_string(n));
  }
  Box::whole(global_shape);  // refuses negative sizes and ranks above kMaxRank
  std::array<std::int64_t, kMaxRank> offset{};
  std::array<std::int64_t, kMaxRank> extent{};
  for (std::size_t d = 0; d < global_shape.size(); ++d) extent[d] = global_shape[d];
  // Unsigned, and ceil without size + n - 1: a count near 2^63 or 2^64 overflowed the signed
  // sum (part 0 of 8 rows came out empty, or negative). Nothing here can wrap: chunk is 1 when
  // n exceeds the size (so chunk * k = k), and at most size / n + 1 otherwise (k < n).
  const auto size = static_cast<std::uint64_t>(global_shape[dim]);
  const std::uint64_t chunk = size / n + (size % n != 0 ? 1 : 0);
  const std::uint64_t lo = std::min(size, chunk * k);
  const std::uint64_t hi = std::min(size, lo + chunk);
  offset[dim] = static_cast<std::int64_t>(lo);
  extent[dim] = static_cast<std::int64_t>(hi - lo);
  return Box(std::span<const std::int64_t>(offset.data(), global_shape.size()),
             std::span<const std::int64_t>(extent.data(), global_shape.size()));
}

}  // namespace modelcast::layout
