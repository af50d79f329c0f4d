#include "core/layout/convert.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "device/element_format.h"
#include "modelcast/error.h"

namespace modelcast::layout {
namespace {

[[noreturn]] void invalid(const std::string& message) { throw Error(ErrorCode::kInvalidArgument, message); }

void require_ieee(Format format, const char* what) {
  if (format == Format::kF8E4M3) invalid(std::string(what) + ": f8e4m3 needs a scale (quantize_fp8/dequantize_fp8)");
}

void require_scale(float scale) {
  if (!(scale > 0.0f) || !std::isfinite(scale)) invalid("fp8: scale " + std::to_string(scale) + " is not finite and > 0");
}

float load(Format format, const void* src, std::size_t i) noexcept {
  switch (format) {
    case Format::kF32: {
      float f;
      std::memcpy(&f, static_cast<const char*>(src) + i * 4, 4);
      return f;
    }
    case Format::kF16: {
      std::uint16_t bits;
      std::memcpy(&bits, static_cast<const char*>(src) + i * 2, 2);
      return element::f16_to_f32(bits);
    }
    case Format::kBF16: {
      std::uint16_t bits;
      std::memcpy(&bits, static_cast<const char*>(src) + i * 2, 2);
      return element::bf16_to_f32(bits);
    }
    case Format::kF8E4M3: break;
  }
  return 0.0f;
}

void store(Format format, void* dst, std::size_t i, float value) noexcept {
  switch (format) {
    case Format::kF32:
      std::memcpy(static_cast<char*>(dst) + i * 4, &value, 4);
      return;
    case Format::kF16: {
      const std::uint16_t bits = element::f32_to_f16(value);
      std::memcpy(static_cast<char*>(dst) + i * 2, &bits, 2);
      return;
    }
    case Format::kBF16: {
      const std::uint16_t bits = element::f32_to_bf16(value);
      std::memcpy(static_cast<char*>(dst) + i * 2, &bits, 2);
      return;
    }
    case Format::kF8E4M3: return;
  }
}

// The loops are instantiated per format pair so that the switch leaves the inner loop.
template <Format From, Format To>
void convert_run(const void* src, void* dst, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) store(To, dst, i, load(From, src, i));
}

template <Format From>
void convert_from(const void* src, Format to, void* dst, std::size_t count) {
  switch (to) {
    case Format::kF32: return convert_run<From, Format::kF32>(src, dst, count);
    case Format::kF16: return convert_run<From, Format::kF16>(src, dst, count);
    case Format::kBF16: return convert_run<From, Format::kBF16>(src, dst, count);
    case Format::kF8E4M3: return;
  }
}

// 2^k for the small k the fp8 table needs, built from its bits (exact, no libm call).
constexpr double pow2(int k) noexcept { return std::bit_cast<double>(static_cast<std::uint64_t>(1023 + k) << 52); }

constexpr std::array<float, 256> make_f8_table() noexcept {
  std::array<float, 256> table{};
  for (int code = 0; code < 256; ++code) {
    const int exponent = (code >> 3) & 0xf;
    const int mantissa = code & 7;
    double magnitude;
    if (exponent == 0xf && mantissa == 7) {
      magnitude = std::numeric_limits<double>::quiet_NaN();
    } else if (exponent == 0) {
      magnitude = mantissa * pow2(-9);
    } else {
      magnitude = (8 + mantissa) * pow2(exponent - 10);
    }
    table[static_cast<std::size_t>(code)] = static_cast<float>((code & 0x80) ? -magnitude : magnitude);
  }
  return table;
}

constexpr std::array<float, 256> kF8Values = make_f8_table();

// The float nearest to `value` in the direction that makes its last mantissa bit odd when
// `value` is not a float: rounding a product to float this way ("round to odd") and then to
// f16/bf16 with ties to even rounds the product once, where two nearest-even roundings could
// round a value just off a tie as if it were on it.
float round_to_odd(double value) noexcept {
  const float f = static_cast<float>(value);
  if (static_cast<double>(f) == value || std::isinf(f) || std::isnan(f)) return f;
  auto bits = std::bit_cast<std::uint32_t>(f);
  if ((bits & 1u) == 0) {
    // The other float bracketing value, one step up or down in magnitude (sign and magnitude
    // bits: the step does not depend on the sign).
    bits = std::fabs(value) > std::fabs(static_cast<double>(f)) ? bits + 1 : bits - 1;
  }
  return std::bit_cast<float>(bits);
}

std::uint8_t quantize_one(float x, float scale) noexcept { return element::f8e4m3_quantize(x, scale); }

template <Format From>
void quantize_run(const void* src, std::uint8_t* dst, std::size_t count, float scale) {
  for (std::size_t i = 0; i < count; ++i) dst[i] = quantize_one(load(From, src, i), scale);
}

// A 16-bit input has 65,536 values: for a long run the codes of all of them for this scale cost
// less than a division and rounding per element (bf16 -> fp8 of a large tensor is the common case).
constexpr std::size_t kTableWorthIt = std::size_t{1} << 18;

template <Format From>
void quantize_run_by_table(const void* src, std::uint8_t* dst, std::size_t count, float scale) {
  std::vector<std::uint8_t> table(65536);
  for (std::uint32_t bits = 0; bits < 65536; ++bits) {
    const auto b = static_cast<std::uint16_t>(bits);
    table[bits] = quantize_one(load(From, &b, 0), scale);
  }
  const auto* in = static_cast<const unsigned char*>(src);
  for (std::size_t i = 0; i < count; ++i) {
    std::uint16_t bits;
    std::memcpy(&bits, in + 2 * i, 2);
    dst[i] = table[bits];
  }
}

void quantize(Format from, const void* src, std::uint8_t* dst, std::size_t count, float scale) {
  switch (from) {
    case Format::kF32: return quantize_run<Format::kF32>(src, dst, count, scale);
    case Format::kF16:
      if (count >= kTableWorthIt) return quantize_run_by_table<Format::kF16>(src, dst, count, scale);
      return quantize_run<Format::kF16>(src, dst, count, scale);
    case Format::kBF16:
      if (count >= kTableWorthIt) return quantize_run_by_table<Format::kBF16>(src, dst, count, scale);
      return quantize_run<Format::kBF16>(src, dst, count, scale);
    case Format::kF8E4M3: return;
  }
}

// fp8 has 256 codes: the target's bits for each at this scale, then one lookup per element.
template <Format To, typename Bits>
void dequantize_run(const std::uint8_t* src, void* dst, std::size_t count, float scale) {
  std::array<Bits, 256> table{};
  const double s = scale;
  for (std::size_t code = 0; code < 256; ++code) {
    // An fp8 value has 4 significant bits and the scale 24: the product is exact in double.
    const double product = static_cast<double>(kF8Values[code]) * s;
    if constexpr (To == Format::kF32) {
      store(To, &table[code], 0, static_cast<float>(product));
    } else {
      store(To, &table[code], 0, round_to_odd(product));
    }
  }
  auto* out = static_cast<unsigned char*>(dst);
  for (std::size_t i = 0; i < count; ++i) std::memcpy(out + i * sizeof(Bits), &table[src[i]], sizeof(Bits));
}

void dequantize(const std::uint8_t* src, Format to, void* dst, std::size_t count, float scale) {
  switch (to) {
    case Format::kF32: return dequantize_run<Format::kF32, std::uint32_t>(src, dst, count, scale);
    case Format::kF16: return dequantize_run<Format::kF16, std::uint16_t>(src, dst, count, scale);
    case Format::kBF16: return dequantize_run<Format::kBF16, std::uint16_t>(src, dst, count, scale);
    case Format::kF8E4M3: return;
  }
}

template <Format From>
float amax_run(const void* src, std::size_t count) {
  float m = 0.0f;
  for (std::size_t i = 0; i < count; ++i) m = std::max(m, element::finite_magnitude(load(From, src, i)));
  return m;
}

}  // namespace

