#include "core/layout/pull_plan.h"

#include <algorithm>
#include <map>
#include <utility>

#include "core/layout/copy_runs.h"
#include "modelcast/error.h"

namespace modelcast::layout {
namespace {

// Element sizes and names kept here rather than taken from modelcast's dtype_size/dtype_name,
// which live in libmodelcast: this library must link without it (and without UCX or ZeroMQ).
struct DTypeFacts {
  std::size_t size;
  const char* name;
};

DTypeFacts facts(DType dtype) noexcept {
  switch (dtype) {
    case DType::kF64: return {8, "f64"};
    case DType::kF32: return {4, "f32"};
    case DType::kF16: return {2, "f16"};
    case DType::kBF16: return {2, "bf16"};
    case DType::kI64: return {8, "i64"};
    case DType::kI32: return {4, "i32"};
    case DType::kI16: return {2, "i16"};
    case DType::kI8: return {1, "i8"};
    case DType::kU8: return {1, "u8"};
    case DType::kBool: return {1, "bool"};
    case DType::kF8E4M3: return {1, "f8e4m3"};
  }
  return {0, "unknown"};
}

std::string quoted(const std::string& name) { return "tensor '" + name + "'"; }

std::string where(const std::string& tensor, std::size_t rank, std::size_t piece) {
  return quoted(tensor) + ", rank " + std::to_string(rank) + " piece " + std::to_string(piece);
}

// A part of a wanted box with the pieces that hold all of it (their ranks differ, since one
// rank's pieces of a tensor do not overlap).
struct Cell {
  Box box;
  std::vector<PieceRef> owners;
};

// Splits `cells` (disjoint) by `part` (the wanted box ∩ piece `owner`'s box), so that afterwards
// every cell has one owner set and the cells still do not overlap.
void refine(std::vector<Cell>& cells, const Box& part, PieceRef owner) {
  std::vector<Box> fresh{part};  // what of `part` no existing cell covers yet
  const std::size_t existing = cells.size();
  for (std::size_t i = 0; i < existing; ++i) {
    if (!overlaps(cells[i].box, part)) continue;
    Box common = intersect(cells[i].box, part);
    for (Box& rest : subtract(cells[i].box, part)) cells.push_back({std::move(rest), cells[i].owners});
    cells[i].box = common;
    cells[i].owners.push_back(owner);
    std::vector<Box> next;
    for (const Box& f : fresh) {
      for (Box& g : subtract(f, common)) next.push_back(std::move(g));
    }
    fresh.swap(next);
  }
  for (Box& f : fresh) cells.push_back({std::move(f), {owner}});
}

// Parts of a replicated cell, each to be pulled from one of its owners.
struct Share {
  Box box;
  std::uint64_t bytes;
  std::size_t replicated;  // which replicated cell it is part of: its owners and destination
};

// Cuts `box` into up to `parts` slabs along its outermost dimension that has at least `parts`
// elements (else the longest one), in torch.chunk's ceil-sized chunks.
std::vector<Box> slabs(const Box& box, std::uint64_t parts) {
  std::vector<Box> out;
  if (parts <= 1 || box.rank() == 0) {
    out.push_back(box);
    return out;
  }
  std::size_t dim = box.rank();
  for (std::size_t d = 0; d < box.rank(); ++d) {
    if (static_cast<std::uint64_t>(box.extent(d)) >= parts) {
      dim = d;
      break;
    }
  }
  if (dim == box.rank()) {
    dim = 0;
    for (std::size_t d = 1; d < box.rank(); ++d) {
      if (box.extent(d) > box.extent(dim)) dim = d;
    }
    parts = static_cast<std::uint64_t>(box.extent(dim));
  }
  const auto extent = box.extent(dim);
  const auto chunk = static_cast<std::int64_t>((static_cast<std::uint64_t>(extent) + parts - 1) / parts);
  std::vector<std::int64_t> offset(box.offsets().begin(), box.offsets().end());
  std::vector<std::int64_t> size(box.extents().begin(), box.extents().end());
  for (std::int64_t lo = 0; lo < extent; lo += chunk) {
    offset[dim] = box.offset(dim) + lo;
    size[dim] = std::min(chunk, extent - lo);
    out.emplace_back(offset, size);
  }
  return out;
}

std::string list_boxes(const std::vector<Box>& boxes) {
  std::string s;
  const std::size_t shown = std::min<std::size_t>(boxes.size(), 4);
  for (std::size_t i = 0; i < shown; ++i) s += (i ? ", " : "") + boxes[i].to_string();
  if (boxes.size() > shown) s += " and " + std::to_string(boxes.size() - shown) + " more";
  return s;
}

}  // namespace

PieceCatalog::PieceCatalog(std::vector<std::vector<Piece>> pieces_by_rank)
    : pieces_by_rank_(std::move(pieces_by_rank)) {
  // std::map keeps tensors in name order: plans then do not depend on registration order.
  std::map<std::string, Tensor> by_name;
  for (std::size_t r = 0; r < pieces_by_rank_.size(); ++r) {
    const auto& pieces = pieces_by_rank_[r];
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      const Piece& p = pieces[i];
      if (p.global_shape.size() > kMaxRank) {
        throw Error(ErrorCode::kInvalidArgument, where(p.tensor, r, i) + ": rank " +
                                                     std::to_string(p.global_shape.size()) + " exceeds " +
                                                     std::to_string(kMaxRank));
      }
      for (auto size : p.global_shape) {
        if (size < 0) {
          throw Error(ErrorCode::kInvalidArgument,
                      where(p.tensor, r, i) + ": negative size in shape " + shape_to_string(p.global_shape));
        }
      }
      if (!p.box.within(p.global_shape)) {
        throw Error(ErrorCode::kInvalidArgument, where(p.tensor, r, i) + ": box " + p.box.to_string() +
                                                     " is not inside the global shape " +
                                                     shape_to_string(p.global_shape));
      }
      const DTypeFacts f = facts(p.dtype);
      if (f.size == 0) {
        throw Error(ErrorCode::kInvalidArgument, where(p.tensor, r, i) + ": unknown dtype " +
                                                     std::to_string(static_cast<int>(p.dtype)));
      }
      auto [it, fresh] = by_name.try_emplace(p.tensor);
      Tensor& t = it->second;
      if (fresh) {
        t.name = p.tensor;
        t.shape = p.global_shape;
        t.dtype = p.dtype;
        t.element_size = f.size;
      } else if (t.shape != p.global_shape || t.dtype != p.dtype) {
        const PieceRef first = t.pieces.front();
        throw Error(ErrorCode::kLayoutMismatch,
                    quoted(p.tensor) + ": rank " + std::to_string(r) + " registers it as " +
                        shape_to_string(p.global_shape) + " " + f.name + " but rank " + std::to_string(first.rank) +
                        " as " + shape_to_string(t.shape) + " " + facts(t.dtype).name);
      }
      // One rank's buffers of a tensor hold different parts of it; an overlap is a registration
      // mistake that would make "which buffer holds this byte" ambiguous.
      for (const PieceRef& other : t.pieces) {
        if (other.rank != r) continue;
        const Piece& o = pieces[other.piece];
        if (overlaps(o.box, p.box)) {
          throw Error(ErrorCode::kInvalidArgument, quoted(p.tensor) + ": rank " + std::to_string(r) + " pieces " +
                                                       std::to_string(other.piece) + " " + o.box.to_string() +
                                                       " and " + std::to_string(i) + " " + p.box.to_string() +
                                                       " overlap");
        }
      }
      t.pieces.push_back({static_cast<std::uint32_t>(r), static_cast<std::uint32_t>(i)});
    }
  }
  tensors_.reserve(by_name.size());
  for (auto& [name, tensor] : by_name) {
    index_.emplace(name, tensors_.size());
    tensors_.push_back(std::move(tensor));
  }
}

