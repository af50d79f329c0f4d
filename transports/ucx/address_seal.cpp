#include "transports/ucx/address_seal.h"

#include <cstdint>
#include <cstring>
#include <string>

#include "common/digest.h"
#include "modelcast/error.h"

namespace modelcast::transport {
namespace {
constexpr std::uint32_t kAddressMagic = 0x55435841;  // "UCXA"
}  // namespace

std::vector<std::byte> seal(std::uint32_t magic, std::span<const std::byte> body) {
  std::vector<std::byte> sealed(kAddressHeader + body.size());
  auto length32 = static_cast<std::uint32_t>(body.size());
  std::uint64_t digest = digest_bytes(body.data(), body.size());
  std::memcpy(sealed.data(), &magic, 4);
  std::memcpy(sealed.data() + 4, &length32, 4);
  std::memcpy(sealed.data() + 8, &digest, 8);
  if (!body.empty()) std::memcpy(sealed.data() + kAddressHeader, body.data(), body.size());
  return sealed;
}

std::span<const std::byte> unseal(std::uint32_t magic, const char* what, std::span<const std::byte> sealed) {
  std::uint32_t got_magic = 0, length = 0;
  std::uint64_t digest = 0;
  if (sealed.size() >= kAddressHeader) {
    std::memcpy(&got_magic, sealed.data(), 4);
    std::memcpy(&length, sealed.data() + 4, 4);
    std::memcpy(&digest, sealed.data() + 8, 8);
  }
  if (sealed.size() < kAddressHeader || got_magic != magic || length != sealed.size() - kAddressHeader) {
    throw Error(ErrorCode::kTransport, std::string("malformed ") + what + " (" + std::to_string(sealed.size()) + " bytes)");
  }
  auto body = sealed.subspan(kAddressHeader);
  if (digest_bytes(body.data(), body.size()) != digest) {
    throw Error(ErrorCode::kTransport, std::string("corrupt ") + what + " (checksum mismatch)");
  }
  return body;
}

std::vector<std::byte> seal_address(const std::byte* ucx_address, std::size_t length) {
  return seal(kAddressMagic, {ucx_address, length});
}

std::span<const std::byte> unseal_address(std::span<const std::byte> sealed) {
  return unseal(kAddressMagic, "UCX worker address", sealed);
}

}  // namespace modelcast::transport
