// A fresh directory only this user can write (mkdtemp: mode 0700), removed with everything in
// it: where tests put plaintext ipc:// endpoints, which the producer and consumer refuse in a
// directory others can write (core/wire/socket_directory.h).
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <stdexcept>
#include <string>

namespace testing_support {

class PrivateDirectory {
 public:
  // Under /tmp, with a short name: an ipc:// path holds at most 107 bytes.
  explicit PrivateDirectory(const std::string& prefix = "mc") {
    std::string pattern = "/tmp/" + prefix + "-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp " + pattern);
    path_ = pattern;
  }
  ~PrivateDirectory() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  PrivateDirectory(const PrivateDirectory&) = delete;
  PrivateDirectory& operator=(const PrivateDirectory&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  std::string ipc_endpoint(const std::string& name = "producer.sock") const { return "ipc://" + file(name); }

 private:
  std::string path_;
};

}  // namespace testing_support
