#include "daemon/attach/protocol.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include <msgpack.hpp>

#include "core/wire/unpack_bounds.h"
#include "modelcast/error.h"

namespace modelcastd::attach {
namespace {

using Packer = msgpack::packer<msgpack::sbuffer>;

[[noreturn]] void fail(const std::string& what) {
  throw modelcast::Error(modelcast::ErrorCode::kProtocol, "attach protocol: " + what);
}

std::vector<char> to_vector(const msgpack::sbuffer& buffer) { return {buffer.data(), buffer.data() + buffer.size()}; }

// Lookup of a named field in a msgpack map, with the type checked.
class Fields {
 public:
  explicit Fields(const msgpack::object& object) {
    if (object.type != msgpack::type::MAP) fail("message is not a map");
    map_ = object.via.map;
  }
  const msgpack::object* find(const char* key) const {
    for (std::uint32_t i = 0; i < map_.size; ++i) {
      const auto& kv = map_.ptr[i];
      if (kv.key.type == msgpack::type::STR && kv.key.via.str.size == std::strlen(key) &&
          std::memcmp(kv.key.via.str.ptr, key, kv.key.via.str.size) == 0) {
        return &kv.val;
      }
    }
    return nullptr;
  }
  template <typename T>
  T get(const char* key) const {
    const msgpack::object* value = find(key);
    if (!value) fail(std::string("missing field '") + key + "'");
    try {
      return value->as<T>();
    } catch (const std::exception&) {
      fail(std::string("field '") + key + "' has the wrong type");
    }
  }

