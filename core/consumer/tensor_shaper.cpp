#include "core/consumer/tensor_shaper.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "core/layout/copy_runs.h"
#include "modelcast/error.h"

namespace modelcast::consumer {
namespace {

constexpr std::size_t kAlignment = 64;  // each converted tensor starts a cache line

std::size_t aligned(std::size_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

bool convertible(DType dtype) { return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16; }

}  // namespace

TensorShaper::TensorShaper(std::vector<TensorConversion> conversions) : conversions_(std::move(conversions)) {
  std::set<std::string> names;
  for (const auto& c : conversions_) {
    if (c.tensor.empty()) throw Error(ErrorCode::kInvalidArgument, "a conversion names no tensor (\"*\" for all)");
    const std::string what = "the conversion of '" + c.tensor + "'";
    if (!convertible(c.to) && c.to != DType::kF8E4M3) {
      throw Error(ErrorCode::kInvalidArgument, what + " is to " + std::string(dtype_name(c.to)) +
                                                   ": conversions are to f32, f16, bf16 or f8e4m3");
    }
    if (c.fp8_block != 0 && c.to != DType::kF8E4M3) {
      throw Error(ErrorCode::kInvalidArgument, what + " has fp8_block " + std::to_string(c.fp8_block) +
                                                   " but converts to " + std::string(dtype_name(c.to)));
    }
    if (!names.insert(c.tensor).second) throw Error(ErrorCode::kInvalidArgument, "'" + c.tensor + "' is converted twice");
  }
  for (std::size_t i = 0; i < conversions_.size(); ++i) {
    if (conversions_[i].tensor == "*") {
      wildcard_ = &conversions_[i];
    } else {
      named_.emplace(conversions_[i].tensor, i);
    }
  }
}

const TensorConversion* TensorShaper::conversion_for(const TensorSpec& spec) const {
  if (auto it = named_.find(spec.name); it != named_.end()) return &conversions_[it->second];
  // "*" to a tensor's own dtype (every tensor to f32, say, of a model that is partly f32) leaves
  // that tensor as it is: converting it would copy it into the shaped memory for nothing.
  return wildcard_ && convertible(spec.dtype) && wildcard_->to != spec.dtype ? wildcard_ : nullptr;
}

struct TensorShaper::Planned {
  detail::ShapedTensor view;
  const TensorEntry* entry = nullptr;
  const TensorConversion* conversion = nullptr;
  std::vector<layout::CopyRun> runs;  // from the tensor's first byte; empty for a whole tensor
};

void TensorShaper::check(const Manifest& manifest) const {
  if (named_.empty()) return;
  std::unordered_map<std::string_view, const TensorEntry*> entry_of;
  entry_of.reserve(manifest.tensors.size());
  for (const auto& t : manifest.tensors) entry_of.emplace(t.spec.name, &t);
  for (const auto& c : conversions_) {
    if (c.tensor == "*") continue;
    auto found = entry_of.find(c.tensor);
    const TensorEntry* it = found == entry_of.end() ? nullptr : found->second;
    if (it == nullptr) {
      throw Error(ErrorCode::kLayoutMismatch, "version " + std::to_string(manifest.version) + " has no tensor '" +
                                                  c.tensor + "' to convert to " + std::string(dtype_name(c.to)));
    }
    if (!convertible(it->spec.dtype)) {
      throw Error(ErrorCode::kLayoutMismatch, "tensor '" + c.tensor + "' of version " + std::to_string(manifest.version) +
                                                  " is " + std::string(dtype_name(it->spec.dtype)) +
                                                  ": only f32, f16 and bf16 tensors convert");
    }
  }
}

std::vector<TensorShaper::Planned> TensorShaper::plan(const Manifest& manifest, const TensorSelection& selection,
                                                      std::size_t& bytes) const {
  check(manifest);  // a version that cannot be converted as asked is refused before any work
  // Each view: where its bytes come from (runs of its tensor) and where they go.
  std::vector<Planned> planned;
  bytes = 0;
  auto place = [&](Planned& p, std::uint64_t elements) {
    const DType to = p.conversion ? p.conversion->to : p.entry->spec.dtype;
    p.view.spec.dtype = to;
    p.view.in_receive_buffer = false;
    p.view.offset = bytes;
    bytes += aligned(elements * dtype_size(to));
  };
  for (const auto& kept : selection.kept()) {
    const TensorEntry& entry = manifest.tensors[kept.tensor];
    const TensorConversion* conversion = conversion_for(entry.spec);
    if (kept.whole) {
      Planned p{{entry.spec, true, entry.offset, {}, 0, {}, {}}, &entry, conversion, {}};
      if (conversion) place(p, entry.spec.element_count());
      planned.push_back(std::move(p));
      continue;
    }
    const auto whole = layout::Box::whole(entry.spec.shape);
    for (const auto& part : kept.parts) {
      Planned p{{entry.spec, true, 0, {}, 0, {}, {}}, &entry, conversion, {}};
      p.view.spec.shape.assign(part.extents().begin(), part.extents().end());
      p.view.box_offset.assign(part.offsets().begin(), part.offsets().end());
      p.view.whole_shape = entry.spec.shape;
      if (!kept.origin.empty()) {  // a piece of a tensor several ranks hold: placed in the whole
        for (std::size_t d = 0; d < p.view.box_offset.size(); ++d) p.view.box_offset[d] += kept.origin[d];
        p.view.whole_shape = kept.global_shape;
      }
      // A part that is all of the tensor (a piece that is the whole) is the tensor.
      if (p.view.spec.shape == p.view.whole_shape) {
        p.view.box_offset.clear();
        p.view.whole_shape.clear();
      }
      p.runs = layout::copy_runs(whole, part, part, dtype_size(entry.spec.dtype));
      if (p.runs.size() <= 1 && !conversion) {
        p.view.offset = entry.offset + (p.runs.empty() ? 0 : p.runs.front().src_offset);  // a slab: read in place
      } else {
        place(p, part.volume());
      }
      planned.push_back(std::move(p));
    }
  }
  return planned;
}

void TensorShaper::apply(const Manifest& manifest, const TensorSelection& selection, const std::byte* base,
                         detail::InstalledVersion& version, ShapingTarget& target) const {
  if (leaves_as_is(selection)) return;
  std::size_t bytes = 0;
  auto planned = plan(manifest, selection, bytes);
  // Memory whenever a part lives outside the receive buffer, even when every such part is empty
  // (a converted 0-element tensor, an empty shard): its view points into that memory.
  const bool outside = std::any_of(planned.begin(), planned.end(), [](const auto& p) { return !p.view.in_receive_buffer; });
  std::byte* memory = outside ? target.take(bytes) : nullptr;
  for (auto& p : planned) {
    if (p.view.in_receive_buffer) continue;
    const std::byte* tensor = base + p.entry->offset;
    std::byte* dst = memory + p.view.offset;
    const std::size_t count = p.view.spec.element_count();
    const DType from = p.entry->spec.dtype;
    // The source as one contiguous run of the producer's dtype: in place, or gathered.
    const std::byte* src = tensor;
    if (p.runs.size() == 1) {
      src = tensor + p.runs.front().src_offset;
    } else if (p.runs.size() > 1) {
      std::byte* into = p.conversion ? target.scratch(count * dtype_size(from)) : dst;
      target.gather(into, tensor, p.runs);
      if (!p.conversion) continue;
      src = into;
    }
    if (p.conversion) {
      target.convert(from, src, *p.conversion, dst, count, p.view.scales, p.view.scale_block);
    } else {
      target.copy(dst, src, count * dtype_size(from));
    }
  }
  target.install(version);
  std::vector<detail::ShapedTensor> shaped;
  shaped.reserve(planned.size());
  for (auto& p : planned) shaped.push_back(std::move(p.view));
  version.shaped = std::move(shaped);
  version.shapes_views = true;
}

}  // namespace modelcast::consumer
