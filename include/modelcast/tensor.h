// Tensors as the producer registers them and as a consumer's view exposes them.
#pragma once

#include "modelcast/export.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "modelcast/error.h"
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
  // size_bytes() for a shape that may come from outside (a file, a peer): nullopt when an
  // extent is negative or the size does not fit in 64 bits, where size_bytes() is wrong, and
  // when the nonzero extents' product does not (an empty tensor's shape must still count).
  std::optional<std::uint64_t> checked_size_bytes() const noexcept;
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
  // A piece of a tensor that several producer ranks hold (ProducerOptions::rank_count > 1): the
  // whole tensor's shape and where this piece starts in it, per dimension; spec.shape is the
  // piece's extent. Ranks registering the same box replicate it; boxes of different ranks that
  // overlap in part (halo rows) replicate the overlap: it must hold the same bytes on each, as a
  // consumer takes each part of it from whichever rank balances the load. Both empty: the whole
  // tensor.
  std::vector<std::int64_t> global_shape{};
  std::vector<std::int64_t> global_offset{};
};

// One tensor inside a ModelView: read-only bytes that stay valid while the view is held.
struct TensorView {
  const TensorSpec* spec = nullptr;
  const void* data = nullptr;
  // An f8e4m3 tensor the consumer converted (ConsumerOptions::conversions): element i is
  // decode(code) * scales[i / scale_block], one scale for the whole tensor when scale_block is
  // 0. Empty for every other tensor.
  std::span<const float> scales{};
  std::size_t scale_block = 0;
  // A part of the tensor (ConsumerOptions::wants): per dimension where the view's box starts in
  // the whole tensor, and the whole tensor's shape; shape() is the box's extent. Both empty for a
  // whole tensor.
  std::span<const std::int64_t> box_offset{};
  std::span<const std::int64_t> whole_shape{};

  bool is_part() const noexcept { return !whole_shape.empty(); }
  const std::string& name() const noexcept { return spec->name; }
  DType dtype() const noexcept { return spec->dtype; }
  const std::vector<std::int64_t>& shape() const noexcept { return spec->shape; }
  std::size_t size_bytes() const noexcept { return spec->size_bytes(); }
  std::span<const std::byte> bytes() const noexcept {
    return {static_cast<const std::byte*>(data), size_bytes()};
  }
  // Typed access for host tensors. T must match dtype(): double f64, float f32, std::int64_t,
  // int32_t, int16_t, int8_t, std::uint8_t u8, bool; std::uint16_t reads f16 and bf16 as raw
  // bits, std::uint8_t f8e4m3 as its codes (decode with scales(): as NumPy's uint8 in Python). Throws Error(kInvalidArgument) naming the tensor and both dtypes otherwise (reading an
  // f32 tensor as double would give garbage and half the element count).
  template <typename T>
  std::span<const T> as() const {
    if (!reads_as<T>(dtype())) {
      throw Error(ErrorCode::kInvalidArgument, "tensor '" + name() + "' is " + std::string(dtype_name(dtype())) +
                                                   ": as<T>() needs the matching T (see tensor.h)");
    }
    return {static_cast<const T*>(data), size_bytes() / sizeof(T)};
  }

 private:
  template <typename T>
  static constexpr bool reads_as(DType dtype) noexcept {
    using U = std::remove_cv_t<T>;
    if constexpr (std::is_same_v<U, double>) return dtype == DType::kF64;
    if constexpr (std::is_same_v<U, float>) return dtype == DType::kF32;
    if constexpr (std::is_same_v<U, std::uint16_t>) return dtype == DType::kF16 || dtype == DType::kBF16;
    if constexpr (std::is_same_v<U, std::int64_t>) return dtype == DType::kI64;
    if constexpr (std::is_same_v<U, std::int32_t>) return dtype == DType::kI32;
    if constexpr (std::is_same_v<U, std::int16_t>) return dtype == DType::kI16;
    if constexpr (std::is_same_v<U, std::int8_t>) return dtype == DType::kI8;
    if constexpr (std::is_same_v<U, std::uint8_t>) return dtype == DType::kU8 || dtype == DType::kF8E4M3;
    if constexpr (std::is_same_v<U, bool>) return dtype == DType::kBool;
    return false;
  }
};

}  // namespace modelcast
