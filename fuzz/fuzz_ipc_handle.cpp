// libFuzzer target: the CUDA IPC export codec (transports/cuda_ipc/ipc_codec.h), which reads the
// optional "ipc" field of a FetchReply body. Pure C++: builds without CUDA.
//
// The input is a msgpack object (the FetchReply body map). The harness parses it with bounded
// limits like protocol::decode does (bytes it cannot parse are not the codec's concern), then
// calls unpack_ipc_field: only modelcast::Error may leave it. An export that unpacks must
// round-trip through pack_ipc_field unchanged.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include <msgpack.hpp>

#include "modelcast/error.h"
#include "transports/cuda_ipc/ipc_codec.h"

namespace ipc = modelcast::cuda_ipc;

namespace {

bool parse(const char* data, std::size_t size, msgpack::object_handle& handle) {
  // The defaults of protocol::DecodeLimits.
  const msgpack::unpack_limit limit(std::size_t{1} << 17, std::size_t{1} << 12, std::size_t{1} << 20,
                                    std::size_t{1} << 16, 0, 8);
  try {
    std::size_t offset = 0;
    handle = msgpack::unpack(data, size, offset, nullptr, nullptr, limit);
    return offset == size;
  } catch (const msgpack::unpack_error&) {  // insufficient_bytes, parse_error, size_overflow, ...
    return false;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  msgpack::object_handle handle;
  if (!parse(reinterpret_cast<const char*>(data), size, handle)) return 0;
  std::optional<ipc::IpcExport> out;
  try {
    out = ipc::unpack_ipc_field(handle.get());
  } catch (const modelcast::Error&) {
    return 0;
  }
  if (!out) return 0;
  if (out->device < 0) {
    std::fprintf(stderr, "fuzz_ipc_handle: unpacked a negative device ordinal\n");
    std::abort();
  }
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(&buffer);
  pk.pack_map(ipc::ipc_field_count(out));
  ipc::pack_ipc_field(pk, out);
  msgpack::object_handle again;
  std::optional<ipc::IpcExport> back;
  try {
    if (!parse(buffer.data(), buffer.size(), again)) throw modelcast::Error(modelcast::ErrorCode::kProtocol, "unparsable");
    back = ipc::unpack_ipc_field(again.get());
  } catch (const modelcast::Error& e) {
    std::fprintf(stderr, "fuzz_ipc_handle: a packed export does not unpack: %s\n", e.what());
    std::abort();
  }
  if (back != out) {
    std::fprintf(stderr, "fuzz_ipc_handle: pack/unpack round trip changed the export\n");
    std::abort();
  }
  return 0;
}
