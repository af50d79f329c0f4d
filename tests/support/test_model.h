// A small model of mixed dtypes whose bytes are a pure function of (seed, version, tensor),
// shared by the exchange tests and the peer processes they start, so either side can check
// every byte of any version it holds.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "modelcast/model_view.h"
#include "modelcast/tensor.h"

namespace testmodel {

struct Tensor {
  modelcast::TensorSpec spec;
  std::vector<std::uint64_t> words;
};

inline std::vector<Tensor> make(std::size_t total_kib, int count = 12) {
  using modelcast::DType;
  const DType dtypes[] = {DType::kF32, DType::kBF16, DType::kF16, DType::kI64, DType::kU8, DType::kBool, DType::kF64};
  std::vector<Tensor> model;
  std::size_t per_tensor = total_kib * 1024 / static_cast<std::size_t>(count);
  for (int i = 0; i < count; ++i) {
    Tensor t;
    // Appended, not "t" + std::string: gcc 12 warns falsely (-Wrestrict) on that once inlined.
    t.spec.name = "t";
    t.spec.name += std::to_string(i);
    t.spec.dtype = dtypes[i % 7];
    auto elements = static_cast<std::int64_t>(per_tensor / modelcast::dtype_size(t.spec.dtype)) + i;  // odd sizes too
    t.spec.shape = {elements};
    t.words.resize((t.spec.size_bytes() + 7) / 8);
    model.push_back(std::move(t));
  }
  return model;
}

inline std::uint64_t word(std::uint64_t seed, std::uint64_t version, std::size_t tensor, std::size_t index) {
  std::uint64_t x = seed * 0xD6E8FEB86659FD93ull + version * 0x9E3779B97F4A7C15ull + tensor * 0xC2B2AE3D27D4EB4Full + index;
  x ^= x >> 31;
  return x * 0xBF58476D1CE4E5B9ull;
}

// Versions that change only some tensors, as frozen layers or sparse updates do: with
// `change_pct` < 100, tensor t changes at version v > 1 with that probability (a pure function
// of seed, t and v), and otherwise keeps its bytes of the version before. Returns the version
// whose bytes tensor t holds at `version`.
inline std::uint64_t source_version(std::uint64_t seed, std::uint64_t version, std::size_t tensor, int change_pct) {
  if (change_pct >= 100) return version;
  for (std::uint64_t v = version; v > 1; --v) {
    if (word(seed ^ 0x5A5A5A5Aull, v, tensor, 0) % 100 < static_cast<std::uint64_t>(change_pct)) return v;
  }
  return 1;
}

inline void fill(std::vector<Tensor>& model, std::uint64_t seed, std::uint64_t version, int change_pct = 100) {
  for (std::size_t t = 0; t < model.size(); ++t) {
    const std::uint64_t source = source_version(seed, version, t, change_pct);
    for (std::size_t i = 0; i < model[t].words.size(); ++i) model[t].words[i] = word(seed, source, t, i);
  }
}

// Empty string if `view` holds exactly what fill(seed, view.version(), change_pct) wrote; else
// what differs.
inline std::string check(const modelcast::ModelView& view, std::uint64_t seed, int change_pct = 100) {
  auto tensors = view.tensors();
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    const auto* bytes = static_cast<const unsigned char*>(tensors[t].data);
    std::size_t size = tensors[t].size_bytes();
    const std::uint64_t source = source_version(seed, view.version(), t, change_pct);
    for (std::size_t i = 0; i * 8 < size; ++i) {
      std::uint64_t expected = word(seed, source, t, i);
      if (std::memcmp(bytes + i * 8, &expected, std::min<std::size_t>(8, size - i * 8)) != 0) {
        return "tensor '" + tensors[t].name() + "' word " + std::to_string(i) + " differs from version " +
               std::to_string(view.version());
      }
    }
  }
  return {};
}

}  // namespace testmodel
