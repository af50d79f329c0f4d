// Conversions against independent references: widening checked exhaustively over every f16,
// bf16 and fp8 bit pattern against decoders written from the formats' definitions; narrowing
// checked against a nearest-value search over the target's values in double (ties to the even
// code), on every tie between neighbours, the values just off each tie, subnormals, overflow,
// infinities, NaN and random inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/layout/convert.h"
#include "modelcast/error.h"

namespace {

using modelcast::DType;
using modelcast::Error;
using modelcast::layout::Format;
namespace layout = modelcast::layout;

constexpr double kInf = std::numeric_limits<double>::infinity();

// --- independent decoders, from the format definitions ---

double f16_value(std::uint16_t bits) {
  const int e = (bits >> 10) & 0x1f;
  const int m = bits & 0x3ff;
  double v = e == 0 ? std::ldexp(m, -24) : e == 31 ? (m ? std::nan("") : kInf) : std::ldexp(1024 + m, e - 25);
  return (bits & 0x8000) ? -v : v;
}

double bf16_value(std::uint16_t bits) {
  const int e = (bits >> 7) & 0xff;
  const int m = bits & 0x7f;
  double v = e == 0 ? std::ldexp(m, -133) : e == 255 ? (m ? std::nan("") : kInf) : std::ldexp(128 + m, e - 134);
  return (bits & 0x8000) ? -v : v;
}

double f8_value(std::uint8_t bits) {
  const int e = (bits >> 3) & 0xf;
  const int m = bits & 7;
  double v = (e == 15 && m == 7) ? std::nan("") : e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10);
  return (bits & 0x80) ? -v : v;
}

// --- reference rounding: nearest of a format's non-negative values, ties to the even code ---

struct Grid {
  std::vector<double> values;  // increasing, non-negative finite values (and inf's place)
  std::vector<std::uint32_t> codes;
  bool saturates;              // fp8: past the largest value stays there; IEEE: the last entry is inf
  std::uint32_t nan_code;
  std::uint32_t sign_bit;
};

Grid f16_grid() {
  Grid g{{}, {}, false, 0x7e00, 0x8000};
  for (std::uint32_t c = 0; c <= 0x7bff; ++c) {
    g.values.push_back(f16_value(static_cast<std::uint16_t>(c)));
    g.codes.push_back(c);
  }
  g.values.push_back(65536.0);  // where the next value would be: inf
  g.codes.push_back(0x7c00);
  return g;
}

Grid bf16_grid() {
  Grid g{{}, {}, false, 0x7fc0, 0x8000};
  for (std::uint32_t c = 0; c <= 0x7f7f; ++c) {
    g.values.push_back(bf16_value(static_cast<std::uint16_t>(c)));
    g.codes.push_back(c);
  }
  g.values.push_back(std::ldexp(1.0, 128));
  g.codes.push_back(0x7f80);
  return g;
}

Grid f8_grid() {
  Grid g{{}, {}, true, 0x7f, 0x80};
  for (std::uint32_t c = 0; c <= 0x7e; ++c) {
    g.values.push_back(f8_value(static_cast<std::uint8_t>(c)));
    g.codes.push_back(c);
  }
  return g;
}

// The code of x / scale rounded to the grid, decided with exact comparisons of x against
// value * scale (both exact in double: 24 + 4 bits) instead of dividing.
std::uint32_t reference_round(const Grid& g, double x, double scale = 1.0) {
  const std::uint32_t sign = std::signbit(x) ? g.sign_bit : 0;
  if (std::isnan(x)) return sign | g.nan_code;
  if (std::isinf(x)) return sign | (g.saturates ? g.nan_code : g.codes.back());
  const double a = std::fabs(x);
  const auto n = g.values.size();
  if (a >= g.values.back() * scale) return sign | g.codes.back();  // saturated, or inf
  // Largest i with values[i] * scale <= a.
  std::size_t lo = 0, hi = n - 1;
  while (hi - lo > 1) {
    std::size_t mid = (lo + hi) / 2;
    (g.values[mid] * scale <= a ? lo : hi) = mid;
  }
  const double twice = 2 * a;
  const double between = (g.values[lo] + g.values[lo + 1]) * scale;
  std::size_t pick = twice < between ? lo : twice > between ? lo + 1 : ((g.codes[lo] & 1) ? lo + 1 : lo);
  return sign | g.codes[pick];
}

