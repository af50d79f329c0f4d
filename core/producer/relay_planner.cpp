#include "core/producer/relay_planner.h"

#include "transports/transport_registry.h"

#include <tuple>
#include <utility>

namespace modelcast::producer {

void RelayPlanner::joined(const std::string& routing_id, std::string name, std::string host_id,
                          std::uint64_t process, bool serves, std::size_t transport) {
  Node& node = nodes_[routing_id];
  node = Node{};
  node.name = std::move(name);
  node.host_id = std::move(host_id);
  node.process = process;
  node.serves = serves;
  node.transport = transport;
}

void RelayPlanner::forget(const std::string& routing_id) { nodes_.erase(routing_id); }

void RelayPlanner::receiving(const std::string& routing_id, std::uint64_t version, Clock::time_point now) {
  auto it = nodes_.find(routing_id);
  if (it == nodes_.end()) return;
  it->second.version = version;
  it->second.complete = false;
  it->second.started = now;
}

void RelayPlanner::delivered(const std::string& routing_id, std::uint64_t version) {
  auto it = nodes_.find(routing_id);
  if (it == nodes_.end()) return;
  it->second.version = version;
  it->second.complete = true;
}

void RelayPlanner::lost(const std::string& routing_id) {
  auto it = nodes_.find(routing_id);
  if (it == nodes_.end()) return;
  it->second.version = 0;
  it->second.complete = false;
}

std::optional<std::string> RelayPlanner::choose(const std::string& routing_id, std::uint64_t version,
                                                Clock::time_point now, bool read_by_requester) const {
  if (!enabled()) return std::nullopt;
  auto requester = nodes_.find(routing_id);
  if (requester == nodes_.end() || requester->second.direct_only == version) return std::nullopt;
  const Node& want = requester->second;
  const std::string* best = nullptr;
  const Node* best_node = nullptr;
  // Smaller is better: load, then complete holders first, then the latest to start.
  auto rank = [](const Node& n) { return std::make_tuple(n.load, !n.complete, -n.started.time_since_epoch().count()); };
  for (const auto& [id, node] : nodes_) {
    if (id == routing_id || !node.serves || node.version != version || node.transport != want.transport) continue;
    if (node.load >= fanout_ || now < node.distrusted_until) continue;
    // A one-sided read maps the relay's memory, which reaches only another process of its
    // machine: CUDA IPC cannot open a handle its own process exported, and two consumers of one
    // inference server paired so failed every read and had a good relay distrusted.
    if (read_by_requester &&
        (!node.complete ||
         transport::distance_between(node.host_id, node.process, want.host_id, want.process) != transport::Reach::kHost)) {
      continue;
    }
    if (!best_node || rank(node) < rank(*best_node)) {
      best = &id;
      best_node = &node;
    }
  }
  if (!best) return std::nullopt;
  return *best;
}

void RelayPlanner::assigned(const std::string& relay) {
  if (auto it = nodes_.find(relay); it != nodes_.end()) it->second.load++;
}

void RelayPlanner::released(const std::string& relay) {
  if (auto it = nodes_.find(relay); it != nodes_.end() && it->second.load > 0) it->second.load--;
}

void RelayPlanner::failed(const std::string& relay, const std::string& routing_id, std::uint64_t version,
                          Clock::time_point now, bool stalled) {
  if (auto it = nodes_.find(relay); it != nodes_.end() && (!stalled || it->second.complete)) {
    it->second.distrusted_until = now + kDistrustFor;
  }
  if (auto it = nodes_.find(routing_id); it != nodes_.end()) it->second.direct_only = version;
}

std::size_t RelayPlanner::load(const std::string& relay) const {
  auto it = nodes_.find(relay);
  return it == nodes_.end() ? 0 : it->second.load;
}

std::string RelayPlanner::name(const std::string& routing_id) const {
  auto it = nodes_.find(routing_id);
  return it == nodes_.end() ? std::string("?") : it->second.name;
}

std::string RelayPlanner::host_id(const std::string& routing_id) const {
  auto it = nodes_.find(routing_id);
  return it == nodes_.end() ? std::string() : it->second.host_id;
}

}  // namespace modelcast::producer
