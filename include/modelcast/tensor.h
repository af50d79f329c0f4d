// Tensors as the producer registers them and as a consumer's view exposes them.
#pragma once

#include "modelcast/export.h"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "modelcast/types.h"

namespace modelcast {

// Description of one tensor: what the manifest carries and what a consumer may expect.
struct MODELCAST_API TensorSpec {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<std::int64_t> shape;  // empty shape = scalar
  MemoryKind memory = MemoryKind::kHost;
  int device = 0;                   // device ordinal when memory is kCuda

  std::size_t element_count() const noexcept;
  std::size_t size_bytes() const noexcept { return element_count() * dtype_size(dtype); }
  // Equality of layout (name, dtype, shape), ignoring where the bytes live.
  bool same_layout(const TensorSpec& other) const noexcept {
    return name == other.name && dtype == other.dtype && shape == other.shape;
  }
};

// A tensor the trainer owns and registers with a Producer: modelcast reads `data` during
// publish() only; the caller keeps it alive and unmoved while the Producer exists.
struct TensorRef {
  TensorSpec spec;
  const void* data = nullptr;
};

// One tensor inside a ModelView: read-only bytes that stay valid while the view is held.
struct TensorView {
  const TensorSpec* spec = nullptr;
  const void* data = nullptr;

  const std::string& name() const noexcept { return spec->name; }
  DType dtype() const noexcept { return spec->dtype; }
  const std::vector<std::int64_t>& shape() const noexcept { return spec->shape; }
  std::size_t size_bytes() const noexcept { return spec->size_bytes(); }
  std::span<const std::byte> bytes() const noexcept {
    return {static_cast<const std::byte*>(data), size_bytes()};
  }
  // Typed access for host tensors; the caller picks T matching dtype().
  template <typename T>
  std::span<const T> as() const noexcept {
    return {static_cast<const T*>(data), size_bytes() / sizeof(T)};
  }
};

}  // namespace modelcast