std::size_t format_size(Format format) noexcept {
  switch (format) {
    case Format::kF32: return 4;
    case Format::kF16: return 2;
    case Format::kBF16: return 2;
    case Format::kF8E4M3: return 1;
  }
  return 0;
}

std::string_view format_name(Format format) noexcept {
  switch (format) {
    case Format::kF32: return "f32";
    case Format::kF16: return "f16";
    case Format::kBF16: return "bf16";
    case Format::kF8E4M3: return "f8e4m3";
  }
  return "unknown";
}

std::optional<Format> format_of(DType dtype) noexcept {
  switch (dtype) {
    case DType::kF32: return Format::kF32;
    case DType::kF16: return Format::kF16;
    case DType::kBF16: return Format::kBF16;
    case DType::kF8E4M3: return Format::kF8E4M3;
    default: return std::nullopt;
  }
}

void convert(Format from, const void* src, Format to, void* dst, std::size_t count) {
  require_ieee(from, "convert");
  require_ieee(to, "convert");
  if (from == to) {
    if (count > 0) std::memcpy(dst, src, count * format_size(from));
    return;
  }
  switch (from) {
    case Format::kF32: return convert_from<Format::kF32>(src, to, dst, count);
    case Format::kF16: return convert_from<Format::kF16>(src, to, dst, count);
    case Format::kBF16: return convert_from<Format::kBF16>(src, to, dst, count);
    case Format::kF8E4M3: return;
  }
}

