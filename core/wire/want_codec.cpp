#include "core/wire/want_codec.h"

namespace modelcast::wire {
namespace {

TensorWant unpack_want(const msgpack::object& object) {
  Fields f(object, "tensor want");
  TensorWant want;
  want.tensor = f.get<std::string>("t");
  const auto kind = f.get<std::uint8_t>("k");
  if (kind > static_cast<std::uint8_t>(TensorWant::Kind::kNothing)) fail("tensor want: unknown kind");
  want.kind = static_cast<TensorWant::Kind>(kind);
  want.dim = f.get<std::uint32_t>("dim");
  want.index = f.get<std::uint64_t>("i");
  want.count = f.get<std::uint64_t>("n");
  const auto& boxes = f.at("boxes");
  if (boxes.type != msgpack::type::ARRAY) fail("tensor want: field 'boxes' is not an array");
  for (std::uint32_t i = 0; i < boxes.via.array.size; ++i) {
    const auto& box = boxes.via.array.ptr[i];
    if (box.type != msgpack::type::ARRAY || box.via.array.size != 2) fail("tensor want: a box is not [offsets, extents]");
    try {
      want.boxes.push_back({box.via.array.ptr[0].as<std::vector<std::int64_t>>(),
                            box.via.array.ptr[1].as<std::vector<std::int64_t>>()});
    } catch (const std::exception&) {
      fail("tensor want: a box's offsets or extents are not integers");
    }
  }
  return want;
}

}  // namespace

void pack_want(Packer& pk, const TensorWant& want) {
  pk.pack_map(6);
  pk.pack("t"); pack_str(pk, want.tensor);
  pk.pack("k"); pk.pack(static_cast<std::uint8_t>(want.kind));
  pk.pack("dim"); pk.pack(static_cast<std::uint32_t>(want.dim));
  pk.pack("i"); pk.pack(static_cast<std::uint64_t>(want.index));
  pk.pack("n"); pk.pack(static_cast<std::uint64_t>(want.count));
  pk.pack("boxes");
  pk.pack_array(static_cast<std::uint32_t>(want.boxes.size()));
  for (const auto& box : want.boxes) {
    pk.pack_array(2);
    pk.pack(box.offset);
    pk.pack(box.extent);
  }
}

std::vector<TensorWant> unpack_wants(const msgpack::object& object) {
  if (object.type != msgpack::type::ARRAY) fail("join request: field 'wants' is not an array");
  std::vector<TensorWant> wants;
  for (std::uint32_t i = 0; i < object.via.array.size; ++i) wants.push_back(unpack_want(object.via.array.ptr[i]));
  return wants;
}

}  // namespace modelcast::wire
