#include "transports/cuda_ipc/ipc_codec.h"

#include <cstring>
#include <string>
#include <string_view>

#include "modelcast/error.h"

namespace modelcast::cuda_ipc {
namespace {

[[noreturn]] void fail(const std::string& what) { throw Error(ErrorCode::kProtocol, "fetch reply: " + what); }

const msgpack::object* find(const msgpack::object& map, std::string_view key) {
  for (std::uint32_t i = 0; i < map.via.map.size; ++i) {
    const auto& kv = map.via.map.ptr[i];
    if (kv.key.type == msgpack::type::STR && std::string_view(kv.key.via.str.ptr, kv.key.via.str.size) == key) {
      return &kv.val;
    }
  }
  return nullptr;
}

template <typename T>
T field(const msgpack::object& map, const char* key) {
  const msgpack::object* value = find(map, key);
  if (value == nullptr) fail(std::string("ipc: missing field '") + key + "'");
  try {
    return value->as<T>();
  } catch (const std::exception&) {
    fail(std::string("ipc: field '") + key + "' has the wrong type");
  }
}

}  // namespace

std::uint32_t ipc_field_count(const std::optional<IpcExport>& ipc) noexcept { return ipc ? 1 : 0; }

void pack_ipc_field(msgpack::packer<msgpack::sbuffer>& pk, const std::optional<IpcExport>& ipc) {
  if (!ipc) return;
  pk.pack("ipc");
  pk.pack_map(4);
  pk.pack("slot"); pk.pack(ipc->slot);
  pk.pack("dev"); pk.pack(ipc->device);
  pk.pack("size"); pk.pack(ipc->size);
  pk.pack("handle");
  pk.pack_bin(static_cast<std::uint32_t>(kHandleBytes));
  pk.pack_bin_body(reinterpret_cast<const char*>(ipc->handle.data()), static_cast<std::uint32_t>(kHandleBytes));
}

std::optional<IpcExport> unpack_ipc_field(const msgpack::object& body) {
  if (body.type != msgpack::type::MAP) fail("body is not a map");
  const msgpack::object* value = find(body, "ipc");
  if (value == nullptr) return std::nullopt;
  if (value->type != msgpack::type::MAP) fail("field 'ipc' is not a map");
  IpcExport ipc;
  ipc.slot = field<std::uint32_t>(*value, "slot");
  ipc.device = field<int>(*value, "dev");
  if (ipc.device < 0) fail("ipc: negative device ordinal");
  ipc.size = field<std::uint64_t>(*value, "size");
  const msgpack::object* handle = find(*value, "handle");
  if (handle == nullptr) fail("ipc: missing field 'handle'");
  if (handle->type != msgpack::type::BIN) fail("ipc: field 'handle' is not binary");
  if (handle->via.bin.size != kHandleBytes) {
    fail("ipc: handle has " + std::to_string(handle->via.bin.size) + " bytes, expected " + std::to_string(kHandleBytes));
  }
  std::memcpy(ipc.handle.data(), handle->via.bin.ptr, kHandleBytes);
  return ipc;
}

}  // namespace modelcast::cuda_ipc
