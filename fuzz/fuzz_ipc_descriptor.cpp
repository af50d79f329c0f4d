// libFuzzer target: the cuda_ipc transport's region descriptor (transports/cuda_ipc/
// ipc_descriptor.h), the bytes of a FetchReply's region field that a consumer on the same host
// decodes before it maps the producer's slot. Pure C++: builds without CUDA or a device.
//
// Any input goes to decode_descriptor: only modelcast::Error may leave it. A descriptor that
// decodes has a device ordinal >= 0 and a size > 0, encodes back to the same bytes, and decodes
// from those to the same descriptor.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "modelcast/error.h"
#include "transports/cuda_ipc/ipc_descriptor.h"

namespace ipc = modelcast::cuda_ipc;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  ipc::IpcDescriptor d;
  try {
    d = ipc::decode_descriptor(bytes);
  } catch (const modelcast::Error&) {
    return 0;
  }
  if (d.source.device < 0 || d.source.size == 0) {
    std::fprintf(stderr, "fuzz_ipc_descriptor: decoded a negative device or an empty slot\n");
    std::abort();
  }
  std::vector<std::byte> again;
  try {
    again = ipc::encode_descriptor(d);
  } catch (const modelcast::Error& e) {
    std::fprintf(stderr, "fuzz_ipc_descriptor: a decoded descriptor does not encode: %s\n", e.what());
    std::abort();
  }
  if (again.size() != size || std::memcmp(again.data(), data, size) != 0) {
    std::fprintf(stderr, "fuzz_ipc_descriptor: encoding a decoded descriptor changed its bytes\n");
    std::abort();
  }
  if (!(ipc::decode_descriptor(again) == d)) {
    std::fprintf(stderr, "fuzz_ipc_descriptor: decode/encode round trip changed the descriptor\n");
    std::abort();
  }
  return 0;
}
