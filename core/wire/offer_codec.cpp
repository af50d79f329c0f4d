#include "core/wire/offer_codec.h"

namespace modelcast::wire {
namespace {

transport::TransportOffer unpack_offer(const msgpack::object& object) {
  Fields f(object, "transport offer");
  transport::TransportOffer offer;
  offer.name = f.get<std::string>("name");
  offer.address = f.bin("addr");
  offer.capabilities.pairs = transport::decode_pairs(f.get<std::vector<std::uint8_t>>("pairs"));
  auto reach = f.get<std::uint8_t>("reach");
  if (reach > static_cast<std::uint8_t>(transport::Reach::kNetwork)) fail("transport offer: unknown reach");
  offer.capabilities.reach = static_cast<transport::Reach>(reach);
  offer.capabilities.two_sided = f.get<bool>("two");
  offer.capabilities.one_sided = f.get<bool>("one");
  return offer;
}

}  // namespace

void pack_offer(Packer& pk, const transport::TransportOffer& offer) {
  const auto& c = offer.capabilities;
  pk.pack_map(6);
  pk.pack("name"); pack_str(pk, offer.name);
  pk.pack("addr"); pack_bin(pk, offer.address);
  pk.pack("pairs"); pk.pack(transport::encode_pairs(c.pairs));
  pk.pack("reach"); pk.pack(static_cast<std::uint8_t>(c.reach));
  pk.pack("two"); pk.pack(c.two_sided);
  pk.pack("one"); pk.pack(c.one_sided);
}

std::vector<transport::TransportOffer> unpack_offers(const msgpack::object& object) {
  if (object.type != msgpack::type::ARRAY) fail("join request: field 'offers' is not an array");
  std::vector<transport::TransportOffer> offers;
  for (std::uint32_t i = 0; i < object.via.array.size; ++i) offers.push_back(unpack_offer(object.via.array.ptr[i]));
  return offers;
}

}  // namespace modelcast::wire
