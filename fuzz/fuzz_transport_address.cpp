// libFuzzer target: the sealed UCX worker address a join carries (transports/ucx/address_seal.h),
// checked before UCX ever sees it. Only modelcast::Error may leave unseal_address and
// check_address_format; an address that passes must round-trip through seal_address.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "modelcast/error.h"
#include "transports/ucx/address_seal.h"

namespace transport = modelcast::transport;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::span<const std::byte> sealed(reinterpret_cast<const std::byte*>(data), size);
  // A stand-in for this process's own address: format version 1 (UCX 1.13's V2) in the header.
  static const std::vector<std::byte> own(64, std::byte{0x01});
  try {
    auto body = transport::unseal_address(sealed);
    transport::check_address_format(body, own);
    auto again = transport::seal_address(body.data(), body.size());
    if (again.size() != size || std::memcmp(again.data(), data, size) != 0) {
      std::fprintf(stderr, "fuzz_transport_address: an accepted address does not re-seal to itself\n");
      std::abort();
    }
  } catch (const modelcast::Error&) {
  }
  return 0;
}
