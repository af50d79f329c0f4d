// The element arithmetic of dtype conversions, one definition for every place that converts: a
// host consumer (core/layout/convert.cpp), the simulated device and the CUDA kernels
// (device/convert_kernel.cu), so that a version converted on a device is bit for bit the one a
// host consumer makes. The rules (rounding, NaN, overflow, fp8 saturation) are stated in
// core/layout/convert.h; the tests there check these functions against independent references.
//
// Integer arithmetic on the bit patterns throughout, except two IEEE operations that are
// correctly rounded on both sides (a double division, a float division): no library call and no
// floating-point mode assumed, so host and device cannot disagree. Hand-written because no
// packaged library has fp8, and Eigen's half types are host code.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define MODELCAST_ELEMENT_HD __host__ __device__ __forceinline__
#else
#define MODELCAST_ELEMENT_HD inline
#endif

namespace modelcast::element {

MODELCAST_ELEMENT_HD std::uint32_t bits_of(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
#endif
}

MODELCAST_ELEMENT_HD float float_of(std::uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(b);
#else
  float f;
  std::memcpy(&f, &b, 4);
  return f;
#endif
}

MODELCAST_ELEMENT_HD std::uint64_t bits_of(double d) {
#if defined(__CUDA_ARCH__)
  return static_cast<std::uint64_t>(__double_as_longlong(d));
#else
  std::uint64_t b;
  std::memcpy(&b, &d, 8);
  return b;
#endif
}

MODELCAST_ELEMENT_HD double double_of(std::uint64_t b) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(b));
#else
  double d;
  std::memcpy(&d, &b, 8);
  return d;
#endif
}

// Exact: every f16 is a float (NaN payloads kept, shifted into the float's mantissa). Branches
// only on the exponent's rare values (F. Giesen's method, which Eigen's half uses): a subnormal
// is rebuilt by one float subtraction, exact in every IEEE mode without flush-to-zero.
MODELCAST_ELEMENT_HD float f16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t bits = static_cast<std::uint32_t>(h & 0x7fffu) << 13;  // exponent and mantissa
  const std::uint32_t exponent = bits & (0x7c00u << 13);
  bits += (127u - 15u) << 23;                                          // rebias
  if (exponent == (0x7c00u << 13)) {
    bits += (128u - 16u) << 23;                                        // inf, NaN
  } else if (exponent == 0) {
    bits += 1u << 23;                                                  // subnormal or zero:
    bits = bits_of(float_of(bits) - float_of(113u << 23));             // value = that - 2^-14
  }
  return float_of(bits | sign);
}

// Exact: a bf16 is the upper half of a float.
MODELCAST_ELEMENT_HD float bf16_to_f32(std::uint16_t b) { return float_of(static_cast<std::uint32_t>(b) << 16); }

// Nearest, ties to even; overflow to +-inf; gradual underflow; NaN to the quiet NaN, sign kept.
MODELCAST_ELEMENT_HD std::uint16_t f32_to_f16(float value) {
  std::uint32_t f = bits_of(value);
  const auto sign = static_cast<std::uint16_t>((f >> 16) & 0x8000u);
  f &= 0x7fffffffu;
  if (f > 0x7f800000u) return sign | 0x7e00u;                          // NaN
  if (f >= ((127u + 16u) << 23)) return sign | 0x7c00u;                // >= 65536 (and inf): inf
  const std::uint32_t e = f >> 23;
  std::uint32_t m = (f & 0x7fffffu) | 0x800000u;  // the value is m * 2^(e - 150)
  if (e >= 113) {
    // Normal in f16: drop 13 bits, rounding to nearest even without a branch (add half an ulp
    // less one, plus the kept lowest bit); a carry into the exponent (and up to inf at 65520)
    // is the right result.
    return static_cast<std::uint16_t>(sign | ((f - (112u << 23) + 0xfffu + ((f >> 13) & 1u)) >> 13));
  }
  if (e < 102) return sign;  // below 2^-25, half the smallest subnormal: +-0
  // Subnormal in f16, in units of 2^-24: m * 2^(e - 126), rounded.
  const std::uint32_t shift = 126 - e;  // 14 .. 24
  std::uint32_t q = m >> shift;
  const std::uint32_t rest = m & ((1u << shift) - 1u);
  const std::uint32_t half = 1u << (shift - 1);
  if (rest > half || (rest == half && (q & 1u))) ++q;  // q = 0x400 is the smallest normal: right
  return static_cast<std::uint16_t>(sign | q);
}

