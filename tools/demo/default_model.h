// The demo's built-in model: a transformer-shaped set of ~100 tensors of mixed dtypes whose
// contents are a pure function of (version, tensor), so a consumer can check every byte.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "modelcast/tensor.h"

namespace demo {

struct HostTensor {
  modelcast::TensorSpec spec;
  std::vector<std::uint64_t> storage;  // 8-byte words: aligned for every dtype
  void* data() { return storage.data(); }
};

// About `target_mib` MiB (at most that) in 4 tensors per layer plus embeddings and norms. The
// vocabulary shrinks with the width below 256: at 8,192 rows the embeddings alone made 4 MiB, and a
// 1 MiB model came out at 6 MiB.
inline std::vector<HostTensor> make_default_model(std::size_t target_mib) {
  using modelcast::DType;
  constexpr int kLayers = 24;
  auto vocabulary = [](std::int64_t w) { return std::min<std::int64_t>(8192, 32 * w); };
  // Per layer: qkv (f32), proj (bf16), mlp (f16), norm (f32), step counter (i64), mask (bool).
  std::int64_t width = 16;
  auto model_bytes = [&](std::int64_t w) {
    return static_cast<std::size_t>(kLayers) * (w * 3 * w * 4 + w * w * 2 + w * 4 * w * 2 + w * 4 + 8 + w) +
           static_cast<std::size_t>(vocabulary(w)) * w * 4 * 2;
  };
  auto next = [](std::int64_t w) { return w + (w < 256 ? 16 : 64); };
  while (model_bytes(next(width)) <= target_mib * (1u << 20)) width = next(width);
  std::vector<HostTensor> model;
  auto add = [&](std::string name, DType dtype, std::vector<std::int64_t> shape) {
    HostTensor t;
    t.spec.name = std::move(name);
    t.spec.dtype = dtype;
    t.spec.shape = std::move(shape);
    t.storage.resize((t.spec.size_bytes() + 7) / 8);
    model.push_back(std::move(t));
  };
  add("embed.tokens", DType::kF32, {vocabulary(width), width});
  for (int layer = 0; layer < kLayers; ++layer) {
    std::string p = "layers." + std::to_string(layer) + ".";
    add(p + "attn.qkv", DType::kF32, {width, 3 * width});
    add(p + "attn.proj", DType::kBF16, {width, width});
    add(p + "mlp.up", DType::kF16, {width, 4 * width});
    add(p + "norm.scale", DType::kF32, {width});
    if (layer % 6 == 0) add(p + "steps", DType::kI64, {});
    if (layer % 8 == 0) add(p + "attn.mask", DType::kBool, {width});
  }
  add("head.weight", DType::kF32, {vocabulary(width), width});
  return model;
}

// The word at `index` of tensor `tensor` in `version`: cheap, and different for every version.
inline std::uint64_t pattern_word(std::uint64_t version, std::size_t tensor, std::size_t index) {
  return (version * 0x9E3779B97F4A7C15ull) ^ (tensor * 0xC2B2AE3D27D4EB4Full) ^ index;
}

inline void fill(HostTensor& t, std::uint64_t version, std::size_t tensor) {
  for (std::size_t i = 0; i < t.storage.size(); ++i) t.storage[i] = pattern_word(version, tensor, i);
}

// True if `bytes` equal what fill() writes for (version, tensor).
inline bool matches(const void* bytes, std::size_t size, std::uint64_t version, std::size_t tensor) {
  const auto* p = static_cast<const unsigned char*>(bytes);
  std::size_t words = size / 8;
  for (std::size_t i = 0; i < words; ++i) {
    std::uint64_t w;
    std::memcpy(&w, p + i * 8, 8);
    if (w != pattern_word(version, tensor, i)) return false;
  }
  if (size % 8) {
    std::uint64_t expected = pattern_word(version, tensor, words);
    if (std::memcmp(p + words * 8, &expected, size % 8) != 0) return false;
  }
  return true;
}

}  // namespace demo
