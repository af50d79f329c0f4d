#include "core/security/curve_to_ed25519.h"

#include <zmq.h>

#include <cstdint>

namespace modelcast::security {
namespace {

// Arithmetic modulo p = 2^255 - 19, only what one division needs, on four 64-bit limbs (least
// significant first). Written here rather than taken from GMP or OpenSSL because it serves one
// log line, and neither library is otherwise a dependency of libmodelcast; libsodium has the
// map the other way only. Not constant-time: it handles public keys.
using Fe = std::array<std::uint64_t, 4>;
__extension__ typedef unsigned __int128 u128;  // a GCC and Clang type: -pedantic asks for the marker

constexpr Fe kP = {0xffffffffffffffedull, 0xffffffffffffffffull, 0xffffffffffffffffull, 0x7fffffffffffffffull};

bool at_least(const Fe& a, const Fe& b) {
  for (int i = 3; i >= 0; --i) {
    if (a[i] != b[i]) return a[i] > b[i];
  }
  return true;
}

Fe minus(const Fe& a, const Fe& b) {  // a - b for a >= b
  Fe r{};
  std::uint64_t borrow = 0;
  for (int i = 0; i < 4; ++i) {
    const u128 d = u128{a[i]} - b[i] - borrow;
    r[i] = static_cast<std::uint64_t>(d);
    borrow = (d >> 64) ? 1 : 0;
  }
  return r;
}

Fe canonical(Fe a) {  // < p, from any value below 2^256 (at most 2p + 37 here)
  while (at_least(a, kP)) a = minus(a, kP);
  return a;
}

// (a * b) mod p, a and b below 2^256, result below 2^256: 2^256 = 38 (mod p) folds the high half.
Fe times(const Fe& a, const Fe& b) {
  std::array<std::uint64_t, 8> t{};
  for (int i = 0; i < 4; ++i) {
    std::uint64_t carry = 0;
    for (int j = 0; j < 4; ++j) {
      const u128 v = u128{a[i]} * b[j] + t[i + j] + carry;
      t[i + j] = static_cast<std::uint64_t>(v);
      carry = static_cast<std::uint64_t>(v >> 64);
    }
    t[i + 4] = carry;
  }
  Fe r{};
  std::uint64_t carry = 0;
  for (int i = 0; i < 4; ++i) {
    const u128 v = u128{t[i + 4]} * 38 + t[i] + carry;
    r[i] = static_cast<std::uint64_t>(v);
    carry = static_cast<std::uint64_t>(v >> 64);
  }
  // carry * 2^256 = carry * 38; once more for the (at most one) carry that can follow.
  while (carry != 0) {
    u128 v = u128{carry} * 38;
    carry = 0;
    for (int i = 0; i < 4 && v != 0; ++i) {
      v += r[i];
      r[i] = static_cast<std::uint64_t>(v);
      v >>= 64;
    }
    carry = static_cast<std::uint64_t>(v);
  }
  return r;
}

Fe inverse(const Fe& a) {  // a^(p - 2), by Fermat
  const Fe e = minus(kP, {2, 0, 0, 0});
  Fe r = {1, 0, 0, 0};
  for (int bit = 254; bit >= 0; --bit) {
    r = times(r, r);
    if ((e[bit / 64] >> (bit % 64)) & 1) r = times(r, a);
  }
  return canonical(r);
}

Fe from_bytes(const CurveKey& k) {
  Fe r{};
  for (int i = 0; i < 32; ++i) r[i / 8] |= std::uint64_t{k[i]} << (8 * (i % 8));
  r[3] &= 0x7fffffffffffffffull;  // the top bit is no part of u
  return canonical(r);
}

PublicKey to_bytes(const Fe& a) {
  PublicKey k{};
  for (int i = 0; i < 32; ++i) k[i] = static_cast<std::uint8_t>(a[i / 8] >> (8 * (i % 8)));
  return k;
}

}  // namespace

std::optional<std::array<PublicKey, 2>> ed25519_candidates(const CurveKey& curve) {
  const Fe u = from_bytes(curve);
  Fe u_plus_1 = u;  // u < p < 2^255: no carry out of the top limb
  for (int i = 0; i < 4 && ++u_plus_1[i] == 0; ++i) {
  }
  u_plus_1 = canonical(u_plus_1);
  if (u_plus_1 == Fe{}) return std::nullopt;  // u = p - 1: no y maps to it
  const Fe u_minus_1 = u == Fe{} ? minus(kP, {1, 0, 0, 0}) : minus(u, {1, 0, 0, 0});
  const PublicKey y = to_bytes(canonical(times(u_minus_1, inverse(u_plus_1))));
  PublicKey negative = y;
  negative[31] |= 0x80;  // the sign of x, in the encoding's top bit
  return std::array<PublicKey, 2>{y, negative};
}

std::string describe_curve_key(const std::string& curve_z85) {
  CurveKey curve{};
  if (curve_z85.size() != 40 || zmq_z85_decode(curve.data(), curve_z85.c_str()) == nullptr) return curve_z85;
  auto keys = ed25519_candidates(curve);
  if (!keys) return curve_z85 + " (CurveZMQ form)";
  return encode_key((*keys)[0]) + " or " + encode_key((*keys)[1]) + " (as in a .pub file; CurveZMQ form " +
         curve_z85 + ")";
}

}  // namespace modelcast::security