// Nearest, ties to even; overflow to +-inf; NaN to the quiet NaN, sign kept.
MODELCAST_ELEMENT_HD std::uint16_t f32_to_bf16(float value) {
  const std::uint32_t f = bits_of(value);
  if ((f & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>(((f >> 16) & 0x8000u) | 0x7fc0u);
  return static_cast<std::uint16_t>((f + 0x7fffu + ((f >> 16) & 1u)) >> 16);
}

// 2^k for |k| < 1023, from its bits.
MODELCAST_ELEMENT_HD double pow2(int k) { return double_of(static_cast<std::uint64_t>(1023 + k) << 52); }

// fp8 e4m3 (E4M3FN) code of `value` rounded once, ties to even; saturating at +-448; inf and NaN
// to NaN (sign kept).
MODELCAST_ELEMENT_HD std::uint8_t f8e4m3_from_double(double value) {
  const std::uint64_t bits = bits_of(value);
  const auto sign = static_cast<std::uint8_t>((bits >> 63) << 7);
  const std::uint64_t magnitude_bits = bits & 0x7fffffffffffffffull;
  if (magnitude_bits >= 0x7ff0000000000000ull) return sign | 0x7f;  // inf, NaN
  const double magnitude = double_of(magnitude_bits);
  if (magnitude >= 448.0) return sign | 0x7e;
  // e: the binade of the value, or that of the smallest normal for subnormals (whose spacing,
  // 2^-9, continues the first binade's); n: the value in units of the binade's spacing 2^(e-3).
  const int binade = static_cast<int>((bits >> 52) & 0x7ff) - 1023;
  const int e = binade > -6 ? binade : -6;
  const double scaled = magnitude * pow2(3 - e);  // exact: a power of two, in [0, 16]
  auto n = static_cast<std::uint32_t>(scaled);
  const double fraction = scaled - n;
  // Branch-free: the comparisons come out at random on real data.
  n += static_cast<std::uint32_t>(fraction > 0.5) | (static_cast<std::uint32_t>(fraction == 0.5) & n & 1u);
  // Codes increase with the value, so n == 16 carries into the next exponent by itself, and for
  // e == -6 the code is n whether it is subnormal (n < 8) or not.
  return static_cast<std::uint8_t>(sign | static_cast<std::uint32_t>(((e + 7) << 3) + static_cast<int>(n) - 8));
}

// x / s in double is the exact quotient rounded once to 53 bits, and no 24-bit x over a 24-bit s
// lies within 2^-53 relative of an fp8 tie without being on it, so rounding that double to fp8
// rounds the exact quotient.
MODELCAST_ELEMENT_HD std::uint8_t f8e4m3_quantize(float x, float scale) {
  return f8e4m3_from_double(static_cast<double>(x) / static_cast<double>(scale));
}

// |x| when it is finite, else 0: what an amax over the finite elements takes. (NaN fails the
// comparison; |x| is never -0, so its bits order as the magnitudes do, for the kernel's atomicMax.)
MODELCAST_ELEMENT_HD float finite_magnitude(float x) {
#if defined(__CUDA_ARCH__)
  const float a = fabsf(x);
#else
  const float a = std::fabs(x);
#endif
  return a <= 3.40282347e38f ? a : 0.0f;
}

// The scale of a per-tensor or per-block fp8 quantization from its finite amax: amax / 448, at
// least the smallest positive float; 1 when the amax is 0 (zeros need no scale).
MODELCAST_ELEMENT_HD float fp8_scale(float amax) {
  if (!(amax > 0.0f) || bits_of(amax) >= 0x7f800000u) return 1.0f;
  const float scale = amax / 448.0f;
  return scale > 0.0f ? scale : float_of(1u);  // 1u: the smallest positive (subnormal) float
}

}  // namespace modelcast::element
