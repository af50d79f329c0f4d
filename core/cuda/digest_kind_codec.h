// Wire helpers for DigestKind (digest_kind.h): the optional "dkind" key of the manifest map.
#pragma once

#include <cstdint>

#include <msgpack.hpp>

#include "core/cuda/digest_kind.h"

namespace modelcast {

// Manifest-map helpers for core/wire/protocol.cpp.
std::uint32_t digest_kind_field_count(DigestKind kind) noexcept;  // 0 for xxh3-64, else 1
void pack_digest_kind_field(msgpack::packer<msgpack::sbuffer>& pk, DigestKind kind);
// Reads "dkind" from a manifest map: kXxh3_64 when absent. Throws Error(kProtocol) for a map
// that is not one, a non-integer value or an unknown kind.
DigestKind unpack_digest_kind_field(const msgpack::object& manifest_map);

}  // namespace modelcast