// Inputs that probe every rounding boundary of a grid: each value, the midpoint to the next one
// and the floats just below and above it, with both signs, as floats.
std::vector<float> boundary_inputs(const Grid& g) {
  std::vector<float> out;
  for (std::size_t i = 0; i + 1 < g.values.size(); ++i) {
    const double mid = (g.values[i] + g.values[i + 1]) / 2;
    for (double v : {g.values[i], mid}) {
      const auto f = static_cast<float>(v);
      if (static_cast<double>(f) != v || std::isinf(f)) continue;  // only inputs floats hold exactly
      for (float x : {f, std::nextafter(f, -INFINITY), std::nextafter(f, INFINITY)}) {
        out.push_back(x);
        out.push_back(-x);
      }
    }
  }
  for (float x : {INFINITY, -INFINITY, NAN, -NAN, 0.0f, -0.0f, std::numeric_limits<float>::denorm_min(),
                  std::numeric_limits<float>::min(), std::numeric_limits<float>::max(), 1e-30f, 1e30f}) {
    out.push_back(x);
  }
  std::mt19937 rng(5);
  for (int i = 0; i < 200000; ++i) out.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(rng())));
  return out;
}

std::vector<std::uint16_t> to16(Format to, const std::vector<float>& in) {
  std::vector<std::uint16_t> out(in.size());
  layout::convert(Format::kF32, in.data(), to, out.data(), in.size());
  return out;
}

std::vector<std::uint16_t> all16() {
  std::vector<std::uint16_t> v(65536);
  for (std::uint32_t i = 0; i < 65536; ++i) v[i] = static_cast<std::uint16_t>(i);
  return v;
}

// The float whose value is `v`, or for NaN the quiet NaN whose payload is `bits`' (shifted).
std::uint32_t expected_f32_bits(double v, std::uint32_t sign, std::uint32_t nan_payload) {
  if (std::isnan(v)) return sign | 0x7f800000u | nan_payload;
  return std::bit_cast<std::uint32_t>(static_cast<float>(v));
}

TEST(Convert, F16ToF32IsExactForAllPatterns) {
  auto in = all16();
  std::vector<float> out(in.size());
  layout::convert(Format::kF16, in.data(), Format::kF32, out.data(), in.size());
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const double v = f16_value(static_cast<std::uint16_t>(b));
    ASSERT_EQ(std::bit_cast<std::uint32_t>(out[b]), expected_f32_bits(v, (b & 0x8000u) << 16, (b & 0x3ffu) << 13))
        << "f16 0x" << std::hex << b;
  }
}

TEST(Convert, Bf16ToF32IsExactForAllPatterns) {
  auto in = all16();
  std::vector<float> out(in.size());
  layout::convert(Format::kBF16, in.data(), Format::kF32, out.data(), in.size());
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const double v = bf16_value(static_cast<std::uint16_t>(b));
    ASSERT_EQ(std::bit_cast<std::uint32_t>(out[b]), expected_f32_bits(v, (b & 0x8000u) << 16, (b & 0x7fu) << 16))
        << "bf16 0x" << std::hex << b;
  }
}

void check_narrowing(Format to, const Grid& grid) {
  auto in = boundary_inputs(grid);
  auto out = to16(to, in);
  for (std::size_t i = 0; i < in.size(); ++i) {
    ASSERT_EQ(out[i], reference_round(grid, in[i])) << layout::format_name(to) << " of " << in[i] << " (0x" << std::hex
                                                    << std::bit_cast<std::uint32_t>(in[i]) << ")";
  }
}

