#include "common/host_identity.h"

#include <fstream>
#include <random>

namespace modelcast {

std::string host_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

std::uint64_t process_token() {
  static const std::uint64_t token = [] {
    std::random_device device;
    return (std::uint64_t{device()} << 32) ^ device();
  }();
  return token;
}

}  // namespace modelcast
