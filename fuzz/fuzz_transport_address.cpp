// libFuzzer target: the sealed UCX worker address a join carries (transports/ucx/address_seal.h),
// read and checked (transports/ucx/address_layout.h) before UCX ever sees it. Only
// modelcast::Error may leave unseal_address, read_address_layout and check_peer_address, and no
// read may leave the buffer (the sanitizers see to that); an address that passes must re-seal
// to itself.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "modelcast/error.h"
#include "transports/ucx/address_layout.h"
#include "transports/ucx/address_seal.h"

namespace transport = modelcast::transport;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::span<const std::byte> sealed(reinterpret_cast<const std::byte*>(data), size);
  // A stand-in for this process's own layout: format v1 (UCX 1.13's default), two transports.
  static const transport::UcxAddressLayout own{0, {{0x1234, 8, 8}, {0xbeef, 0, 16}}};
  try {
    auto body = transport::unseal_address(sealed);
    transport::check_peer_address(body, own, transport::ucx_quirks_for({1, 13, 1}));
    auto again = transport::seal_address(body.data(), body.size());
    if (again.size() != size || std::memcmp(again.data(), data, size) != 0) {
      std::fprintf(stderr, "fuzz_transport_address: an accepted address does not re-seal to itself\n");
      std::abort();
    }
  } catch (const modelcast::Error&) {
  }
  return 0;
}
