// Element type conversion of contiguous runs, for a consumer that serves in another precision
// than the trainer's: f32, f16 and bf16 between each other, and fp8 e4m3 with a scale.
//
// f32, f16, bf16 (IEEE 754 binary32/binary16 and bfloat16):
//   - widening (f16 -> f32, bf16 -> f32) is exact, bit for bit, NaN payloads included;
//   - narrowing (f32 -> f16/bf16, f16 <-> bf16, the latter through f32, which holds both exactly)
//     rounds to nearest, ties to even, once. Overflow gives +-inf and infinities stay infinities
//     (both formats have them, as torch's .to() does); results below the smallest normal are
//     subnormal (gradual underflow) or +-0 with the sign kept; a NaN becomes the quiet NaN with
//     its sign kept and its payload dropped (f16 0x7e00/0xfe00, bf16 0x7fc0/0xffc0).
//
// fp8 e4m3 (OCP "E4M3FN": 1 sign, 4 exponent bits with bias 7, 3 mantissa bits; no infinities;
// S.1111.111 (0x7f/0xff) is NaN; largest finite 448; subnormals down to 2^-9):
//   - quantizing x with scale s stores q = RNE(x / s), x / s rounded once from its exact value
//     (ties to even mantissa). Finite |x / s| > 448 saturates to +-448 (as NVIDIA's satfinite
//     conversions and Transformer Engine do: a value a little past the scaled range is not a
//     NaN). +-inf becomes NaN: E4M3FN has no infinity and saturating it would make a diverged
//     weight look like a plausible one (torch's float8_e4m3fn cast does the same). NaN stays NaN
//     (0x7f, 0xff when negative). |x / s| <= 2^-10 (half the smallest subnormal: a tie, to even)
//     gives +-0 with the sign kept; up to 2^-6 the subnormals, by the same rounding.
//   - per-tensor scale: s = amax / 448 (in float) with amax the largest |x| over the finite
//     elements of the whole tensor; 1 when there is none or it is 0 (zeros need no scale, and 1
//     keeps dequantization an identity); at least the smallest positive float otherwise.
//   - per-block scale: the same per block of K consecutive elements of the run (the last block
//     may be shorter), one scale per block.
//   - dequantizing gives decode(q) * s rounded once to the target: exact whenever the target can
//     hold the product (always with s = 1, so fp8 -> any target is bit-exact without a scale);
//     NaN gives the target's quiet NaN with the sign kept; a product past f16's range gives inf.
//
// fp8 is hand-written here because Debian's archive has no library for it (Eigen 3.4 stops at
// half and bfloat16).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "modelcast/types.h"

namespace modelcast::layout {

enum class Format : std::uint8_t { kF32, kF16, kBF16, kF8E4M3 };

inline constexpr float kF8E4M3Max = 448.0f;

// Bytes per element of `format`.
std::size_t format_size(Format format) noexcept;
// "f32", "f16", "bf16", "f8e4m3": for messages.
std::string_view format_name(Format format) noexcept;
// The format of a tensor of `dtype`: f32, f16, bf16 and f8e4m3 have one; other dtypes std::nullopt.
std::optional<Format> format_of(DType dtype) noexcept;

// Converts `count` elements from `src` (in `from`) to `dst` (in `to`); both f32, f16 or bf16,
// equal formats copy. src and dst must not overlap. Throws Error(kInvalidArgument) for kF8E4M3
// (it needs a scale: the quantize/dequantize functions below).
void convert(Format from, const void* src, Format to, void* dst, std::size_t count);

// The largest |x| over the finite elements of src (f32, f16 or bf16), 0 if none. For a per-tensor
// scale over a tensor converted in several runs. Throws Error(kInvalidArgument) for kF8E4M3.
float finite_amax(Format from, const void* src, std::size_t count);

// The per-tensor scale for a tensor whose finite_amax is `amax` (rule in the file comment).
float fp8_scale(float amax) noexcept;

// Quantizes count elements of src (f32, f16 or bf16) to fp8 e4m3 with `scale`. Throws
// Error(kInvalidArgument) for a scale that is not finite and > 0, or from == kF8E4M3.
void quantize_fp8(Format from, const void* src, std::uint8_t* dst, std::size_t count, float scale);

// Quantizes a whole tensor with its per-tensor scale and returns the scale. Errors as above.
float quantize_fp8_per_tensor(Format from, const void* src, std::uint8_t* dst, std::size_t count);

// Quantizes with one scale per `block` elements (src starts a block) and returns the
// ceil(count / block) scales. Throws Error(kInvalidArgument) for block 0 or from == kF8E4M3.
std::vector<float> quantize_fp8_per_block(Format from, const void* src, std::uint8_t* dst, std::size_t count,
                                          std::size_t block);

// Dequantizes count fp8 e4m3 elements to `to` (f32, f16 or bf16). Throws
// Error(kInvalidArgument) for a scale not finite and > 0 or to == kF8E4M3.
void dequantize_fp8(const std::uint8_t* src, Format to, void* dst, std::size_t count, float scale);

// Dequantizes with one scale per `block` elements (src starts a block). Throws
// Error(kInvalidArgument) for block 0, fewer than ceil(count / block) scales, or a bad scale.
void dequantize_fp8_per_block(const std::uint8_t* src, Format to, void* dst, std::size_t count,
                              std::span<const float> scales, std::size_t block);

// One value to fp8 e4m3 without a scale (RNE, saturating, NaN and inf as above).
std::uint8_t f8e4m3_from_double(double value) noexcept;
// The value of an fp8 e4m3 code, exact (NaN for 0x7f and 0xff).
float f8e4m3_to_float(std::uint8_t code) noexcept;

}  // namespace modelcast::layout
