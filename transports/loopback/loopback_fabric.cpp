#include "transports/loopback/loopback_fabric.h"

#include <cstring>
#include <string>

#include "common/host_identity.h"
#include "modelcast/error.h"

namespace modelcast::transport::loopback {

Fabric& Fabric::get() {
  static Fabric fabric;
  return fabric;
}

void Fabric::forget(const void* region) {
  std::lock_guard lock(mutex);
  std::erase_if(exports, [region](const auto& entry) { return entry.second.region == region; });
}

std::vector<std::byte> pack_words(std::initializer_list<std::uint64_t> words) {
  std::vector<std::byte> bytes(8 * (words.size() + 1));
  std::uint64_t token = process_token();
  std::memcpy(bytes.data(), &token, 8);
  std::size_t at = 8;
  for (auto w : words) {
    std::memcpy(bytes.data() + at, &w, 8);
    at += 8;
  }
  return bytes;
}

std::vector<std::uint64_t> unpack_words(std::span<const std::byte> bytes, std::size_t count, const char* what) {
  if (bytes.size() != 8 * (count + 1)) {
    throw Error(ErrorCode::kTransport, std::string("malformed loopback ") + what + " (" +
                                           std::to_string(bytes.size()) + " bytes)");
  }
  std::uint64_t token = 0;
  std::memcpy(&token, bytes.data(), 8);
  if (token != process_token()) {
    throw Error(ErrorCode::kTransport, std::string("loopback ") + what + " from another process");
  }
  std::vector<std::uint64_t> words(count);
  std::memcpy(words.data(), bytes.data() + 8, 8 * count);
  return words;
}

}  // namespace modelcast::transport::loopback
