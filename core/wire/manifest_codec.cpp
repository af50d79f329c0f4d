#include "core/wire/manifest_codec.h"

#include "core/cuda/digest_kind_codec.h"

namespace modelcast::wire {
namespace {

void pack_tensor(Packer& pk, const TensorEntry& t) {
  pk.pack_map(t.is_piece() ? 10 : 8);
  pk.pack("name"); pack_str(pk, t.spec.name);
  pk.pack("dtype"); pk.pack(static_cast<std::uint8_t>(t.spec.dtype));
  pk.pack("shape"); pk.pack(t.spec.shape);
  pk.pack("mem"); pk.pack(static_cast<std::uint8_t>(t.spec.memory));
  pk.pack("dev"); pk.pack(t.spec.device);
  pk.pack("off"); pk.pack(t.offset);
  pk.pack("size"); pk.pack(t.size);
  pk.pack("xxh3"); pk.pack(t.digest);
  if (t.is_piece()) {
    pk.pack("gshape"); pk.pack(t.global_shape);
    pk.pack("goff"); pk.pack(t.global_offset);
  }
}

TensorEntry unpack_tensor(const msgpack::object& object) {
  Fields f(object, "manifest tensor");
  TensorEntry t;
  t.spec.name = f.get<std::string>("name");
  t.spec.dtype = static_cast<DType>(f.get<std::uint8_t>("dtype"));
  t.spec.shape = f.get<std::vector<std::int64_t>>("shape");
  t.spec.memory = memory_kind(f.get<std::uint8_t>("mem"), "manifest tensor");
  t.spec.device = f.get<int>("dev");
  t.offset = f.get<std::uint64_t>("off");
  t.size = f.get<std::uint64_t>("size");
  t.digest = f.get<std::uint64_t>("xxh3");
  if (f.has("gshape")) {
    t.global_shape = f.get<std::vector<std::int64_t>>("gshape");
    t.global_offset = f.get<std::vector<std::int64_t>>("goff");
  }
  return t;
}

}  // namespace

std::size_t packed_tensor_bytes(const TensorEntry& tensor) {
  msgpack::sbuffer buffer;
  Packer pk(buffer);
  pack_tensor(pk, tensor);
  return buffer.size();
}

void pack_manifest(Packer& pk, const Manifest& m) {
  pk.pack_map(11 + digest_kind_field_count(m.digest_kind) + (m.rank_count > 1 ? 3 : 0) +
              (m.rank_count > 1 && !m.run_id.empty() ? 1 : 0));
  pk.pack("model"); pack_str(pk, m.model);
  pk.pack("inc"); pk.pack(m.incarnation);
  pk.pack("ver"); pk.pack(m.version);
  pk.pack("step"); pk.pack(m.step);
  pk.pack("t_pub"); pk.pack(m.publish_time_ns);
  pk.pack("meta"); pk.pack(m.metadata);
  pk.pack("integrity"); pk.pack(m.integrity);
  pk.pack("total"); pk.pack(m.total_bytes);
  pk.pack("tensors");
  pk.pack_array(static_cast<std::uint32_t>(m.tensors.size()));
  for (const auto& t : m.tensors) pack_tensor(pk, t);
  pk.pack("blk"); pk.pack(m.block_bytes);
  pk.pack("bxxh3"); pk.pack(m.block_digests);
  pack_digest_kind_field(pk, m.digest_kind);
  if (m.rank_count > 1) {
    pk.pack("rank"); pk.pack(m.rank);
    pk.pack("ranks"); pk.pack(m.rank_count);
    pk.pack("t_start"); pk.pack(m.start_time_ns);
    if (!m.run_id.empty()) {
      pk.pack("run"); pack_str(pk, m.run_id);
    }
  }
}

Manifest unpack_manifest(const msgpack::object& object) {
  Fields f(object, "manifest");
  Manifest m;
  m.model = f.get<std::string>("model");
  m.incarnation = f.get<std::uint64_t>("inc");
  m.version = f.get<std::uint64_t>("ver");
  m.step = f.get<std::int64_t>("step");
  m.publish_time_ns = f.get<std::int64_t>("t_pub");
  m.metadata = f.get<std::map<std::string, std::string>>("meta");
  m.integrity = f.get<bool>("integrity");
  m.total_bytes = f.get<std::uint64_t>("total");
  m.digest_kind = unpack_digest_kind_field(object);
  m.block_bytes = f.get<std::uint64_t>("blk");
  m.block_digests = f.get<std::vector<std::uint64_t>>("bxxh3");
  if (f.has("ranks")) {
    m.rank = f.get<std::uint32_t>("rank");
    m.rank_count = f.get<std::uint32_t>("ranks");
    if (f.has("t_start")) m.start_time_ns = f.get<std::int64_t>("t_start");
    if (f.has("run")) m.run_id = f.get<std::string>("run");
  }
  const auto& tensors = f.at("tensors");
  if (tensors.type != msgpack::type::ARRAY) fail("manifest: field 'tensors' is not an array");
  for (std::uint32_t i = 0; i < tensors.via.array.size; ++i) {
    m.tensors.push_back(unpack_tensor(tensors.via.array.ptr[i]));
  }
  return m;
}

}  // namespace modelcast::wire
