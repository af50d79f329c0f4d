#include "core/security/key_codec.h"

#include <sodium.h>
#include <zmq.h>

#include <cstring>
#include <string_view>

#include "modelcast/error.h"

namespace modelcast::security {

void ensure_sodium() {
  static const bool ready = sodium_init() >= 0;
  if (!ready) throw Error(ErrorCode::kResource, "libsodium could not be initialised");
}

namespace {

// 32 bytes from 40 Z85 characters. What was given is never quoted: a secret key pasted where a
// public one goes, with a character more or less (a newline), is still most of a secret, and
// error messages end up in logs.
std::array<std::uint8_t, 32> decode_z85(const std::string& z85, const std::string& what) {
  std::array<std::uint8_t, 32> key{};
  // A NUL inside would end the text zmq_z85_decode reads (it takes a C string): 35 characters and a
  // NUL decode to another key with zeros at its end, which no comparison of the text would see.
  const bool has_nul = z85.find('\0') != std::string::npos;
  if (z85.size() != 40 || has_nul || zmq_z85_decode(key.data(), z85.c_str()) == nullptr) {
    const std::string got = z85.size() == 40 ? "40 characters, not all of them Z85"
                                             : std::to_string(z85.size()) + " characters";
    // Z85 has '/' and '.' too, but no key is a path of another length: a file given for a key.
    const auto ends_with = [&](std::string_view tail) {
      return z85.size() >= tail.size() && z85.compare(z85.size() - tail.size(), tail.size(), tail) == 0;
    };
    const bool path_like = z85.size() != 40 && (z85.rfind('/', 0) == 0 || ends_with(".pub") || ends_with(".key"));
    throw Error(ErrorCode::kInvalidArgument,
                what + " is not a key: expected 40 Z85 characters, got " + got + " (not shown: it may be a secret key)" +
                    (path_like ? "; it looks like a key file's path: give the file where a key file is asked for "
                                 "(producer_key_file), or read its key with load_public_key (Python: "
                                 "modelcast.load_public_key(path))"
                               : ""));
  }
  return key;
}

}  // namespace

PublicKey decode_public_key(const std::string& z85, const std::string& what) { return decode_z85(z85, what); }

std::string encode_key(const std::array<std::uint8_t, 32>& key) {
  char text[41] = {};
  zmq_z85_encode(text, key.data(), key.size());
  return text;
}

SecretKey decode_secret_key(const KeyPair& keys, const std::string& what) {
  ensure_sodium();
  auto seed = decode_z85(keys.secret_key, "the secret key of " + what);
  auto expected = decode_public_key(keys.public_key, "the public key of " + what);
  PublicKey derived{};
  SecretKey secret{};
  crypto_sign_seed_keypair(derived.data(), secret.data(), seed.data());
  sodium_memzero(seed.data(), seed.size());
  if (derived != expected) {
    throw Error(ErrorCode::kInvalidArgument, what + ": the secret key does not belong to the public key");
  }
  return secret;
}

CurveKey curve_public(const PublicKey& key, const std::string& what) {
  ensure_sodium();
  CurveKey out{};
  if (crypto_sign_ed25519_pk_to_curve25519(out.data(), key.data()) != 0) {
    // Not quoted: the likeliest such key is a secret key given where the public one belongs.
    throw Error(ErrorCode::kInvalidArgument, what + " is not an Ed25519 public key (not shown: is it a secret key? "
                                                    "Give the 'public' value of the key file)");
  }
  return out;
}

CurveKey curve_secret(const SecretKey& key) {
  ensure_sodium();
  CurveKey out{};
  crypto_sign_ed25519_sk_to_curve25519(out.data(), key.data());
  return out;
}

}  // namespace modelcast::security
