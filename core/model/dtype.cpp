#include <array>

#include "modelcast/tensor.h"
#include "modelcast/types.h"

namespace modelcast {
namespace {
struct DTypeInfo {
  DType dtype;
  std::string_view name;
  std::size_t size;
};
constexpr std::array<DTypeInfo, 11> kDTypes{{
    {DType::kF64, "f64", 8}, {DType::kF32, "f32", 4}, {DType::kF16, "f16", 2},
    {DType::kBF16, "bf16", 2}, {DType::kI64, "i64", 8}, {DType::kI32, "i32", 4},
    {DType::kI16, "i16", 2}, {DType::kI8, "i8", 1}, {DType::kU8, "u8", 1}, {DType::kBool, "bool", 1},
    {DType::kF8E4M3, "f8e4m3", 1},
}};
}  // namespace

std::size_t dtype_size(DType dtype) noexcept {
  for (const auto& info : kDTypes) {
    if (info.dtype == dtype) return info.size;
  }
  return 0;
}

std::string_view dtype_name(DType dtype) noexcept {
  for (const auto& info : kDTypes) {
    if (info.dtype == dtype) return info.name;
  }
  return "unknown";
}

std::optional<DType> parse_dtype(std::string_view name) noexcept {
  for (const auto& info : kDTypes) {
    if (info.name == name) return info.dtype;
  }
  return std::nullopt;
}

std::string_view memory_kind_name(MemoryKind kind) noexcept {
  // Every value a cast can make has a name: "host" for any unknown one hid the mistake.
  switch (kind) {
    case MemoryKind::kHost: return "host";
    case MemoryKind::kCuda: return "cuda";
  }
  return "unknown";
}

std::size_t TensorSpec::element_count() const noexcept {
  std::size_t count = 1;
  for (auto extent : shape) count *= static_cast<std::size_t>(extent < 0 ? 0 : extent);
  return count;
}

std::optional<std::uint64_t> TensorSpec::checked_size_bytes() const noexcept {
  std::uint64_t bytes = dtype_size(dtype);
  for (auto extent : shape) {
    if (extent < 0) return std::nullopt;
    if (__builtin_mul_overflow(bytes, static_cast<std::uint64_t>(extent), &bytes)) return std::nullopt;
  }
  // An empty tensor (an extent of 0) holds no bytes whatever its other extents are, but its
  // shape must still be countable: a 0 after an overflowing product would hide the overflow.
  std::uint64_t elements = 1;
  for (auto extent : shape) {
    if (extent == 0) continue;
    if (__builtin_mul_overflow(elements, static_cast<std::uint64_t>(extent), &elements)) return std::nullopt;
  }
  return bytes;
}

}  // namespace modelcast
