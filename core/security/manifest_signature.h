// Signed versions: the producer signs each manifest (which carries every tensor's and block's
// digest), so a consumer that pins the producer's public key installs only manifests that
// producer made, whatever rogue producers sit in between, and bytes that match their digests.
// The digests are fast non-cryptographic hashes (XXH3-64; on the device an invertible
// multiply-mix), so they catch corruption and wrong blocks, not a forger who sees the bytes and
// can choose some of them: README "What keys do not cover".
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "core/model/manifest.h"
#include "core/security/key_codec.h"

namespace modelcast::security {

class ManifestSigner {
 public:
  // Throws Error(kInvalidArgument) if the pair does not match.
  explicit ManifestSigner(const KeyPair& keys);
  ~ManifestSigner();
  ManifestSigner(const ManifestSigner&) = delete;
  ManifestSigner& operator=(const ManifestSigner&) = delete;

  // Ed25519 signature (64 bytes) of protocol::manifest_signing_bytes(manifest).
  std::vector<std::byte> sign(const Manifest& manifest) const;
  const SecretKey& secret() const { return secret_; }
  const PublicKey& public_key() const { return public_; }

 private:
  SecretKey secret_{};
  PublicKey public_{};
};

// True if `signature` is `key`'s signature of this manifest, digests included.
bool verify_manifest(const Manifest& manifest, std::span<const std::byte> signature, const PublicKey& key);

}  // namespace modelcast::security
