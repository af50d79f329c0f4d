#include "core/security/manifest_signature.h"

#include <sodium.h>

#include <algorithm>

#include "core/wire/protocol.h"

namespace modelcast::security {

ManifestSigner::ManifestSigner(const KeyPair& keys)
    : secret_(decode_secret_key(keys, "producer key")), public_(decode_public_key(keys.public_key, "producer key")) {}

ManifestSigner::~ManifestSigner() { sodium_memzero(secret_.data(), secret_.size()); }

std::vector<std::byte> ManifestSigner::sign(const Manifest& manifest) const {
  auto message = protocol::manifest_signing_bytes(manifest);
  std::vector<std::byte> signature(crypto_sign_BYTES);
  crypto_sign_detached(reinterpret_cast<unsigned char*>(signature.data()), nullptr,
                       reinterpret_cast<const unsigned char*>(message.data()), message.size(), secret_.data());
  return signature;
}

bool verify_manifest(const Manifest& manifest, std::span<const std::byte> signature, const PublicKey& key) {
  if (signature.size() != crypto_sign_BYTES) return false;
  ensure_sodium();
  auto message = protocol::manifest_signing_bytes(manifest);
  return crypto_sign_verify_detached(reinterpret_cast<const unsigned char*>(signature.data()),
                                     reinterpret_cast<const unsigned char*>(message.data()), message.size(),
                                     key.data()) == 0;
}

}  // namespace modelcast::security
