// Element types and memory kinds shared by the producer, the consumer and the wire format.
#pragma once

#include "modelcast/export.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace modelcast {

// Element type of a tensor. The numeric values are part of the wire protocol: append only.
enum class DType : std::uint8_t {
  kF64 = 0, kF32 = 1, kF16 = 2, kBF16 = 3,
  kI64 = 4, kI32 = 5, kI16 = 6, kI8 = 7, kU8 = 8, kBool = 9,
  // fp8 e4m3 (OCP E4M3FN): what a consumer converts to for fp8 serving (ConsumerOptions::
  // conversions); a producer may register it too, as opaque bytes.
  kF8E4M3 = 10,
};

// Where a tensor's bytes live. Device memory is described by MemoryKind::kCuda plus a
// device ordinal; the wire format carries both so that later transports can use them.
enum class MemoryKind : std::uint8_t { kHost = 0, kCuda = 1 };

// Bytes per element of `dtype` (bool is one byte).
MODELCAST_API std::size_t dtype_size(DType dtype) noexcept;

// Short lowercase name ("f32", "bf16", ...), stable: used in logs, JSON and the C ABI.
MODELCAST_API std::string_view dtype_name(DType dtype) noexcept;

// Inverse of dtype_name; std::nullopt for an unknown name.
MODELCAST_API std::optional<DType> parse_dtype(std::string_view name) noexcept;

// "host" or "cuda"; "unknown" for a value that is no MemoryKind.
MODELCAST_API std::string_view memory_kind_name(MemoryKind kind) noexcept;

// What makes `name` unusable as a tensor, model, consumer or group name, said as the end of a
// sentence ("contains a control character at byte 3"), or nullopt: over 4096 bytes, a NUL or
// another control character (logs and errors show names), not UTF-8. Any thread.
MODELCAST_API std::optional<std::string> name_problem(std::string_view name);

}  // namespace modelcast