 private:
  msgpack::object_map map_{};
};

msgpack::object_handle unpack(std::span<const char> bytes) {
  if (bytes.size() > kMaxManifestBytes) fail("message of " + std::to_string(bytes.size()) + " bytes is too large");
  // Every declared container size is capped before msgpack-c reserves room for it (the
  // producer's manifest limits: 2^17 tensors, 2^12 metadata entries), and by the message's size.
  const auto limit = modelcast::wire::unpack_bounds(bytes.size(), 1u << 17, 1u << 12, 1u << 20, 1u << 20, 8);
  try {
    std::size_t offset = 0;
    auto handle = msgpack::unpack(bytes.data(), bytes.size(), offset, nullptr, nullptr, limit);
    if (offset != bytes.size()) fail("trailing bytes after the message");
    return handle;
  } catch (const modelcast::Error&) {
    throw;
  } catch (const std::exception& e) {
    fail(std::string("malformed message: ") + e.what());
  }
}

}  // namespace

std::vector<char> encode(const Request& request) {
  msgpack::sbuffer buffer;
  Packer pk(buffer);
  if (request.op == Request::Op::kRelease) {
    pk.pack_map(2);
    pk.pack("op"); pk.pack("release");
    pk.pack("hold"); pk.pack(request.hold);
  } else {
    pk.pack_map(4);
    pk.pack("op"); pk.pack("acquire");
    pk.pack("model"); pk.pack(request.model);
    pk.pack("min_version"); pk.pack(request.min_version);
    pk.pack("timeout_ms"); pk.pack(request.timeout_ms);
  }
  return to_vector(buffer);
}

std::vector<char> encode_manifest_in_fd() {
  msgpack::sbuffer buffer;
  Packer pk(buffer);
  pk.pack_map(2);
  pk.pack("code"); pk.pack(0);
  pk.pack("manifest_fd"); pk.pack(true);
  return to_vector(buffer);
}

std::vector<char> encode(const Reply& reply) {
  msgpack::sbuffer buffer;
  Packer pk(buffer);
  if (!reply.manifest) {
    pk.pack_map(2);
    pk.pack("code"); pk.pack(reply.code);
    pk.pack("error"); pk.pack(reply.error);
    return to_vector(buffer);
  }
  const Manifest& m = *reply.manifest;
  pk.pack_map(10);
  pk.pack("code"); pk.pack(0);
  pk.pack("hold"); pk.pack(m.hold);
  pk.pack("buffer"); pk.pack(m.buffer_id);
  pk.pack("buffer_bytes"); pk.pack(m.buffer_bytes);
  pk.pack("version"); pk.pack(m.version);
  pk.pack("step"); pk.pack(m.step);
  pk.pack("incarnation"); pk.pack(m.incarnation);
  pk.pack("source"); pk.pack(m.source);
  pk.pack("metadata"); pk.pack(m.metadata);
  pk.pack("tensors");
  pk.pack_array(static_cast<std::uint32_t>(m.tensors.size()));
  for (const auto& t : m.tensors) {
    const bool part = !t.whole_shape.empty();
    const bool scaled = !t.scales.empty();
    pk.pack_array(part || scaled ? 6 : 5);
    pk.pack(t.name);
    pk.pack(std::string(modelcast::dtype_name(t.dtype)));
    pk.pack(t.shape);
    pk.pack(t.offset);
    pk.pack(t.bytes);
    if (!part && !scaled) continue;
    pk.pack_map((part ? 2 : 0) + (scaled ? 2 : 0));
    if (part) {
      pk.pack("box_offset"); pk.pack(t.box_offset);
      pk.pack("whole_shape"); pk.pack(t.whole_shape);
    }
    if (scaled) {
      pk.pack("scales"); pk.pack(t.scales);
      pk.pack("scale_block"); pk.pack(t.scale_block);
    }
  }
  return to_vector(buffer);
}

Request decode_request(std::span<const char> bytes) {
  auto handle = unpack(bytes);
  Fields f(handle.get());
  Request r;
  auto op = f.get<std::string>("op");
  if (op == "release") {
    r.op = Request::Op::kRelease;
    r.hold = f.get<std::uint64_t>("hold");
  } else if (op == "acquire") {
    r.model = f.get<std::string>("model");
    r.min_version = f.get<std::uint64_t>("min_version");
    r.timeout_ms = f.get<std::uint64_t>("timeout_ms");
  } else {
    fail("unknown op '" + op + "'");
  }
  return r;
}

std::optional<std::uint64_t> hold_in_reply(std::span<const char> bytes) noexcept {
  try {
    auto handle = unpack(bytes);
    Fields f(handle.get());
    if (f.get<int>("code") != 0 || !f.find("hold")) return std::nullopt;
    const auto hold = f.get<std::uint64_t>("hold");
    return hold != 0 ? std::optional(hold) : std::nullopt;
  } catch (...) {
    return std::nullopt;
  }
}

Reply decode_reply(std::span<const char> bytes) {
  auto handle = unpack(bytes);
  Fields f(handle.get());
  Reply r;
  r.code = f.get<int>("code");
  if (r.code == 0 && f.find("manifest_fd")) {
    r.manifest_in_fd = f.get<bool>("manifest_fd");
    return r;
  }
  if (r.code != 0 || !f.find("hold")) {
    if (f.find("error")) r.error = f.get<std::string>("error");
    return r;
  }
  Manifest m;
  m.hold = f.get<std::uint64_t>("hold");
  m.buffer_id = f.get<std::uint64_t>("buffer");
  m.buffer_bytes = f.get<std::uint64_t>("buffer_bytes");
  m.version = f.get<std::uint64_t>("version");
  m.step = f.get<std::int64_t>("step");
  m.incarnation = f.get<std::uint64_t>("incarnation");
  m.source = f.get<std::string>("source");
  m.metadata = f.get<std::map<std::string, std::string>>("metadata");
  const msgpack::object* tensors = f.find("tensors");
  if (!tensors || tensors->type != msgpack::type::ARRAY) fail("field 'tensors' is not an array");
  for (std::uint32_t i = 0; i < tensors->via.array.size; ++i) {
    const msgpack::object& item = tensors->via.array.ptr[i];
    if (item.type != msgpack::type::ARRAY || (item.via.array.size != 5 && item.via.array.size != 6)) {
      fail("tensor entry is not a 5- or 6-element array");
    }
    const msgpack::object* e = item.via.array.ptr;
    TensorEntry t;
    try {
      t.name = e[0].as<std::string>();
      auto dtype = modelcast::parse_dtype(e[1].as<std::string>());
      if (!dtype) fail("tensor '" + t.name + "' has an unknown dtype");
      t.dtype = *dtype;
      t.shape = e[2].as<std::vector<std::int64_t>>();
      t.offset = e[3].as<std::uint64_t>();
      t.bytes = e[4].as<std::uint64_t>();
      if (item.via.array.size == 6) {
        Fields extra(e[5]);
        if (extra.find("whole_shape")) {
          t.box_offset = extra.get<std::vector<std::int64_t>>("box_offset");
          t.whole_shape = extra.get<std::vector<std::int64_t>>("whole_shape");
        }
        if (extra.find("scales")) {
          t.scales = extra.get<std::vector<float>>("scales");
          t.scale_block = extra.get<std::uint64_t>("scale_block");
        }
      }
    } catch (const modelcast::Error&) {
      throw;
    } catch (const std::exception&) {
      fail("tensor entry " + std::to_string(i) + " has a field of the wrong type");
    }
    if (t.box_offset.size() != t.whole_shape.size() || (!t.whole_shape.empty() && t.whole_shape.size() != t.shape.size())) {
      fail("tensor '" + t.name + "' has a box that does not match its shape");
    }
    for (std::size_t d = 0; d < t.whole_shape.size(); ++d) {
      if (t.box_offset[d] < 0 || t.shape[d] < 0 || t.box_offset[d] > t.whole_shape[d] ||
          t.shape[d] > t.whole_shape[d] - t.box_offset[d]) {
        fail("tensor '" + t.name + "' has a box outside the whole tensor");
      }
    }
    if (!t.scales.empty()) {
      // What a client dequantizes with: one scale per scale_block elements (one for all with 0).
      std::uint64_t elements = 1;
      for (auto extent : t.shape) {
        const auto n = static_cast<std::uint64_t>(extent < 0 ? 0 : extent);
        elements = n != 0 && elements > UINT64_MAX / n ? 0 : elements * n;
      }
      const std::uint64_t expected =
          t.scale_block == 0 ? 1
                             : std::max<std::uint64_t>(1, elements / t.scale_block + (elements % t.scale_block != 0));
      if (t.dtype != modelcast::DType::kF8E4M3 || t.scales.size() != expected) {
        fail("tensor '" + t.name + "' has " + std::to_string(t.scales.size()) + " fp8 scales for " +
             std::to_string(expected) + " blocks");
      }
      for (float scale : t.scales) {
        if (!(scale > 0.0f) || !std::isfinite(scale)) fail("tensor '" + t.name + "' has an fp8 scale that is not finite and > 0");
      }
    }
    if (t.offset > m.buffer_bytes || t.bytes > m.buffer_bytes - t.offset) {
      fail("tensor '" + t.name + "' lies outside its buffer");
    }
    m.tensors.push_back(std::move(t));
  }
  r.manifest = std::move(m);
  return r;
}

}  // namespace modelcastd::attach
