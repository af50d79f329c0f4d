// Serves fetches: decides each request, leases the version, posts the chunk sends, and ends
// the fetch on the consumer's ack, a send failure, lease expiry or the consumer's departure.
// A lease lapses after lease_timeout without progress (no chunk send completing), not after
// lease_timeout from the fetch. One-sided routes (the consumer reads the slot) show the
// producer no progress: their lease runs from the fetch, which suits the same-host device
// copies they are.
// Each call returns what the service loop must send; this stage sends no control message.
// Service thread only (transfer completions reach it through the loop's event queue).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/producer/membership.h"
#include "core/producer/snapshot_store.h"
#include "core/transfer/chunk_plan.h"
#include "core/wire/protocol.h"
#include "modelcast/producer.h"
#include "transports/transport_set.h"

namespace modelcast::producer {

class FetchServer {
 public:
  using Clock = std::chrono::steady_clock;
  // Runs on the transport's thread when a chunk send completes: push it to the service loop,
  // which hands it to on_send_done.
  using SendCompletion =
      std::function<void(const std::string& routing_id, std::uint64_t fetch_id, const transport::TransferResult&)>;

  FetchServer(SnapshotStore& store, const transport::TransportSet& transports, std::uint64_t incarnation,
              Clock::duration lease_timeout, SendCompletion on_send);

  void set_chunk_option(std::uint64_t chunk_bytes) { chunk_option_ = chunk_bytes; }

  // publish() has announced `version` and is copying it: fetches for it wait.
  void expect(std::uint64_t version) { upcoming_.insert(version); }
  // `version` is published: returns the requests that waited for it, to be started again.
  std::vector<std::pair<std::string, protocol::FetchRequest>> published(std::uint64_t version);
  // `version`'s digests exist: returns the delta requests that waited for its block digests.
  std::vector<std::pair<std::string, protocol::FetchRequest>> digests_ready(std::uint64_t version);

  // Decides a fetch. nullopt: parked until the announced version is copied or, for a request
  // with a base version whose block digests are known, until the version's block digests exist
  // (they are the delta: the blocks that differ from the base's are all that is sent).
  // Otherwise the reply to send; when ok, the sends are already posted.
  std::optional<protocol::FetchReply> start(const std::string& routing_id, const ConsumerRecord* consumer,
                                            const protocol::FetchRequest& request, Clock::time_point now);

  // More of `version`'s host copy exists (SnapshotStore::set_host_prefix, set_host_state): posts
  // the chunk sends of its fetches that it now covers.
  // A fetch answered while its version was still being copied to the host, whose remaining
  // chunks cannot be sent: the consumer is told with a refusal of the same fetch id.
  struct Withdrawn {
    std::string routing_id;
    protocol::FetchReply refusal;
  };
  // Returns the fetches withdrawn because a send could not be posted.
  std::vector<Withdrawn> host_progress(std::uint64_t version);
  // `version`'s host copy failed: ends every fetch of it that still has chunks to send.
  std::vector<Withdrawn> host_failed(std::uint64_t version, const std::string& error);

  // A chunk send finished. A success is progress: the fetch's lease is renewed for another
  // lease_timeout, so a transfer that keeps moving is never abandoned however long it takes.
  // True the first time a send of that fetch fails.
  bool on_send_done(const std::string& routing_id, std::uint64_t fetch_id, bool ok, Clock::time_point now);

  struct AckOutcome {
    bool known = false;  // the ack matched a fetch in flight, or one whose lease lapsed
    bool ok = false;
    bool after_lease = false;  // the fetch's lease had lapsed: the consumer got it all the same
    Delivery delivery;   // when ok
  };
  AckOutcome on_ack(const std::string& routing_id, const protocol::Ack& ack, const std::string& consumer_name,
                    Clock::time_point now);

  // Fetches answered before their version's digests existed: (routing id, fetch id) of each,
  // now marked as sent.
  std::vector<std::pair<std::string, std::uint64_t>> take_awaiting_digests(std::uint64_t version);

  // The consumer is gone: cancels its transfers and ends its leases. Returns how many of its
  // fetches ended undelivered without a send failure already reported for them.
  std::size_t drop(const std::string& routing_id);
  // Whether the consumer has a fetch under way (whose transfers may still be posted).
  bool serving(const std::string& routing_id) const;
  // A lease lapsed (SnapshotStore::take_expired): abandons the fetch that held it, but keeps what
  // its ack needs, so that a consumer that installs the version anyway (UCX went on sending)
  // is counted as delivered, not as abandoned.
  void expired(const SlotPool::Lease& lease);

 private:
  struct Fetch {
    std::uint64_t lease_id = 0;
    std::uint64_t version = 0;
    bool awaiting_digests = false;
    std::size_t bytes = 0;
    std::size_t transport = 0;  // the consumer's, in the set
    std::vector<transport::TransferId> transfers;
    bool failed = false;
    // Two-sided fetches send `blocks` (every chunk, or a delta's changed ones) in order:
    // blocks[0, next) are posted; the rest wait for the host copy (a device version being
    // staged). `region` is the leased slot's, valid while leased.
    transfer::ChunkPlan plan;
    std::vector<std::uint32_t> blocks;
    std::size_t next = 0;
    transport::PeerId peer = 0;
    const transport::MemoryRegion* region = nullptr;
  };
  // Posts the chunks that lie within the first `host_bytes` of the version. Throws what the
  // transport's post_send throws (the chunks posted before stay posted).
  void post_sends(const std::string& routing_id, std::uint64_t fetch_id, Fetch& fetch, std::uint64_t host_bytes);
  // Calls visit(routing_id, fetch_id, fetch) for each two-sided fetch of `version` with chunks
  // still to post; a fetch for which it returns false is erased.
  template <typename Visit>
  void for_each_unsent(std::uint64_t version, Visit&& visit);
  // Ends a fetch whose remaining chunks will not be sent: cancels its sends, releases its lease.
  Withdrawn withdraw(const std::string& routing_id, std::uint64_t fetch_id, Fetch& fetch, const std::string& why);
  void cancel(const Fetch& fetch);

  SnapshotStore& store_;
  const transport::TransportSet& transports_;
  const std::uint64_t incarnation_;
  const Clock::duration lease_timeout_;
  SendCompletion on_send_;
  std::uint64_t chunk_option_ = 32u << 20;
  // Announced, not yet published: more than one while device versions are still staged.
  std::set<std::uint64_t> upcoming_;
  std::map<std::string, protocol::FetchRequest> parked_;                 // by routing id: one each
  std::map<std::string, protocol::FetchRequest> parked_for_digests_;     // by routing id: one each
  std::map<std::string, std::map<std::uint64_t, Fetch>> fetches_;       // routing id -> fetch id
  // Fetches whose lease lapsed, awaiting a late ack: the newest kMaxLapsed of each consumer.
  struct Lapsed {
    std::uint64_t version = 0;
    std::size_t bytes = 0;
  };
  static constexpr std::size_t kMaxLapsed = 8;
  std::map<std::string, std::map<std::uint64_t, Lapsed>> lapsed_;       // routing id -> fetch id
};

}  // namespace modelcast::producer