float finite_amax(Format from, const void* src, std::size_t count) {
  require_ieee(from, "finite_amax");
  switch (from) {
    case Format::kF32: return amax_run<Format::kF32>(src, count);
    case Format::kF16: return amax_run<Format::kF16>(src, count);
    case Format::kBF16: return amax_run<Format::kBF16>(src, count);
    case Format::kF8E4M3: break;
  }
  return 0.0f;
}

float fp8_scale(float amax) noexcept { return element::fp8_scale(amax); }

void quantize_fp8(Format from, const void* src, std::uint8_t* dst, std::size_t count, float scale) {
  require_ieee(from, "quantize_fp8");
  require_scale(scale);
  quantize(from, src, dst, count, scale);
}

float quantize_fp8_per_tensor(Format from, const void* src, std::uint8_t* dst, std::size_t count) {
  const float scale = fp8_scale(finite_amax(from, src, count));
  quantize_fp8(from, src, dst, count, scale);
  return scale;
}

std::vector<float> quantize_fp8_per_block(Format from, const void* src, std::uint8_t* dst, std::size_t count,
                                          std::size_t block) {
  require_ieee(from, "quantize_fp8_per_block");
  if (block == 0) invalid("quantize_fp8_per_block: block of 0 elements");
  std::vector<float> scales;
  scales.reserve(count / block + (count % block != 0));
  const std::size_t size = format_size(from);
  for (std::size_t start = 0; start < count; start += block) {
    const std::size_t n = std::min(block, count - start);
    const void* run = static_cast<const char*>(src) + start * size;
    const float scale = fp8_scale(finite_amax(from, run, n));
    quantize(from, run, dst + start, n, scale);
    scales.push_back(scale);
  }
  return scales;
}

void dequantize_fp8(const std::uint8_t* src, Format to, void* dst, std::size_t count, float scale) {
  require_ieee(to, "dequantize_fp8");
  require_scale(scale);
  dequantize(src, to, dst, count, scale);
}

void dequantize_fp8_per_block(const std::uint8_t* src, Format to, void* dst, std::size_t count,
                              std::span<const float> scales, std::size_t block) {
  require_ieee(to, "dequantize_fp8_per_block");
  if (block == 0) invalid("dequantize_fp8_per_block: block of 0 elements");
  const std::size_t blocks = count / block + (count % block != 0);  // count + block - 1 may wrap
  if (scales.size() < blocks) {
    invalid("dequantize_fp8_per_block: " + std::to_string(scales.size()) + " scales for " + std::to_string(blocks) +
            " blocks");
  }
  for (std::size_t b = 0; b < blocks; ++b) require_scale(scales[b]);
  const std::size_t size = format_size(to);
  for (std::size_t b = 0; b < blocks; ++b) {
    const std::size_t start = b * block;
    dequantize(src + start, to, static_cast<char*>(dst) + start * size, std::min(block, count - start), scales[b]);
  }
}

std::uint8_t f8e4m3_from_double(double value) noexcept { return element::f8e4m3_from_double(value); }

float f8e4m3_to_float(std::uint8_t code) noexcept { return kF8Values[code]; }

}  // namespace modelcast::layout
