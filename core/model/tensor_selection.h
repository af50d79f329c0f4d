// What of each tensor of a version a consumer keeps (ConsumerOptions::wants resolved against the
// version's manifest) and which of the version's blocks hold those bytes. The producer and the
// consumer compute it from the same wants and manifest, so the producer sends exactly the blocks
// the consumer posts receives for; the block digests verify them as they verify any block.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/layout/box.h"
#include "core/model/manifest.h"
#include "modelcast/consumer.h"

namespace modelcast {

class TensorSelection {
 public:
  // One tensor kept: its index in the manifest, and either the whole tensor or its parts (each
  // a view of its own, in the order wanted).
  // For a piece of a tensor that several producer ranks hold (TensorEntry::is_piece), the wants
  // are of the whole tensor: the parts are what of them lies in this piece, in the piece's own
  // coordinates, and `origin` and `global_shape` place the piece in the whole tensor.
  struct Kept {
    std::size_t tensor = 0;
    bool whole = true;
    std::vector<layout::Box> parts;
    std::vector<std::int64_t> origin;        // empty unless a piece
    std::vector<std::int64_t> global_shape;  // empty unless a piece
  };

  // Boxes one want may list: boxes are checked pairwise for overlap, and a producer checks the
  // wants of every consumer that joins, so their number is bounded.
  static constexpr std::size_t kMaxBoxes = 1024;

  // Wants that no manifest could satisfy: Error(kInvalidArgument) naming the want (an empty or
  // repeated name, a shard with count 0 or index >= count, boxes whose offset and extent differ
  // in rank, boxes of different ranks, an empty box, boxes that overlap, a negative number, an
  // offset + extent past 2^63 - 1, no boxes, more than kMaxBoxes). Checked on the consumer's
  // options, and by the producer on what a consumer sends.
  static void check(const std::vector<TensorWant>& wants);

  // The wants applied to `manifest`. Throws Error(kLayoutMismatch) naming the tensor for a named
  // tensor the version lacks (unless it is one rank's of several: another rank may hold it), and
  // the box and the shape for a box outside its tensor or of another rank, or a shard along a
  // dimension a named tensor lacks. `wants` passed check(). Empty wants keep everything whole.
  static TensorSelection resolve(const std::vector<TensorWant>& wants, const Manifest& manifest);

  // What `wants` ask of the tensor called `name`, of (whole) shape `shape`: nullopt for nothing,
  // an empty list for all of it, else boxes in it. Same errors as resolve, `what` naming the
  // tensor in them. For a consumer that assembles the pieces of several ranks.
  static std::optional<std::vector<layout::Box>> wanted_of(const std::vector<TensorWant>& wants, const std::string& name,
                                                           const std::vector<std::int64_t>& shape, const std::string& what);

  // Kept tensors in manifest order.
  const std::vector<Kept>& kept() const noexcept { return kept_; }
  // Every tensor of the manifest kept whole: views are the manifest's tensors as they are.
  bool everything() const noexcept { return everything_; }
  // Bytes of the kept tensors and parts, in the producer's dtype.
  std::uint64_t wanted_bytes() const noexcept { return wanted_bytes_; }

  // Per block of `manifest` (the one resolved), whether it holds a wanted byte; empty when every
  // block is wanted, or when the version has no blocks (block_bytes 0: it travels whole).
  std::vector<bool> blocks(const Manifest& manifest) const;

 private:
  std::vector<Kept> kept_;
  bool everything_ = true;
  std::uint64_t wanted_bytes_ = 0;
};

}  // namespace modelcast
