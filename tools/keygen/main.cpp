// modelcast-keygen: makes the key pair a producer signs versions with (and a consumer shows a
// producer that admits listed keys only). Writes FILE (secret, mode 0600) and FILE.pub.
#include <CLI/CLI.hpp>
#include <iostream>

#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>

#include "common/parse_command_line.h"
#include "common/shown_text.h"
#include "modelcast/error.h"
#include "modelcast/keys.h"
#include "modelcast/version.h"

namespace {

// A path as the library shows one (printable, so a newline in it cannot forge a line), unquoted.
std::string shown(const std::string& path) { return modelcast::printable_text(path, 4096, modelcast::Backslash::kKept); }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"modelcast-keygen: make a modelcast key pair (Ed25519; CurveZMQ and version signatures)"};
  app.set_version_flag("--version", "modelcast-keygen " MODELCAST_VERSION_STRING);
  std::string path;
  bool force = false;
  app.add_option("file", path, "key pair file to write; its public key goes to FILE.pub")->required();
  app.add_flag("--force", force, "overwrite existing files");
  if (auto status = modelcast::parse_command_line(app, argc, argv)) return *status;
  if (!force) {
    // Checked here, not left to save_key_pair(): only this tool knows its way to overwrite.
    for (const std::string& file : {path, path + ".pub"}) {
      // A path that cannot be looked up (too long, a file for a directory) is save_key_pair's
      // to report, naming why.
      std::error_code unknown;
      if (std::filesystem::exists(std::filesystem::symlink_status(file, unknown))) {
        std::fprintf(stderr, "modelcast-keygen: %s exists already; --force overwrites it\n", shown(file).c_str());
        return 1;
      }
    }
  }
  try {
    auto keys = modelcast::generate_key_pair();
    modelcast::save_key_pair(keys, path, force);
    std::printf("%s\n", keys.public_key.c_str());
    // Read back as a producer or consumer would: a pair written where others may replace it (a
    // directory every user can write, without the sticky bit) was written without a word, and
    // every program then refused it.
    try {
      modelcast::load_key_pair(path);
    } catch (const modelcast::Error& e) {
      std::fprintf(stderr, "modelcast-keygen: wrote %s and %s.pub, but modelcast will refuse them: %s\n",
                   shown(path).c_str(), shown(path).c_str(), e.what());
      return 1;
    }
    std::fprintf(stderr, "wrote %s (keep it secret) and %s.pub (give it to peers)\n", shown(path).c_str(),
                 shown(path).c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "modelcast-keygen: %s\n", e.what());
    return 1;
  }
}
