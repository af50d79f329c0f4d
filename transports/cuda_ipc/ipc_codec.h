// Wire form of an IpcExport inside a FetchReply: an optional field "ipc" of the
// FetchReply body map,
//
//   "ipc": {"slot": uint, "dev": int, "size": uint, "handle": bin(64)}
//
// absent when the path is not CUDA IPC. Decoders that do not know the field ignore it, so a
// FetchReply with it stays readable by older builds of the same protocol version.
// core/wire/protocol.cpp calls the three functions below (see the report for the exact lines).
#pragma once

#include <cstdint>
#include <optional>

#include <msgpack.hpp>

#include "transports/cuda_ipc/ipc_handle.h"

namespace modelcast::cuda_ipc {

// Map entries the field adds to the FetchReply body: 1 with an export, 0 without.
std::uint32_t ipc_field_count(const std::optional<IpcExport>& ipc) noexcept;
// Packs the key "ipc" and its value when `ipc` holds one; packs nothing otherwise.
void pack_ipc_field(msgpack::packer<msgpack::sbuffer>& pk, const std::optional<IpcExport>& ipc);
// Reads "ipc" from a FetchReply body map: nullopt when the key is absent. Throws
// Error(kProtocol) naming the problem for a body that is not a map or a malformed value
// (not a map, missing or mistyped field, handle not exactly 64 bytes, negative device).
std::optional<IpcExport> unpack_ipc_field(const msgpack::object& body);

}  // namespace modelcast::cuda_ipc