TEST(Convert, F32ToF16RoundsToNearestEvenOverflowsToInf) {
  check_narrowing(Format::kF16, f16_grid());
  // Spot checks of the rules the header states.
  EXPECT_EQ(to16(Format::kF16, {65519.0f, 65520.0f, 1e9f, -INFINITY}),
            (std::vector<std::uint16_t>{0x7bff, 0x7c00, 0x7c00, 0xfc00}));
  EXPECT_EQ(to16(Format::kF16, {std::ldexp(1.0f, -25), std::ldexp(1.5f, -25), -std::ldexp(1.0f, -26)}),
            (std::vector<std::uint16_t>{0x0000, 0x0001, 0x8000}));  // a tie to even 0; sign kept
}

TEST(Convert, F32ToBf16RoundsToNearestEven) {
  check_narrowing(Format::kBF16, bf16_grid());
  EXPECT_EQ(to16(Format::kBF16, {1.0f + std::ldexp(1.0f, -8), 1.0f + 3 * std::ldexp(1.0f, -8)}),
            (std::vector<std::uint16_t>{0x3f80, 0x3f82}));  // ties to the even mantissa
}

TEST(Convert, F16AndBf16ConvertThroughTheExactValue) {
  auto in = all16();
  const Grid bf = bf16_grid();
  const Grid h = f16_grid();
  std::vector<std::uint16_t> out(in.size());
  layout::convert(Format::kF16, in.data(), Format::kBF16, out.data(), in.size());
  for (std::uint32_t b = 0; b < 65536; ++b) {
    ASSERT_EQ(out[b], reference_round(bf, f16_value(static_cast<std::uint16_t>(b)))) << "f16 0x" << std::hex << b;
  }
  layout::convert(Format::kBF16, in.data(), Format::kF16, out.data(), in.size());
  for (std::uint32_t b = 0; b < 65536; ++b) {
    ASSERT_EQ(out[b], reference_round(h, bf16_value(static_cast<std::uint16_t>(b)))) << "bf16 0x" << std::hex << b;
  }
}

TEST(Convert, IdentityCopiesAndFp8NeedsAScale) {
  auto in = all16();
  std::vector<std::uint16_t> out(in.size());
  layout::convert(Format::kF16, in.data(), Format::kF16, out.data(), in.size());
  EXPECT_EQ(out, in);
  EXPECT_THROW(layout::convert(Format::kF8E4M3, in.data(), Format::kF32, out.data(), 1), Error);
  EXPECT_THROW(layout::convert(Format::kF32, in.data(), Format::kF8E4M3, out.data(), 1), Error);
  EXPECT_EQ(layout::format_of(DType::kBF16), Format::kBF16);
  EXPECT_EQ(layout::format_of(DType::kI32), std::nullopt);
  EXPECT_EQ(layout::format_size(Format::kF8E4M3), 1u);
}

