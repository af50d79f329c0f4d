// From a CurveZMQ (Curve25519) public key back to the Ed25519 public keys it may come from, so
// that a key the producer refused can be named in the form its owner has in the .pub file.
#pragma once

#include <array>
#include <optional>

#include "core/security/key_codec.h"

namespace modelcast::security {

// The Ed25519 keys whose CurveZMQ form is `curve`: the map Ed25519 -> Curve25519 keeps the
// point's y only (u = (1 + y) / (1 - y)), so y = (u - 1) / (u + 1) comes back with either sign
// of x: one of the two is the key. None for the one u that no y maps to.
std::optional<std::array<PublicKey, 2>> ed25519_candidates(const CurveKey& curve);

// How a refused key is named in the log: the .pub forms it may have, and the CurveZMQ form
// ZeroMQ reported (`curve_z85`, Z85 text; returned as it is if it is not a key).
std::string describe_curve_key(const std::string& curve_z85);

}  // namespace modelcast::security
