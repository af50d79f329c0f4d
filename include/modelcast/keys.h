// Key pairs that identify a producer (and, where a producer keeps an allow-list, a consumer).
//
// One Ed25519 key pair per party, written as Z85 text (40 characters per key). The producer
// signs every version's manifest with it, and the same key, converted to Curve25519,
// authenticates and encrypts the ZeroMQ control plane (CurveZMQ). Consumers pin the
// producer's public key; a producer may admit only consumers whose public keys it lists.
#pragma once

#include "modelcast/export.h"

#include <string>

namespace modelcast {

struct KeyPair {
  std::string public_key;  // Z85, shareable
  std::string secret_key;  // Z85 of the 32-byte seed; keep it secret
  bool empty() const noexcept { return public_key.empty() && secret_key.empty(); }
};

// A fresh random key pair (libsodium). Throws Error(kResource) if libsodium cannot start.
MODELCAST_API KeyPair generate_key_pair();

// Writes `keys` to `path` (secret and public key, mode 0600) and the public key alone to
// `path` + ".pub". Refuses to overwrite unless `overwrite`. Throws Error(kInvalidArgument) or
// Error(kResource) naming the file.
MODELCAST_API void save_key_pair(const KeyPair& keys, const std::string& path, bool overwrite = false);

// Reads a key pair file written by save_key_pair (or modelcast-keygen). Throws
// Error(kInvalidArgument) naming the file, the line and the key for anything malformed,
// including a secret key that does not belong to its public key, and for a file that users other
// than its owner may read or write (mode & 077).
MODELCAST_API KeyPair load_key_pair(const std::string& path);

// Reads the public key from a key file or a ".pub" file. Throws Error(kInvalidArgument) naming
// the file for anything malformed, for a file its group or other users may write (it says
// whom to trust: they could put their own key there), and for a key pair file they may read.
MODELCAST_API std::string load_public_key(const std::string& path);

// Throws Error(kInvalidArgument), `what` first, unless `key` is a public key as generate_key_pair
// makes one (40 Z85 characters of an Ed25519 point). For options given inline; never quotes a
// key that may be a secret one.
MODELCAST_API void check_public_key(const std::string& key, const std::string& what);

}  // namespace modelcast
