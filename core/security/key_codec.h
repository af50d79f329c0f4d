// Key material in binary form, and the checks shared by every place that takes a key as text.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "modelcast/keys.h"

namespace modelcast::security {

using PublicKey = std::array<std::uint8_t, 32>;  // Ed25519 public key
using SecretKey = std::array<std::uint8_t, 64>;  // libsodium's Ed25519 secret key (seed + public)
using CurveKey = std::array<std::uint8_t, 32>;   // Curve25519 (CurveZMQ) key

// Z85 text of 32 bytes; throws Error(kInvalidArgument) naming `what` if it is not exactly that.
PublicKey decode_public_key(const std::string& z85, const std::string& what);
std::string encode_key(const std::array<std::uint8_t, 32>& key);

// The full secret key of a pair; throws Error(kInvalidArgument) if the secret does not belong
// to the public key.
SecretKey decode_secret_key(const KeyPair& keys, const std::string& what);

// The CurveZMQ form of an Ed25519 key (libsodium's birational map), as ZeroMQ's options take it.
// Throws Error(kInvalidArgument), `what` first, if `key` is no Ed25519 point; the key is not
// quoted (it may be a secret key given by mistake).
CurveKey curve_public(const PublicKey& key, const std::string& what);
CurveKey curve_secret(const SecretKey& key);

// Starts libsodium once; throws Error(kResource) if it cannot.
void ensure_sodium();

}  // namespace modelcast::security
