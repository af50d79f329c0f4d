// The transports a user's list selects by name, and the choice of one per consumer.
//
// A consumer's join offers the transports it allows, in its order of preference, each with its
// capabilities (as that side sees them) and its address. The producer picks a route: the best
// delivery path for the pair of memories and the distance between the two, then the first
// offer that both sides have and whose capabilities on both sides serve that path. Names only
// pair an offer with the producer's instance of the same transport; capabilities decide.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "transports/delivery_path.h"
#include "transports/transport.h"
#include "transports/transport_factory.h"

namespace modelcast::transport {

// The built-in transports (builtin_transports.h) a user's list selects, in its order; an empty
// list selects every on_by_default one that is available, in the built-in order. Throws
// Error(kInvalidArgument) naming an unknown or repeated name and listing the known ones.
std::vector<const TransportFactory*> resolve_transports(const std::vector<std::string>& requested);

// One side's view of one transport in the negotiation.
struct TransportOffer {
  std::string name;
  Capabilities capabilities;
  std::vector<std::byte> address;  // empty on the producer's side (it connects; it is not reached)
};

struct RouteQuery {
  MemoryKind producer = MemoryKind::kHost;  // where the snapshot slots live
  MemoryKind consumer = MemoryKind::kHost;  // where the consumer receives
  Reach distance = Reach::kNetwork;         // how far apart the two processes are
  std::optional<DeliveryPath> forced;       // a path the user insists on
};

struct Route {
  std::size_t producer_transport = 0;  // index into the producer's offers
  std::size_t consumer_offer = 0;      // index into the consumer's offers
  DeliveryPath path = DeliveryPath::kHostUcx;
};

// Delivery paths that can serve the query, best first (one, the forced path, when forced; a
// forced path the memories cannot use throws Error(kInvalidArgument), see delivery_path.h).
std::vector<DeliveryPath> candidate_paths(const RouteQuery& query);

// True when a transport with capabilities `producer_side` and `consumer_side` serves `path` for
// the query (staged paths move host bounce buffers; cuda_ipc reads exported device memory).
bool serves(const Capabilities& producer_side, const Capabilities& consumer_side, DeliveryPath path,
            const RouteQuery& query);

// The route, or an Error(kTransport) whose message lists what each side offered and why
// nothing fits.
Route choose_route(std::span<const TransportOffer> producer_side, std::span<const TransportOffer> consumer_offers,
                   const RouteQuery& query);

// Distance between two processes given their boot ids and process tokens (boot ids are equal on
// one machine, network namespaces included; an empty id or a zero token is a peer that did not say).
Reach distance_between(const std::string& host_a, std::uint64_t process_a, const std::string& host_b,
                       std::uint64_t process_b);

}  // namespace modelcast::transport
