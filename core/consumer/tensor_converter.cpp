#include "core/consumer/tensor_converter.h"

#include <algorithm>
#include <set>

#include "core/layout/convert.h"
#include "modelcast/error.h"

namespace modelcast::consumer {
namespace {

constexpr std::size_t kAlignment = 64;  // each converted tensor starts a cache line

std::size_t aligned(std::size_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

bool convertible(DType dtype) { return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16; }

}  // namespace

TensorConverter::TensorConverter(std::vector<TensorConversion> conversions) : conversions_(std::move(conversions)) {
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
  for (const auto& c : conversions_) {
    if (c.tensor == "*") wildcard_ = &c;
  }
}

const TensorConversion* TensorConverter::conversion_for(const TensorSpec& spec) const {
  for (const auto& c : conversions_) {
    if (c.tensor == spec.name) return &c;
  }
  return wildcard_ && convertible(spec.dtype) ? wildcard_ : nullptr;
}

std::shared_ptr<HostBuffer> TensorConverter::free_memory(std::size_t bytes) {
  // Views hold the memory of the versions they see; one no view holds is taken again, grown if
  // a version needs more. The pool grows with the views held, as receive buffers cannot.
  for (auto& memory : pool_) {
    if (memory.use_count() != 1) continue;
    if (memory->size() < bytes) memory = std::make_shared<HostBuffer>(bytes);
    return memory;
  }
  pool_.push_back(std::make_shared<HostBuffer>(bytes));
  return pool_.back();
}

void TensorConverter::apply(const Manifest& manifest, const std::byte* base, detail::InstalledVersion& version) {
  if (conversions_.empty()) return;
  // Plan first: a version that cannot be converted as asked is refused before any work.
  std::vector<const TensorConversion*> plan(manifest.tensors.size(), nullptr);
  std::size_t bytes = 0;
  for (const auto& c : conversions_) {
    if (c.tensor == "*") continue;
    auto it = std::find_if(manifest.tensors.begin(), manifest.tensors.end(),
                           [&](const TensorEntry& t) { return t.spec.name == c.tensor; });
    if (it == manifest.tensors.end()) {
      throw Error(ErrorCode::kLayoutMismatch, "version " + std::to_string(manifest.version) + " has no tensor '" +
                                                  c.tensor + "' to convert to " + std::string(dtype_name(c.to)));
    }
    if (!convertible(it->spec.dtype)) {
      throw Error(ErrorCode::kLayoutMismatch, "tensor '" + c.tensor + "' of version " + std::to_string(manifest.version) +
                                                  " is " + std::string(dtype_name(it->spec.dtype)) +
                                                  ": only f32, f16 and bf16 tensors convert");
    }
  }
  for (std::size_t i = 0; i < manifest.tensors.size(); ++i) {
    const auto& spec = manifest.tensors[i].spec;
    plan[i] = conversion_for(spec);
    if (plan[i]) bytes += aligned(spec.element_count() * dtype_size(plan[i]->to));
  }
  if (std::none_of(plan.begin(), plan.end(), [](auto* c) { return c != nullptr; })) return;

  auto memory = free_memory(std::max<std::size_t>(bytes, 1));
  std::vector<std::optional<detail::ConvertedTensor>> converted(manifest.tensors.size());
  std::uint64_t offset = 0;
  for (std::size_t i = 0; i < manifest.tensors.size(); ++i) {
    if (!plan[i]) continue;
    const auto& entry = manifest.tensors[i];
    const auto from = *layout::format_of(entry.spec.dtype);
    const auto to = plan[i]->to;
    const std::size_t count = entry.spec.element_count();
    detail::ConvertedTensor out;
    out.spec = entry.spec;
    out.spec.dtype = to;
    out.offset = offset;
    const std::byte* src = base + entry.offset;
    std::byte* dst = memory->data() + offset;
    if (count > 0) {
      if (to == DType::kF8E4M3) {
        auto* codes = reinterpret_cast<std::uint8_t*>(dst);
        if (plan[i]->fp8_block == 0) {
          out.scales = {layout::quantize_fp8_per_tensor(from, src, codes, count)};
        } else {
          out.scales = layout::quantize_fp8_per_block(from, src, codes, count, plan[i]->fp8_block);
          out.scale_block = plan[i]->fp8_block;
        }
      } else {
        layout::convert(from, src, *layout::format_of(to), dst, count);
      }
    } else if (to == DType::kF8E4M3) {
      out.scales = {1.0f};
    }
    offset += aligned(count * dtype_size(to));
    converted[i] = std::move(out);
  }
  version.converted = std::move(converted);
  version.converted_memory = std::move(memory);
}

}  // namespace modelcast::consumer
