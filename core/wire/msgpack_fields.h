// Helpers shared by the control-plane codecs: packing strings and binaries, and reading a
// msgpack map field by field with every access checked and every failure named
// (Error(kProtocol) with the message's context and the field).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include <msgpack.hpp>

#include "modelcast/error.h"
#include "modelcast/types.h"

namespace modelcast::wire {

using Packer = msgpack::packer<msgpack::sbuffer>;

inline void pack_str(Packer& pk, const std::string& s) { pk.pack(s); }
inline void pack_bin(Packer& pk, std::span<const std::byte> bytes) {
  pk.pack_bin(static_cast<std::uint32_t>(bytes.size()));
  pk.pack_bin_body(reinterpret_cast<const char*>(bytes.data()), static_cast<std::uint32_t>(bytes.size()));
}

[[noreturn]] inline void fail(const std::string& what) { throw Error(ErrorCode::kProtocol, what); }

class Fields {
 public:
  Fields(const msgpack::object& object, const char* context) : context_(context) {
    if (object.type != msgpack::type::MAP) fail(std::string(context) + ": body is not a map");
    map_ = object.via.map;
  }

  bool has(const char* key) const {
    for (std::uint32_t i = 0; i < map_.size; ++i) {
      const auto& k = map_.ptr[i].key;
      if (k.type == msgpack::type::STR && k.via.str.size == std::strlen(key) &&
          std::memcmp(k.via.str.ptr, key, k.via.str.size) == 0) {
        return true;
      }
    }
    return false;
  }

  const msgpack::object& at(const char* key) const {
    for (std::uint32_t i = 0; i < map_.size; ++i) {
      const auto& kv = map_.ptr[i];
      if (kv.key.type == msgpack::type::STR && kv.key.via.str.size == std::strlen(key) &&
          std::memcmp(kv.key.via.str.ptr, key, kv.key.via.str.size) == 0) {
        return kv.val;
      }
    }
    fail(std::string(context_) + ": missing field '" + key + "'");
  }

  template <typename T>
  T get(const char* key) const {
    const auto& value = at(key);
    try {
      return value.as<T>();
    } catch (const std::exception&) {
      fail(std::string(context_) + ": field '" + key + "' has the wrong type");
    }
  }

  std::vector<std::byte> bin(const char* key) const {
    const auto& value = at(key);
    if (value.type != msgpack::type::BIN) fail(std::string(context_) + ": field '" + key + "' is not binary");
    const auto* p = reinterpret_cast<const std::byte*>(value.via.bin.ptr);
    return {p, p + value.via.bin.size};
  }

 private:
  const char* context_;
  msgpack::object_map map_{};
};

inline MemoryKind memory_kind(std::uint8_t code, const char* context) {
  if (code > static_cast<std::uint8_t>(MemoryKind::kCuda)) fail(std::string(context) + ": unknown memory kind");
  return static_cast<MemoryKind>(code);
}

}  // namespace modelcast::wire