const PieceCatalog::Tensor* PieceCatalog::find(std::string_view name) const {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

std::uint64_t PullPlan::total_bytes() const noexcept {
  std::uint64_t total = 0;
  for (auto b : bytes_by_rank) total += b;
  return total;
}

PullPlan plan_pulls(const PieceCatalog& catalog, const ConsumerLayout& layout, const PlanOptions& options) {
  if (options.min_split_bytes == 0) throw Error(ErrorCode::kInvalidArgument, "plan options: min_split_bytes is 0");
  for (const auto& [name, want] : layout.tensors) {
    if (catalog.find(name) == nullptr) {
      throw Error(ErrorCode::kLayoutMismatch, "consumer layout names " + quoted(name) + ", which no rank registered");
    }
  }

  PullPlan plan;
  plan.by_rank.resize(catalog.ranks());
  plan.regions_by_rank.resize(catalog.ranks());
  plan.bytes_by_rank.assign(catalog.ranks(), 0);

  auto pull = [&](const Box& region, PieceRef from, const Box& wanted, std::size_t element_size,
                  std::uint32_t destination, std::vector<StridedRun>& runs) {
    runs.clear();
    append_strided_runs(catalog.piece(from).box, wanted, region, element_size, runs);
    auto& ranges = plan.by_rank[from.rank];
    for (const StridedRun& run : runs) {
      ranges.push_back({from.piece, run.src_offset, run.bytes, destination, run.dst_offset, run.count,
                        run.src_stride, run.dst_stride});
    }
    plan.bytes_by_rank[from.rank] += region.volume() * element_size;
    plan.regions_by_rank[from.rank].emplace_back(catalog.piece(from).tensor, region);
  };

  // Replicated cells wait until every singly owned byte is counted, so that their parts go to the
  // ranks that are least loaded over the whole model.
  struct Replicated {
    Cell cell;
    std::uint32_t destination;
    std::size_t element_size;
  };
  std::vector<Replicated> replicated;
  std::vector<Cell> cells;
  std::vector<StridedRun> runs;
  const PullWant whole = PullWant::whole();
  const PullWant nothing = PullWant::nothing();

  for (const auto& tensor : catalog.tensors()) {
    auto listed = layout.tensors.find(tensor.name);
    const PullWant& want =
        listed != layout.tensors.end() ? listed->second : (layout.unlisted_whole ? whole : nothing);
    if (want.kind == PullWant::Kind::kNothing) continue;
    std::vector<Box> boxes;
    if (want.kind == PullWant::Kind::kWhole) {
      boxes.push_back(Box::whole(tensor.shape));
    } else {
      boxes = want.boxes;
      for (std::size_t i = 0; i < boxes.size(); ++i) {
        if (!boxes[i].within(tensor.shape)) {
          throw Error(ErrorCode::kInvalidArgument, quoted(tensor.name) + ": wanted box " + boxes[i].to_string() +
                                                       " is not inside its shape " + shape_to_string(tensor.shape));
        }
        for (std::size_t j = 0; j < i; ++j) {
          if (overlaps(boxes[i], boxes[j])) {
            throw Error(ErrorCode::kInvalidArgument, quoted(tensor.name) + ": wanted boxes " +
                                                         boxes[j].to_string() + " and " + boxes[i].to_string() +
                                                         " overlap");
          }
        }
      }
    }

    for (const Box& wanted : boxes) {
      const auto destination = static_cast<std::uint32_t>(plan.destinations.size());
      plan.destinations.push_back({tensor.name, wanted, tensor.dtype, wanted.volume() * tensor.element_size});
      if (wanted.empty()) continue;

      cells.clear();
      for (const PieceRef& ref : tensor.pieces) {
        const Box& owned = catalog.piece(ref).box;
        if (overlaps(owned, wanted)) refine(cells, intersect(owned, wanted), ref);
      }
      std::uint64_t covered = 0;
      for (const Cell& c : cells) covered += c.box.volume();
      if (covered != wanted.volume()) {
        std::vector<Box> owned;
        for (const PieceRef& ref : tensor.pieces) owned.push_back(catalog.piece(ref).box);
        throw Error(ErrorCode::kLayoutMismatch, quoted(tensor.name) + ": no rank owns " +
                                                    list_boxes(subtract(wanted, owned)) + " (wanted " +
                                                    wanted.to_string() + ")");
      }
      for (Cell& c : cells) {
        if (c.owners.size() == 1) {
          pull(c.box, c.owners.front(), wanted, tensor.element_size, destination, runs);
        } else {
          replicated.push_back({std::move(c), destination, tensor.element_size});
        }
      }
    }
  }

  std::vector<Share> shares;
  for (std::size_t i = 0; i < replicated.size(); ++i) {
    const Replicated& r = replicated[i];
    const std::uint64_t bytes = r.cell.box.volume() * r.element_size;
    const std::uint64_t parts = std::max<std::uint64_t>(
        1, std::min<std::uint64_t>(r.cell.owners.size(), bytes / options.min_split_bytes));
    for (Box& b : slabs(r.cell.box, parts)) {
      const std::uint64_t b_bytes = b.volume() * r.element_size;
      shares.push_back({std::move(b), b_bytes, i});
    }
  }
  // Largest first (LPT scheduling): the big parts spread, the small ones fill the gaps. The
  // stable sort keeps the plan independent of anything but the inputs.
  std::stable_sort(shares.begin(), shares.end(), [](const Share& a, const Share& b) { return a.bytes > b.bytes; });
  for (const Share& s : shares) {
    const Replicated& r = replicated[s.replicated];
    const Cell& c = r.cell;
    PieceRef best = c.owners.front();
    for (const PieceRef& o : c.owners) {
      const auto load = plan.bytes_by_rank[o.rank];
      const auto best_load = plan.bytes_by_rank[best.rank];
      if (load < best_load || (load == best_load && o.rank < best.rank)) best = o;
    }
    pull(s.box, best, plan.destinations[r.destination].box, r.element_size, r.destination, runs);
  }

  for (auto& ranges : plan.by_rank) {
    std::sort(ranges.begin(), ranges.end(), [](const PullRange& a, const PullRange& b) {
      return a.piece != b.piece ? a.piece < b.piece : a.src_offset < b.src_offset;
    });
    std::size_t kept = 0;
    for (std::size_t i = 0; i < ranges.size(); ++i) {
      if (kept > 0) {
        PullRange& last = ranges[kept - 1];
        const PullRange& r = ranges[i];
        if (last.piece == r.piece && last.destination == r.destination) {
          if (last.count == 1 && r.count == 1 && last.src_offset + last.length == r.src_offset &&
              last.dst_offset + last.length == r.dst_offset) {
            last.length += r.length;
            continue;
          }
          // The next rows of the same strided range (a replicated cell split in slabs that went
          // to one rank).
          if (last.count > 1 && last.length == r.length && (r.count == 1 || (r.src_stride == last.src_stride &&
                                                                             r.dst_stride == last.dst_stride)) &&
              last.src_offset + last.count * last.src_stride == r.src_offset &&
              last.dst_offset + last.count * last.dst_stride == r.dst_offset) {
            last.count += r.count;
            continue;
          }
        }
      }
      ranges[kept++] = ranges[i];
    }
    ranges.resize(kept);
  }
  return plan;
}

}  // namespace modelcast::layout
