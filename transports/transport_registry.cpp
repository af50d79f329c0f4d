#include "transports/transport_registry.h"

#include <algorithm>

#include "modelcast/error.h"
#include "transports/builtin_transports.h"

namespace modelcast::transport {
namespace {

bool is_device(MemoryKind kind) { return kind == MemoryKind::kCuda; }

std::string offers_text(std::span<const TransportOffer> offers) {
  if (offers.empty()) return "none";
  std::string s;
  for (const auto& o : offers) {
    if (!s.empty()) s += "; ";
    s += o.name + " (" + describe(o.capabilities) + ")";
  }
  return s;
}

}  // namespace

std::vector<const TransportFactory*> resolve_transports(const std::vector<std::string>& requested) {
  const auto& all = builtin_transports();
  std::vector<const TransportFactory*> chosen;
  if (requested.empty()) {
    for (const auto& entry : all) {
      if (entry.on_by_default && (!entry.available || entry.available())) chosen.push_back(&entry);
    }
    return chosen;
  }
  for (const auto& name : requested) {
    auto it = std::find_if(all.begin(), all.end(), [&](const TransportFactory& e) { return e.name == name; });
    if (it == all.end()) {
      std::string known;
      for (const auto& e : all) known += (known.empty() ? "" : ", ") + e.name;
      throw Error(ErrorCode::kInvalidArgument, "unknown transport '" + name + "' (known: " + known + ")");
    }
    if (std::find(chosen.begin(), chosen.end(), &*it) != chosen.end()) {
      throw Error(ErrorCode::kInvalidArgument, "transport '" + name + "' is listed twice");
    }
    chosen.push_back(&*it);
  }
  return chosen;
}

std::vector<DeliveryPath> candidate_paths(const RouteQuery& q) {
  const bool same_host = q.distance != Reach::kNetwork;
  if (q.forced) {
    // ucx_cuda = true: whether a transport moves device memory is the capabilities' question,
    // answered per offer by serves(); here only the memories and the distance are checked.
    return {select_delivery_path({q.producer, q.consumer, same_host, true, q.forced})};
  }
  if (!is_device(q.producer) && !is_device(q.consumer)) return {DeliveryPath::kHostUcx};
  // CUDA IPC maps another process's memory: a process cannot open its own handles.
  if (is_device(q.producer) && is_device(q.consumer) && q.distance == Reach::kHost) {
    return {DeliveryPath::kCudaIpc, DeliveryPath::kUcxCuda, DeliveryPath::kStaged};
  }
  return {DeliveryPath::kUcxCuda, DeliveryPath::kStaged};
}

bool serves(const Capabilities& p, const Capabilities& c, DeliveryPath path, const RouteQuery& q) {
  if (!p.reaches(q.distance) || !c.reaches(q.distance)) return false;
  switch (path) {
    case DeliveryPath::kHostUcx:
    case DeliveryPath::kStaged:  // the sides stage device memory through host bounce buffers
      return p.two_sided && c.two_sided && p.moves(MemoryKind::kHost, MemoryKind::kHost) &&
             c.moves(MemoryKind::kHost, MemoryKind::kHost);
    case DeliveryPath::kUcxCuda:
      return p.two_sided && c.two_sided && p.moves(q.producer, q.consumer) && c.moves(q.producer, q.consumer);
    case DeliveryPath::kCudaIpc:  // the consumer reads the producer's exported slot
      return p.one_sided && c.one_sided && p.moves(MemoryKind::kCuda, MemoryKind::kCuda) &&
             c.moves(MemoryKind::kCuda, MemoryKind::kCuda);
  }
  return false;
}

Route choose_route(std::span<const TransportOffer> producer_side, std::span<const TransportOffer> consumer_offers,
                   const RouteQuery& q) {
  for (DeliveryPath path : candidate_paths(q)) {
    for (std::size_t c = 0; c < consumer_offers.size(); ++c) {
      for (std::size_t p = 0; p < producer_side.size(); ++p) {
        if (producer_side[p].name != consumer_offers[c].name) continue;
        if (serves(producer_side[p].capabilities, consumer_offers[c].capabilities, path, q)) return {p, c, path};
      }
    }
  }
  throw Error(ErrorCode::kTransport,
              "no transport serves " + std::string(memory_kind_name(q.producer)) + " -> " +
                  std::string(memory_kind_name(q.consumer)) + " at distance '" +
                  std::string(reach_name(q.distance)) + "': the consumer offers " + offers_text(consumer_offers) +
                  "; the producer has " + offers_text(producer_side));
}

Reach distance_between(const std::string& host_a, std::uint64_t process_a, const std::string& host_b,
                       std::uint64_t process_b) {
  if (host_a.empty() || host_b.empty() || host_a != host_b) return Reach::kNetwork;
  return process_a != 0 && process_a == process_b ? Reach::kProcess : Reach::kHost;
}

}  // namespace modelcast::transport
