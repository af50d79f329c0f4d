#include "core/model/tensor_selection.h"

#include <algorithm>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "common/shown_text.h"
#include "core/layout/copy_runs.h"
#include "core/model/manifest.h"
#include "modelcast/error.h"

namespace modelcast {
namespace {

[[noreturn]] void invalid(const std::string& message) { throw Error(ErrorCode::kInvalidArgument, message); }
[[noreturn]] void mismatch(const std::string& message) { throw Error(ErrorCode::kLayoutMismatch, message); }

std::string want_name(const TensorWant& want) { return "the want of '" + want.tensor + "'"; }

layout::Box box_of(const TensorBox& box) { return layout::Box(box.offset, box.extent); }

// Marks the blocks that hold bytes [begin, end) of the snapshot.
void mark(std::vector<bool>& blocks, std::uint64_t block_bytes, std::uint64_t begin, std::uint64_t end) {
  if (end <= begin) return;
  const std::uint64_t last = (end - 1) / block_bytes;
  for (std::uint64_t b = begin / block_bytes; b <= last && b < blocks.size(); ++b) blocks[b] = true;
}

// What `want` (from "*" when `wildcard`) asks of a tensor of `shape`: see wanted_of.
std::optional<std::vector<layout::Box>> wanted_by(const TensorWant* want, bool wildcard,
                                                 const std::vector<std::int64_t>& shape, const std::string& what) {
  std::vector<layout::Box> wanted;  // none: all of it
  if (!want || want->kind == TensorWant::Kind::kWhole) return wanted;
  if (want->kind == TensorWant::Kind::kNothing) return std::nullopt;
  if (want->kind == TensorWant::Kind::kShard) {
    if (want->dim < shape.size()) {
      wanted.push_back(layout::shard_box(shape, want->dim, want->index, want->count));
    } else if (!wildcard) {
      mismatch(what + " has no dimension " + std::to_string(want->dim) + " to shard along");
    }
    // Under "*", tensor parallelism replicates what it cannot split (biases of row-parallel layers).
    return wanted;
  }
  for (const auto& asked : want->boxes) {
    const auto box = box_of(asked);
    if (box.rank() != shape.size()) {
      mismatch(what + " has " + std::to_string(shape.size()) + " dimensions; the wanted box " + box.to_string() +
               " has " + std::to_string(box.rank()));
    }
    if (!box.within(shape)) mismatch(what + ": the wanted box " + box.to_string() + " lies outside it");
    wanted.push_back(box);  // disjoint and not empty: TensorSelection::check
  }
  return wanted;
}

}  // namespace

std::optional<std::vector<layout::Box>> TensorSelection::wanted_of(const std::vector<TensorWant>& wants,
                                                                   const std::string& name,
                                                                   const std::vector<std::int64_t>& shape,
                                                                   const std::string& what) {
  const TensorWant* others = nullptr;
  for (const auto& want : wants) {
    if (want.tensor == name) return wanted_by(&want, false, shape, what);
    if (want.tensor == "*") others = &want;
  }
  return wanted_by(others, true, shape, what);
}

void TensorSelection::check(const std::vector<TensorWant>& wants) {
  std::set<std::string> names;
  for (const auto& want : wants) {
    if (want.tensor.empty()) invalid("a want names no tensor (\"*\" for every tensor not named)");
    if (auto why = name_problem(want.tensor)) invalid("a want names tensor " + shown_text(want.tensor) + ", which " + *why);
    if (!names.insert(want.tensor).second) invalid("'" + want.tensor + "' is wanted twice");
    switch (want.kind) {
      case TensorWant::Kind::kWhole:
      case TensorWant::Kind::kNothing:
        break;
      case TensorWant::Kind::kShard:
        if (want.count == 0 || want.index >= want.count) {
          invalid(want_name(want) + " asks for shard " + std::to_string(want.index) + " of " +
                  std::to_string(want.count) + ": the index must be below the count, and the count above 0");
        }
        if (want.dim >= layout::kMaxRank) invalid(want_name(want) + " shards along dimension " + std::to_string(want.dim));
        break;
      case TensorWant::Kind::kBoxes:
        if (want.boxes.empty()) invalid(want_name(want) + " lists no boxes (TensorWant::nothing keeps none of it)");
        if (want.boxes.size() > kMaxBoxes) {
          invalid(want_name(want) + " lists " + std::to_string(want.boxes.size()) + " boxes; at most " +
                  std::to_string(kMaxBoxes));
        }
        {
          // Shape-free, so refused before any version: boxes of one rank, none empty, none
          // overlapping another (a byte would land in two views, and the same shape-free rule
          // lets the producer refuse such wants from a consumer that skipped this check).
          std::vector<layout::Box> boxes;
          for (const auto& asked : want.boxes) {
            try {
              boxes.push_back(box_of(asked));
            } catch (const Error& e) {
              invalid(want_name(want) + ": " + e.what());
            }
            const auto& box = boxes.back();
            if (box.rank() != boxes.front().rank()) {
              invalid(want_name(want) + ": the boxes " + boxes.front().to_string() + " and " + box.to_string() +
                      " are of different rank");
            }
            if (box.empty()) {
              invalid(want_name(want) + ": the box " + box.to_string() +
                      " is empty (an extent of 0); leave it out, or want nothing of the tensor");
            }
            for (std::size_t i = 0; i + 1 < boxes.size(); ++i) {
              if (layout::overlaps(boxes[i], box)) {
                invalid(want_name(want) + ": the boxes " + boxes[i].to_string() + " and " + box.to_string() + " overlap");
              }
            }
          }
        }
        break;
      default:
        invalid(want_name(want) + " is of an unknown kind " + std::to_string(static_cast<int>(want.kind)));
    }
  }
}

TensorSelection TensorSelection::resolve(const std::vector<TensorWant>& wants, const Manifest& manifest) {
  TensorSelection selection;
  std::unordered_map<std::string, const TensorWant*> named;
  const TensorWant* others = nullptr;
  for (const auto& want : wants) {
    if (want.tensor == "*") {
      others = &want;
    } else {
      named.emplace(want.tensor, &want);
    }
  }
  // One rank of several need not hold every tensor (pipeline stages): whether the ranks together
  // hold what is named is the assembling consumer's to check.
  // By a set of the names: one scan of the manifest per want took seconds on the producer's
  // service thread (which also sends heartbeats) for a consumer naming each of 30,000 tensors.
  if (manifest.rank_count <= 1 && !named.empty()) {
    std::unordered_set<std::string_view> present;
    present.reserve(manifest.tensors.size());
    for (const auto& t : manifest.tensors) present.insert(t.spec.name);
    for (const auto& [name, want] : named) {
      if (!present.count(name)) {
        mismatch("version " + std::to_string(manifest.version) + " has no tensor '" + name +
                 "' (ConsumerOptions::wants)");
      }
    }
  }
  for (std::size_t i = 0; i < manifest.tensors.size(); ++i) {
    const auto& entry = manifest.tensors[i];
    // Wants are of the whole tensor; a piece is placed in it.
    const auto& shape = entry.is_piece() ? entry.global_shape : entry.spec.shape;
    auto it = named.find(entry.spec.name);
    const TensorWant* want = it != named.end() ? it->second : others;
    const std::string what = "tensor '" + entry.spec.name + "' of shape " + layout::shape_to_string(shape) +
                             " in version " + std::to_string(manifest.version);
    auto asked = wanted_by(want, want == others, shape, what);
    if (!asked) {
      selection.everything_ = false;
      continue;
    }
    std::vector<layout::Box> wanted = std::move(*asked);
    Kept kept;
    kept.tensor = i;
    if (entry.is_piece()) {
      const layout::Box piece(entry.global_offset, entry.spec.shape);
      if (wanted.empty()) wanted.push_back(layout::Box::whole(shape));
      std::vector<std::int64_t> local(shape.size());
      for (const auto& w : wanted) {
        const auto part = layout::intersect(w, piece);
        if (part.empty()) continue;
        for (std::size_t d = 0; d < shape.size(); ++d) local[d] = part.offset(d) - piece.offset(d);
        kept.parts.push_back(layout::Box(local, part.extents()));
      }
      kept.whole = false;
      kept.origin = entry.global_offset;
      kept.global_shape = entry.global_shape;
      selection.everything_ = false;
      if (kept.parts.empty()) continue;  // this rank holds none of what is wanted of it
    } else if (!wanted.empty()) {
      kept.whole = false;
      kept.parts = std::move(wanted);
      selection.everything_ = false;
    }
    if (kept.whole) {
      selection.wanted_bytes_ += entry.size;
    } else {
      for (const auto& part : kept.parts) selection.wanted_bytes_ += part.volume() * dtype_size(entry.spec.dtype);
    }
    selection.kept_.push_back(std::move(kept));
  }
  return selection;
}

std::vector<bool> TensorSelection::blocks(const Manifest& manifest) const {
  if (everything_ || manifest.block_bytes == 0) return {};
  const std::uint64_t block_bytes = manifest.block_bytes;
  std::vector<bool> wanted(block_count(manifest), false);
  std::vector<layout::StridedRun> runs;
  for (const auto& kept : kept_) {
    const auto& entry = manifest.tensors[kept.tensor];
    if (kept.whole) {
      mark(wanted, block_bytes, entry.offset, entry.offset + entry.size);
      continue;
    }
    const auto whole = layout::Box::whole(entry.spec.shape);
    for (const auto& part : kept.parts) {
      runs.clear();
      layout::append_strided_runs(whole, part, part, dtype_size(entry.spec.dtype), runs);
      for (const auto& run : runs) {
        const std::uint64_t first = entry.offset + run.src_offset;
        if (run.count <= 1) {
          mark(wanted, block_bytes, first, first + run.bytes);
        } else if (run.src_stride <= block_bytes) {
          // Every block between the first row and the last holds the start of some row.
          mark(wanted, block_bytes, first, first + (run.count - 1) * run.src_stride + run.bytes);
        } else {
          for (std::uint64_t r = 0; r < run.count; ++r) {
            mark(wanted, block_bytes, first + r * run.src_stride, first + r * run.src_stride + run.bytes);
          }
        }
      }
    }
  }
  return wanted;
}

}  // namespace modelcast
