// A transport offer's msgpack form, as a join request carries it: name, address, and the
// capabilities (memory pairs, reach, one- and two-sided) the producer routes by.
#pragma once

#include <vector>

#include "core/wire/msgpack_fields.h"
#include "transports/transport_registry.h"

namespace modelcast::wire {

void pack_offer(Packer& pk, const transport::TransportOffer& offer);
// Throws Error(kProtocol) for a missing field, an unknown memory kind or reach.
std::vector<transport::TransportOffer> unpack_offers(const msgpack::object& array);

}  // namespace modelcast::wire
