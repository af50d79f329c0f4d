// Rectangular boxes of row-major tensors in global coordinates: what a producer rank holds of a
// tensor, and what a consumer wants of it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

namespace modelcast::layout {

// Highest tensor rank a box describes: fixed so that a Box is a value without heap storage (the
// planner creates and intersects thousands of them per consumer).
inline constexpr std::size_t kMaxRank = 16;

// A box: per dimension an offset into the global tensor and an extent. Rank 0 is a scalar (one
// element); a box of rank > 0 with any extent 0 is empty.
class Box {
 public:
  // The rank-0 box: a whole scalar tensor.
  Box() = default;
  // offset and extent have one entry per dimension, all >= 0, rank <= kMaxRank; otherwise
  // throws Error(kInvalidArgument). The spans are copied.
  Box(std::span<const std::int64_t> offset, std::span<const std::int64_t> extent);
  Box(std::initializer_list<std::int64_t> offset, std::initializer_list<std::int64_t> extent);

  // The box covering a whole tensor of `shape` (offset 0). Same errors as the constructor.
  static Box whole(std::span<const std::int64_t> shape);

  // Per-dimension accessors; dim must be < rank() (not checked: they sit in the planner's loops).
  // end(dim) is offset + extent, one past the box's last index.
  std::size_t rank() const noexcept { return rank_; }
  std::int64_t offset(std::size_t dim) const noexcept { return offset_[dim]; }
  std::int64_t extent(std::size_t dim) const noexcept { return extent_[dim]; }
  std::int64_t end(std::size_t dim) const noexcept { return offset_[dim] + extent_[dim]; }
  std::span<const std::int64_t> offsets() const noexcept { return {offset_.data(), rank_}; }
  std::span<const std::int64_t> extents() const noexcept { return {extent_.data(), rank_}; }

  // Elements in the box (1 for rank 0). The caller keeps volumes within 2^64 (any tensor that
  // fits in memory does); empty(), true when an extent is 0, needs no such bound.
  std::uint64_t volume() const noexcept;
  bool empty() const noexcept;

  // Whether every element of `inner` lies in this box; an empty inner box of the same rank is
  // contained anywhere. Throws Error(kInvalidArgument) when the ranks differ.
  bool contains(const Box& inner) const;
  // Whether the box lies inside a tensor of `shape` (same rank, end <= shape per dimension); false,
  // not an error, for another rank, since callers report it with their own context.
  bool within(std::span<const std::int64_t> shape) const noexcept;

  // "[0:512, 256:1024]" (offset:end per dimension), "[]" for a scalar: the form every error message
  // about a box uses, so that users see one notation.
  std::string to_string() const;

  // Same rank, offsets and extents: structural, so two empty boxes at different places differ
  // (the planner never compares empty boxes; tests compare exact results).
  friend bool operator==(const Box& a, const Box& b) noexcept;

 private:
  std::size_t rank_ = 0;
  std::array<std::int64_t, kMaxRank> offset_{};
  std::array<std::int64_t, kMaxRank> extent_{};
};

// "[2048, 1000]": a shape in the notation of the error messages. No errors; the span is only
// read during the call.
std::string shape_to_string(std::span<const std::int64_t> shape);

// The common part of a and b, empty (extents 0, at a's offset) when they do not meet. Throws
// Error(kInvalidArgument) when the ranks differ.
Box intersect(const Box& a, const Box& b);

// Whether a and b share at least one element. Throws Error(kInvalidArgument) when ranks differ.
bool overlaps(const Box& a, const Box& b);

// a minus b as disjoint non-empty boxes (at most 2 per dimension), empty when b covers a.
// Throws Error(kInvalidArgument) when the ranks differ.
std::vector<Box> subtract(const Box& a, const Box& b);

// What of `a` none of `holes` covers, as disjoint non-empty boxes. Same errors as above.
std::vector<Box> subtract(const Box& a, std::span<const Box> holes);

// Shard k of n of a tensor of `global_shape` split along `dim`, as torch.chunk and DTensor's
// Shard(dim) split it: chunks of ceil(size / n), the last ones smaller or empty when n does not
// divide the size. Throws Error(kInvalidArgument) when dim >= rank, n == 0 or k >= n.
Box shard_box(std::span<const std::int64_t> global_shape, std::size_t dim, std::size_t k, std::size_t n);

}  // namespace modelcast::layout
