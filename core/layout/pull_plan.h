// Which byte ranges a consumer pulls from which producer rank to assemble the boxes it wants of
// a model that M ranks hold in pieces (sharded, replicated, or both).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/layout/box.h"
#include "modelcast/types.h"

namespace modelcast::layout {

// What one producer rank registers of one tensor: the box of the global tensor its buffer holds
// (row-major, contiguous). Several ranks registering the same box replicate it.
struct Piece {
  std::string tensor;
  std::vector<std::int64_t> global_shape;  // empty = scalar
  DType dtype = DType::kF32;
  Box box;
};

// Rank r's piece i is PieceRef{r, i}: the data path's buffer ids on each rank.
struct PieceRef {
  std::uint32_t rank = 0;
  std::uint32_t piece = 0;
};

// The pieces of every rank of one version, checked once and indexed by tensor so that many
// consumers' plans can be made from it.
class PieceCatalog {
 public:
  // One tensor as the ranks agree on it, with every piece of it.
  struct Tensor {
    std::string name;
    std::vector<std::int64_t> shape;
    DType dtype = DType::kF32;
    std::size_t element_size = 0;
    std::vector<PieceRef> pieces;  // by rank, then piece id
  };

  // pieces_by_rank[r] holds rank r's pieces; a piece's id is its index there. Throws
  // Error(kLayoutMismatch) when ranks disagree on a tensor's shape or dtype, and
  // Error(kInvalidArgument) for a box outside the global shape or of another rank, a dtype without
  // a size, or two pieces of one rank and tensor that overlap. Every message names the tensor.
  explicit PieceCatalog(std::vector<std::vector<Piece>> pieces_by_rank);

  // The ranks and their pieces as given; rank and piece ids out of range throw std::out_of_range
  // (a caller bug, not an input error). References stay valid while the catalog lives.
  std::size_t ranks() const noexcept { return pieces_by_rank_.size(); }
  const std::vector<Piece>& pieces(std::size_t rank) const { return pieces_by_rank_.at(rank); }
  const Piece& piece(PieceRef ref) const { return pieces_by_rank_.at(ref.rank).at(ref.piece); }
  // Every tensor, sorted by name (so that plans do not depend on registration order), and the
  // one called `name` (nullptr if none). Pointers stay valid while the catalog lives.
  const std::vector<Tensor>& tensors() const noexcept { return tensors_; }
  const Tensor* find(std::string_view name) const;

 private:
  std::vector<std::vector<Piece>> pieces_by_rank_;
  std::vector<Tensor> tensors_;
  std::unordered_map<std::string, std::size_t> index_;  // name -> tensors_ index
};

// What a consumer wants of one tensor.
struct PullWant {
  enum class Kind : std::uint8_t { kWhole, kBoxes, kNothing };
  Kind kind = Kind::kWhole;
  std::vector<Box> boxes;  // for kBoxes: disjoint boxes inside the tensor's shape, each its own buffer

  // The three kinds of want; `of` takes the boxes by value (each becomes one destination buffer,
  // in the order given). Checked only when planned.
  static PullWant whole() { return {}; }
  static PullWant nothing() { return {Kind::kNothing, {}}; }
  static PullWant of(std::vector<Box> boxes) { return {Kind::kBoxes, std::move(boxes)}; }
};

// What a consumer wants of a model: per named tensor, and for the tensors it does not name either
// all of them (the default) or none (a consumer wanting single tensors).
struct ConsumerLayout {
  std::unordered_map<std::string, PullWant> tensors;
  bool unlisted_whole = true;
};

// One buffer the consumer fills: a wanted box of a tensor, row-major, `bytes` long.
struct Destination {
  std::string tensor;
  Box box;
  DType dtype = DType::kF32;
  std::uint64_t bytes = 0;
};

// Transfers from a rank: `count` copies of `length` bytes, copy i from src_offset + i *
// src_stride of the rank's piece buffer `piece` to dst_offset + i * dst_stride of destination
// buffer `destination` (an index into PullPlan::destinations). count 1 has strides 0; count > 1
// describes the rows of a box cut across another in one entry instead of one per row.
struct PullRange {
  std::uint32_t piece = 0;
  std::uint64_t src_offset = 0;
  std::uint64_t length = 0;
  std::uint32_t destination = 0;
  std::uint64_t dst_offset = 0;
  std::uint64_t count = 1;
  std::uint64_t src_stride = 0;
  std::uint64_t dst_stride = 0;

  // Bytes this entry moves (length * count).
  std::uint64_t bytes() const noexcept { return length * count; }
  friend bool operator==(const PullRange&, const PullRange&) = default;
};

struct PullPlan {
  // Tensors in the catalog's (name) order, each tensor's boxes in the order asked.
  std::vector<Destination> destinations;
  // Per rank: ranges sorted by piece then (first) source offset, a range that continues the one
  // before it on both sides merged into it. Together they write every byte of every destination
  // exactly once.
  std::vector<std::vector<PullRange>> by_rank;
  std::vector<std::uint64_t> bytes_by_rank;
  // Per rank, the regions of the whole tensors it provides, (tensor, box) in the order planned:
  // what that rank need send and nothing more.
  std::vector<std::vector<std::pair<std::string, Box>>> regions_by_rank;

  // Bytes pulled from all ranks together: the sum of the destinations' sizes, since no byte is
  // pulled twice.
  std::uint64_t total_bytes() const noexcept;
};

struct PlanOptions {
  // A region several ranks own is split among them only into parts of at least this many bytes:
  // below it a rank's request costs more than the bytes it would take off another rank.
  std::uint64_t min_split_bytes = 1u << 20;
};

// Plans the pulls of `layout` from `catalog`'s ranks. A region owned by one rank comes from it;
// a region several ranks own (replicated) is split along its outermost splittable dimension into
// up to one part per owner and the parts go, largest first, to the owner with the fewest bytes so
// far (ties to the lowest rank): deterministic, and balanced across the whole model. Throws
// Error(kLayoutMismatch) for a tensor name no rank registered or a wanted box not fully owned
// ('tensor "w": no rank owns [512:1024, 0:256]'), and Error(kInvalidArgument) for wanted boxes of
// the wrong rank, outside the shape, or overlapping each other, or min_split_bytes == 0.
PullPlan plan_pulls(const PieceCatalog& catalog, const ConsumerLayout& layout, const PlanOptions& options = {});

}  // namespace modelcast::layout
