// libFuzzer target: key files (core/security/key_file.cpp: TOML through toml++, Z85 keys,
// Ed25519 pair check). The input is written to a file and read back as a key pair and as a
// public key; only modelcast::Error may leave either, and a pair that loads must save and load
// back unchanged.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "modelcast/error.h"
#include "modelcast/keys.h"

namespace {

const std::string& scratch() {
  static const std::string path = "/tmp/modelcast-fuzz-key-" + std::to_string(getpid());
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  {
    std::ofstream out(scratch(), std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {
    (void)modelcast::load_public_key(scratch());
  } catch (const modelcast::Error&) {
  }
  try {
    auto keys = modelcast::load_key_pair(scratch());
    std::string copy = scratch() + ".copy";
    modelcast::save_key_pair(keys, copy, true);
    auto again = modelcast::load_key_pair(copy);
    if (again.public_key != keys.public_key || again.secret_key != keys.secret_key) {
      std::fprintf(stderr, "fuzz_key_file: a key pair did not survive save and load\n");
      std::abort();
    }
  } catch (const modelcast::Error&) {
  }
  return 0;
}
