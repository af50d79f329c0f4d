#include "core/cuda/digest_kind.h"
#include "core/cuda/digest_kind_codec.h"

#include <string>

#include "modelcast/error.h"

namespace modelcast {

std::string_view digest_kind_name(DigestKind kind) noexcept {
  switch (kind) {
    case DigestKind::kXxh3_64: return "xxh3-64";
    case DigestKind::kPmix64: return "pmix64-v1";
  }
  return "unknown";
}

DigestKind digest_kind_for(MemoryKind producer, MemoryKind consumer, bool staged) noexcept {
  if (producer == MemoryKind::kCuda) return DigestKind::kPmix64;
  if (consumer == MemoryKind::kCuda && !staged) return DigestKind::kPmix64;
  return DigestKind::kXxh3_64;
}

std::uint32_t digest_kind_field_count(DigestKind kind) noexcept { return kind == DigestKind::kXxh3_64 ? 0 : 1; }

void pack_digest_kind_field(msgpack::packer<msgpack::sbuffer>& pk, DigestKind kind) {
  if (kind == DigestKind::kXxh3_64) return;
  pk.pack("dkind");
  pk.pack(static_cast<std::uint8_t>(kind));
}

DigestKind unpack_digest_kind_field(const msgpack::object& map) {
  if (map.type != msgpack::type::MAP) throw Error(ErrorCode::kProtocol, "manifest: body is not a map");
  for (std::uint32_t i = 0; i < map.via.map.size; ++i) {
    const auto& kv = map.via.map.ptr[i];
    if (kv.key.type != msgpack::type::STR || std::string_view(kv.key.via.str.ptr, kv.key.via.str.size) != "dkind") continue;
    if (kv.val.type != msgpack::type::POSITIVE_INTEGER) {
      throw Error(ErrorCode::kProtocol, "manifest: field 'dkind' is not an unsigned integer");
    }
    const std::uint64_t value = kv.val.via.u64;
    if (value != static_cast<std::uint64_t>(DigestKind::kXxh3_64) && value != static_cast<std::uint64_t>(DigestKind::kPmix64)) {
      throw Error(ErrorCode::kProtocol, "manifest: unknown digest kind " + std::to_string(value));
    }
    return static_cast<DigestKind>(value);
  }
  return DigestKind::kXxh3_64;
}

}  // namespace modelcast
