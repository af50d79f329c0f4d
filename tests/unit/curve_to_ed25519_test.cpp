// A refused key is logged in the form its owner has in the .pub file: the CurveZMQ form ZeroMQ
// reports maps back to two Ed25519 keys, one of which is the key.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/security/curve_to_ed25519.h"
#include "core/security/key_codec.h"
#include "modelcast/keys.h"

namespace modelcast::security {
namespace {

TEST(CurveToEd25519, EveryKeyIsOneOfTheTwoKeysItsCurveFormMapsBackTo) {
  for (int i = 0; i < 500; ++i) {
    const auto pair = generate_key_pair();
    const auto key = decode_public_key(pair.public_key, "key");
    const auto candidates = ed25519_candidates(curve_public(key, "key"));
    ASSERT_TRUE(candidates.has_value()) << pair.public_key;
    EXPECT_TRUE((*candidates)[0] == key || (*candidates)[1] == key) << pair.public_key;
    EXPECT_NE((*candidates)[0], (*candidates)[1]);
    // Both are keys whose CurveZMQ form is the one reported.
    for (const auto& candidate : *candidates) EXPECT_EQ(curve_public(candidate, "candidate"), curve_public(key, "key"));
  }
}

TEST(CurveToEd25519, TheLogNamesThePubFormAndTheCurveForm) {
  const auto pair = generate_key_pair();
  const auto curve = encode_key(curve_public(decode_public_key(pair.public_key, "key"), "key"));
  const auto text = describe_curve_key(curve);
  EXPECT_NE(text.find(pair.public_key), std::string::npos) << text;
  EXPECT_NE(text.find("CurveZMQ form " + curve), std::string::npos) << text;
  // Not a key: said as it came.
  EXPECT_EQ(describe_curve_key("(not CURVE)"), "(not CURVE)");
}

TEST(CurveToEd25519, TheOneCurveValueNoKeyMapsToHasNoCandidates) {
  CurveKey p_minus_1{};  // 2^255 - 20, little-endian
  std::fill(p_minus_1.begin(), p_minus_1.end(), 0xff);
  p_minus_1[0] = 0xec;
  p_minus_1[31] = 0x7f;
  EXPECT_FALSE(ed25519_candidates(p_minus_1).has_value());
  CurveKey zero{};  // u = 0 maps back to y = -1, a point of the curve
  EXPECT_TRUE(ed25519_candidates(zero).has_value());
}

}  // namespace
}  // namespace modelcast::security
