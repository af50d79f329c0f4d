// Where a consumer's blocks come from: the producer, or another consumer that holds the version
// or is receiving it (a relay). Relays forward each block once they have verified it, so
// blocks flow down a chain while the producer sends each about once.
//
// The rule: a fetch goes to the least-loaded consumer that holds or receives the version,
// serves peers, shares the requester's transport, has fewer than `fanout` fetches to serve, and
// has not failed a fetch lately; among equals, a complete holder, then the one that began
// receiving last (the tail of the chain). Failing that, the producer serves: it is the source
// of last resort, and the only one for a consumer a relay has failed on this version.
// On a one-sided route (CUDA IPC) the requester reads the relay's buffer itself and cannot tell
// which blocks are in: there, only a complete holder on the requester's machine is chosen.
// Chains, not trees: on links that are equal both ways a node that forwards to one peer keeps
// its uplink as busy as its downlink, so a chain of n takes one model's transfer plus a block
// per hop, where a tree of fan-out k takes k times the model per level.
//
// Pure bookkeeping: it sends nothing and touches no transport. Producer service thread only.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace modelcast::producer {

class RelayPlanner {
 public:
  using Clock = std::chrono::steady_clock;
  // How long a relay that failed a fetch (bad bytes, no progress) is passed over.
  static constexpr std::chrono::seconds kDistrustFor{60};

  // fanout 0: no relaying; the producer serves every fetch.
  explicit RelayPlanner(std::size_t fanout) : fanout_(fanout) {}
  bool enabled() const { return fanout_ > 0; }

  // A consumer that joined: its name, its machine and process (JoinRequest::host_id and
  // ::process; 0: not known), whether it serves peers, and its transport (index in the
  // producer's set).
  void joined(const std::string& routing_id, std::string name, std::string host_id, std::uint64_t process,
              bool serves, std::size_t transport);
  void forget(const std::string& routing_id);

  // `routing_id` began receiving `version` (from the producer or a relay).
  void receiving(const std::string& routing_id, std::uint64_t version, Clock::time_point now);
  // It installed it: a complete holder until it receives another.
  void delivered(const std::string& routing_id, std::uint64_t version);
  // Its fetch ended without the version: it holds nothing to offer.
  void lost(const std::string& routing_id);

  // The relay for `routing_id`'s fetch of `version`, or nullopt: the producer serves it.
  // `read_by_requester`: a one-sided route (see above).
  std::optional<std::string> choose(const std::string& routing_id, std::uint64_t version, Clock::time_point now,
                                    bool read_by_requester = false) const;
  // A fetch was given to `relay`, or one it served ended.
  void assigned(const std::string& relay);
  void released(const std::string& relay);
  // `relay` failed `routing_id`'s fetch of `version`: that consumer gets the version from the
  // producer, and the relay is passed over for kDistrustFor; after a stall only if it held the
  // whole version, since one still receiving may have been starved by its own source (the
  // consumer below a stalled relay stalls too), while bad bytes are always the relay's own.
  void failed(const std::string& relay, const std::string& routing_id, std::uint64_t version, Clock::time_point now,
              bool stalled = false);

  std::size_t load(const std::string& relay) const;
  std::string name(const std::string& routing_id) const;
  std::string host_id(const std::string& routing_id) const;

 private:
  struct Node {
    std::string name;
    std::string host_id;
    std::uint64_t process = 0;
    bool serves = false;
    std::size_t transport = 0;
    std::uint64_t version = 0;  // held or being received; 0: nothing to offer
    bool complete = false;
    Clock::time_point started{};
    std::size_t load = 0;
    Clock::time_point distrusted_until{};
    std::uint64_t direct_only = 0;  // a relay failed this node on this version
  };
  const std::size_t fanout_;
  std::map<std::string, Node> nodes_;  // by routing id
};

}  // namespace modelcast::producer