std::vector<std::uint8_t> all8() {
  std::vector<std::uint8_t> v(256);
  for (int i = 0; i < 256; ++i) v[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(i);
  return v;
}

TEST(Convert, Fp8DecodesExactlyToEveryTarget) {
  auto in = all8();
  std::vector<float> f32(256);
  std::vector<std::uint16_t> f16(256), bf16(256);
  layout::dequantize_fp8(in.data(), Format::kF32, f32.data(), 256, 1.0f);
  layout::dequantize_fp8(in.data(), Format::kF16, f16.data(), 256, 1.0f);
  layout::dequantize_fp8(in.data(), Format::kBF16, bf16.data(), 256, 1.0f);
  int nans = 0;
  for (int b = 0; b < 256; ++b) {
    const double v = f8_value(static_cast<std::uint8_t>(b));
    if (std::isnan(v)) {
      ++nans;
      EXPECT_TRUE(std::isnan(f32[b]) && std::signbit(f32[b]) == bool(b & 0x80)) << b;
      EXPECT_EQ(f16[b], (b & 0x80) ? 0xfe00 : 0x7e00) << b;
      EXPECT_EQ(bf16[b], (b & 0x80) ? 0xffc0 : 0x7fc0) << b;
      continue;
    }
    EXPECT_EQ(std::bit_cast<std::uint32_t>(f32[b]), std::bit_cast<std::uint32_t>(static_cast<float>(v))) << b;
    EXPECT_EQ(f16_value(f16[b]), v) << b;
    EXPECT_EQ(std::signbit(f16_value(f16[b])), std::signbit(v)) << b;  // -0 stays -0
    EXPECT_EQ(bf16_value(bf16[b]), v) << b;
    EXPECT_EQ(static_cast<double>(layout::f8e4m3_to_float(static_cast<std::uint8_t>(b))), v) << b;
  }
  EXPECT_EQ(nans, 2);  // 0x7f and 0xff only: E4M3FN has no infinities
  EXPECT_EQ(f32[0x7e], 448.0f);
  EXPECT_EQ(f32[0x01], std::ldexp(1.0f, -9));
}

TEST(Convert, Fp8DequantizesWithAScaleRoundingTheExactProductOnce) {
  auto in = all8();
  const Grid h = f16_grid();
  const Grid bf = bf16_grid();
  // The last two scales make 1.875 * scale land (28 bits) just above an f16 and a bf16 tie, by
  // less than float's precision: rounded to float first, the product would sit on the tie and
  // round down to the even neighbour.
  for (float scale : {0.1f, 3.7f, 1.0f / 448, 1e-3f, 7.5e-6f, 300.0f, 1e30f, std::ldexp(8952218.0f, -24),
                      std::ldexp(8982802.0f, -24)}) {
    std::vector<float> f32(256);
    std::vector<std::uint16_t> f16(256), bf16(256);
    layout::dequantize_fp8(in.data(), Format::kF32, f32.data(), 256, scale);
    layout::dequantize_fp8(in.data(), Format::kF16, f16.data(), 256, scale);
    layout::dequantize_fp8(in.data(), Format::kBF16, bf16.data(), 256, scale);
    for (int b = 0; b < 256; ++b) {
      const double product = f8_value(static_cast<std::uint8_t>(b)) * static_cast<double>(scale);  // exact
      if (std::isnan(product)) continue;
      EXPECT_EQ(f32[b], static_cast<float>(product)) << b << " x " << scale;
      EXPECT_EQ(f16[b], reference_round(h, product)) << b << " x " << scale;
      EXPECT_EQ(bf16[b], reference_round(bf, product)) << b << " x " << scale;
    }
  }
}

std::vector<std::uint8_t> quantize(const std::vector<float>& in, float scale) {
  std::vector<std::uint8_t> out(in.size());
  layout::quantize_fp8(Format::kF32, in.data(), out.data(), in.size(), scale);
  return out;
}

TEST(Convert, Fp8QuantizesWithNearestEvenSaturationAndNaN) {
  const Grid g = f8_grid();
  auto in = boundary_inputs(g);
  for (float x : {448.0f, 449.0f, 463.9f, 464.0f, 465.0f, 1e6f, std::ldexp(1.0f, -10), std::ldexp(1.0f, -11),
                  std::ldexp(1.5f, -10), std::ldexp(3.0f, -10), std::ldexp(5.0f, -10)}) {
    in.push_back(x);
    in.push_back(-x);
  }
  for (float scale : {1.0f, 0.5f, 1.0f / 3, 2.7f, 1e-4f, 6e4f}) {
    auto out = quantize(in, scale);
    for (std::size_t i = 0; i < in.size(); ++i) {
      ASSERT_EQ(out[i], reference_round(g, in[i], scale))
          << in[i] << " (0x" << std::hex << std::bit_cast<std::uint32_t>(in[i]) << ") / " << scale;
    }
  }
  // The rules as the header states them.
  EXPECT_EQ(quantize({448.0f, 1e30f, -1e30f, INFINITY, -INFINITY, NAN, -NAN}, 1.0f),
            (std::vector<std::uint8_t>{0x7e, 0x7e, 0xfe, 0x7f, 0xff, 0x7f, 0xff}));
  EXPECT_EQ(quantize({std::ldexp(1.0f, -10), std::ldexp(1.0f, -9) * 1.5f, -std::ldexp(1.0f, -12), -0.0f}, 1.0f),
            (std::vector<std::uint8_t>{0x00, 0x02, 0x80, 0x80}));  // ties to even: 0 and 2 x 2^-9
  EXPECT_EQ(quantize({1.0625f, 1.1875f}, 1.0f), (std::vector<std::uint8_t>{0x38, 0x3a}));  // 1 + 1/16 ties to 1
  EXPECT_EQ(layout::f8e4m3_from_double(240.0), 0x77);
  EXPECT_EQ(layout::f8e4m3_from_double(248.0), 0x78);  // 240 + 8: a tie that carries into 256
}

TEST(Convert, LongSixteenBitRunsQuantizeLikeShortOnes) {
  // Runs of 2^18 elements or more of f16 and bf16 go through a table of all 65,536 inputs: every
  // pattern, four times over, against the reference.
  const Grid g = f8_grid();
  std::vector<std::uint16_t> in(std::size_t{1} << 18);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<std::uint16_t>(i * 40503u);  // odd: all patterns
  std::vector<std::uint8_t> out(in.size());
  for (Format f : {Format::kF16, Format::kBF16}) {
    for (float scale : {1.0f, 0.37f, 1e-5f}) {
      layout::quantize_fp8(f, in.data(), out.data(), in.size(), scale);
      for (std::size_t i = 0; i < in.size(); ++i) {
        const double v = f == Format::kF16 ? f16_value(in[i]) : bf16_value(in[i]);
        ASSERT_EQ(out[i], reference_round(g, v, scale)) << layout::format_name(f) << " 0x" << std::hex << in[i];
      }
    }
  }
}

TEST(Convert, Fp8RoundTripsEveryCodeFromEveryFormat) {
  // Every finite fp8 value, written in f32, f16 and bf16 and scaled, quantizes back to its code.
  auto codes = all8();
  for (float scale : {1.0f, 0.25f, 0.013f}) {
    std::vector<float> f32(256);
    layout::dequantize_fp8(codes.data(), Format::kF32, f32.data(), 256, scale);
    std::vector<std::uint8_t> back(256);
    layout::quantize_fp8(Format::kF32, f32.data(), back.data(), 256, scale);
    for (int b = 0; b < 256; ++b) {
      if ((b & 0x7f) != 0x7f) {
        EXPECT_EQ(back[b], b) << "f32 scale " << scale;
      }
    }
  }
  for (Format f : {Format::kF16, Format::kBF16}) {
    std::vector<std::uint16_t> wide(256);
    layout::dequantize_fp8(codes.data(), f, wide.data(), 256, 1.0f);
    std::vector<std::uint8_t> back(256);
    layout::quantize_fp8(f, wide.data(), back.data(), 256, 1.0f);
    EXPECT_EQ(back, codes) << layout::format_name(f);  // NaN codes come back too: same sign
  }
}

TEST(Convert, PerTensorScaleIsFiniteAmaxOver448) {
  std::vector<float> x{1.0f, -896.0f, 3.0f, NAN, INFINITY, -INFINITY, 0.5f};
  EXPECT_EQ(layout::finite_amax(Format::kF32, x.data(), x.size()), 896.0f);
  std::vector<std::uint8_t> q(x.size());
  EXPECT_EQ(layout::quantize_fp8_per_tensor(Format::kF32, x.data(), q.data(), x.size()), 2.0f);
  EXPECT_EQ(q, (std::vector<std::uint8_t>{0x30, 0xfe, 0x3c, 0x7f, 0x7f, 0xff, 0x28}));  // 0.5, -448, 1.5, ...
  std::vector<float> zeros(8, 0.0f);
  EXPECT_EQ(layout::quantize_fp8_per_tensor(Format::kF32, zeros.data(), q.data(), 7), 1.0f);
  EXPECT_EQ(layout::fp8_scale(0.0f), 1.0f);
  EXPECT_EQ(layout::fp8_scale(std::numeric_limits<float>::denorm_min()), std::numeric_limits<float>::denorm_min());
  // amax from bf16 input: the element at amax quantizes to the largest code.
  std::vector<std::uint16_t> b{0x3f80, 0xc2c8, 0x4000};  // 1, -100, 2
  std::vector<std::uint8_t> qb(3);
  EXPECT_EQ(layout::quantize_fp8_per_tensor(Format::kBF16, b.data(), qb.data(), 3), 100.0f / 448);
  EXPECT_EQ(qb[1], 0xfe);
}

TEST(Convert, PerBlockScalesEachBlockAndDequantizesWithIt) {
  std::vector<float> x{1, 2, 3, 4, 100, -200, 50, 25, 1e-3f, 2e-3f};  // blocks of 4: amax 4, 200, 2e-3
  std::vector<std::uint8_t> q(x.size());
  auto scales = layout::quantize_fp8_per_block(Format::kF32, x.data(), q.data(), x.size(), 4);
  ASSERT_EQ(scales, (std::vector<float>{4.0f / 448, 200.0f / 448, 2e-3f / 448}));
  for (std::size_t b = 0; b < 3; ++b) {
    const std::size_t n = std::min<std::size_t>(4, x.size() - 4 * b);
    std::vector<std::uint8_t> expected(n);
    layout::quantize_fp8(Format::kF32, x.data() + 4 * b, expected.data(), n, scales[b]);
    EXPECT_EQ(std::vector<std::uint8_t>(q.begin() + static_cast<std::ptrdiff_t>(4 * b),
                                        q.begin() + static_cast<std::ptrdiff_t>(4 * b + n)),
              expected)
        << "block " << b;
  }
  EXPECT_EQ(q[3], 0x7e);  // each block's amax is its largest code
  EXPECT_EQ(q[5], 0xfe);
  std::vector<float> back(x.size());
  layout::dequantize_fp8_per_block(q.data(), Format::kF32, back.data(), x.size(), scales, 4);
  for (std::size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(back[i], static_cast<float>(static_cast<double>(layout::f8e4m3_to_float(q[i])) * scales[i / 4])) << i;
    EXPECT_NEAR(back[i], x[i], std::fabs(x[i]) / 16) << i;  // 3 mantissa bits: within half an ulp
  }
  // A block as large as a size can be is one block: counted as count + block - 1 it wrapped to
  // none, and nothing was written.
  for (std::size_t block : {SIZE_MAX, SIZE_MAX - x.size() + 2}) {
    auto one = layout::quantize_fp8_per_block(Format::kF32, x.data(), q.data(), x.size(), block);
    ASSERT_EQ(one, std::vector<float>{200.0f / 448}) << block;
    std::vector<float> whole(x.size(), -1.0f);
    layout::dequantize_fp8_per_block(q.data(), Format::kF32, whole.data(), x.size(), one, block);
    for (std::size_t i = 0; i < x.size(); ++i) {
      EXPECT_EQ(whole[i], static_cast<float>(static_cast<double>(layout::f8e4m3_to_float(q[i])) * one[0])) << i;
    }
  }
}

TEST(Convert, RefusesBadScalesAndBlocks) {
  std::vector<float> x(4, 1.0f);
  std::vector<std::uint8_t> q(4);
  for (float bad : {0.0f, -1.0f, INFINITY, NAN}) {
    EXPECT_THROW(layout::quantize_fp8(Format::kF32, x.data(), q.data(), 4, bad), Error) << bad;
    EXPECT_THROW(layout::dequantize_fp8(q.data(), Format::kF32, x.data(), 4, bad), Error) << bad;
  }
  EXPECT_THROW(layout::quantize_fp8_per_block(Format::kF32, x.data(), q.data(), 4, 0), Error);
  std::vector<float> one_scale{1.0f};
  EXPECT_THROW(layout::dequantize_fp8_per_block(q.data(), Format::kF32, x.data(), 4, one_scale, 2), Error);
  EXPECT_THROW(layout::quantize_fp8(Format::kF8E4M3, q.data(), q.data(), 4, 1.0f), Error);
  EXPECT_THROW(layout::dequantize_fp8(q.data(), Format::kF8E4M3, x.data(), 4, 1.0f), Error);
}

}  // namespace
