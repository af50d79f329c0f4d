// Who has joined: one record per consumer connection. Decides joins (model, name, capacity,
// a reconnect replacing its own old record) and finds silent consumers; it never sends a
// message or touches a transport. Service thread only.
//
// A consumer is its connection (the ROUTER's routing id, unique per live connection) and, on an
// authenticated control plane, its key; never its name, which the peer chooses and two
// consumers may share. A join from a new connection replaces an old record only when it shows
// the same random session (and key): the same Consumer object reconnecting.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/wire/protocol.h"
#include "transports/transport.h"

namespace modelcast::producer {

struct ConsumerRecord {
  std::string name;        // for logs and Delivery reports only
  std::string routing_id;
  std::uint64_t session = 0;
  std::string key;         // CurveZMQ key of an authenticated connection, else empty
  std::size_t transport = 0;  // index into the producer's TransportSet, chosen at the join
  transport::PeerId peer = 0;  // on that transport
  std::chrono::steady_clock::time_point last_seen{};
  std::vector<std::byte> peer_address;  // the consumer's address the peer was connected to
  std::string host_id;     // the consumer's machine (JoinRequest::host_id)
  std::uint64_t process = 0;  // and its process (JoinRequest::process; 0: not said)
  bool serves_peers = false;  // it relays blocks to other consumers when asked
  transport::MemoryLocation memory{};  // where its receive buffers live (JoinRequest::memory)
  std::vector<TensorWant> wants{};  // what it keeps of each tensor (checked at the join)
  int connection_fd = -1;  // the control connection's descriptor (ZMQ_SRCFD of the join)
  // A message other than its join came from it: it heard its join answered (a consumer pings,
  // fetches and acks only once joined), so it will not send that join again on a new connection.
  bool spoke_since_join = false;
};

class Membership {
 public:
  using Clock = std::chrono::steady_clock;

  struct JoinDecision {
    protocol::Refusal refusal = protocol::Refusal::kNone;  // kNone: admit
    std::string error;
    std::vector<std::string> replaces;  // routing ids of this consumer's earlier records
  };

  // `limit_said`: what sets `max_consumers`, for the refusal past it.
  Membership(std::string model, std::size_t max_consumers, std::string limit_said = "max_consumers")
      : model_(std::move(model)), max_(max_consumers), limit_said_(std::move(limit_said)) {}

  JoinDecision decide(const std::string& routing_id, const std::string& key, const protocol::JoinRequest& join) const;
  void add(ConsumerRecord record);
  std::optional<ConsumerRecord> remove(const std::string& routing_id);
  ConsumerRecord* find(const std::string& routing_id);
  std::optional<std::string> find_peer(std::size_t transport, transport::PeerId peer) const;
  // Routing ids of consumers not heard from for longer than `limit`.
  std::vector<std::string> silent(Clock::time_point now, Clock::duration limit) const;
  std::size_t size() const { return consumers_.size(); }
  std::vector<std::string> routing_ids() const;
  // The control connections' descriptors of the joined consumers.
  std::set<int> connection_fds() const;
  // Routing ids of the consumers that joined over the connection with descriptor `fd` and have
  // spoken since (ConsumerRecord::spoke_since_join).
  std::vector<std::string> spoke_over(int fd) const;

 private:
  std::string model_;
  std::size_t max_;
  std::string limit_said_;
  std::map<std::string, ConsumerRecord> consumers_;  // by routing id
};

}  // namespace modelcast::producer
