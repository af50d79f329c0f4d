#include "core/model/tensor_selection.h"

#include <algorithm>
#include <set>
#include <string>
#include <unordered_map>

#include "core/layout/copy_runs.h"
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

}  // namespace

void TensorSelection::check(const std::vector<TensorWant>& wants) {
  std::set<std::string> names;
  for (const auto& want : wants) {
    if (want.tensor.empty()) invalid("a want names no tensor (\"*\" for every tensor not named)");
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
        for (const auto& box : want.boxes) {
          try {
            box_of(box);
          } catch (const Error& e) {
            invalid(want_name(want) + ": " + e.what());
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
  for (const auto& [name, want] : named) {
    const bool present = std::any_of(manifest.tensors.begin(), manifest.tensors.end(),
                                     [&](const TensorEntry& t) { return t.spec.name == name; });
    if (!present) {
      mismatch("version " + std::to_string(manifest.version) + " has no tensor '" + name + "' (ConsumerOptions::wants)");
    }
  }
  for (std::size_t i = 0; i < manifest.tensors.size(); ++i) {
    const auto& entry = manifest.tensors[i];
    const auto& shape = entry.spec.shape;
    auto it = named.find(entry.spec.name);
    const TensorWant* want = it != named.end() ? it->second : others;
    const std::string what = "tensor '" + entry.spec.name + "' of shape " + layout::shape_to_string(shape) +
                             " in version " + std::to_string(manifest.version);
    Kept kept;
    kept.tensor = i;
    if (want && want->kind == TensorWant::Kind::kNothing) {
      selection.everything_ = false;
      continue;
    }
    if (want && want->kind == TensorWant::Kind::kShard) {
      if (want->dim < shape.size()) {
        kept.whole = false;
        kept.parts.push_back(layout::shard_box(shape, want->dim, want->index, want->count));
      } else if (want == others) {
        // Tensor parallelism replicates what it cannot split (biases of row-parallel layers).
      } else {
        mismatch(what + " has no dimension " + std::to_string(want->dim) + " to shard along");
      }
    }
    if (want && want->kind == TensorWant::Kind::kBoxes) {
      kept.whole = false;
      for (const auto& wanted : want->boxes) {
        const auto box = box_of(wanted);
        if (box.rank() != shape.size() || !box.within(shape)) {
          mismatch(what + ": the wanted box " + box.to_string() + " lies outside it");
        }
        for (const auto& earlier : kept.parts) {
          if (layout::overlaps(earlier, box)) {
            mismatch(what + ": the wanted boxes " + earlier.to_string() + " and " + box.to_string() + " overlap");
          }
        }
        kept.parts.push_back(box);
      }
    }
    if (kept.whole) {
      selection.wanted_bytes_ += entry.size;
    } else {
      selection.everything_ = false;
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
