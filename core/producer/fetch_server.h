// Serves fetches: decides each request, leases the version, posts the chunk sends, and ends
// the fetch on the consumer's ack, a send failure, lease expiry or the consumer's departure.
// A lease lapses after lease_timeout without progress (no chunk send completing), not after
// lease_timeout from the fetch. One-sided routes (the consumer reads the slot) show the
// producer no progress: their lease runs from the fetch, which suits the same-host device
// copies they are.
// Relays (ProducerOptions::relay_fanout): a fetch that RelayPlanner gives to another consumer
// is answered with the manifest and the relay's name (on a one-sided route, once the relay has
// exported its buffer: protocol.h), and the relay gets a RelayOrder; the
// producer sends nothing for it and holds no lease (the version stays in its slot until
// publish() needs the slot, like any other). The fetch ends on the consumer's ack as usual.
// Each call returns what the service loop must send to the caller; messages for other
// consumers (relay orders and cancels, fetches withdrawn because their relay failed) are
// queued for take_outgoing(). This stage sends no control message itself.
// Sends outlive their fetch: a fetch that ends (acked, lapsed, revoked, refused, withdrawn,
// its consumer gone) while sends from its slot are in flight leaves the slot held
// (SlotPool::set_sending) until each send reports its end. A transport may go on reading the
// slot until then, and cancelling a send does not end it (UCX cancels only receives); closing
// the connection does. So where the consumer will not take those sends any more (a lapse, a
// revocation, a refusal, a withdrawal), its connection is to be closed: take_cut_off() lists
// those consumers, and the service drops them (they join again). Not a refusal whose ack says
// the consumer takes and drops every chunk (Ack::discarded): each cut of a consumer on this host
// left a UCX endpoint and its shared-memory mapping on both sides for as long as their workers
// lived, and a consumer refusing every version used up the processes' mappings in days. Its
// sends drain instead, and the consumer is cut off only if they have not all ended kDiscardDrain
// after the ack (cut_stalled_drains): a consumer that says so and takes nothing, or takes its
// chunks slowly, is cut off as any refusal was. One such drain at a time per consumer.
// Service thread only (transfer completions reach it through the loop's event queue).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/producer/membership.h"
#include "core/producer/relay_planner.h"
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
              Clock::duration lease_timeout, SendCompletion on_send, std::size_t relay_fanout = 0);

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
  // Otherwise the reply to send; when ok, the sends are already posted. `group_target`: a
  // version the consumer's group is switching to (GroupCommit), served besides the newest.
  std::optional<protocol::FetchReply> start(const std::string& routing_id, const ConsumerRecord* consumer,
                                            const protocol::FetchRequest& request, Clock::time_point now,
                                            std::uint64_t group_target = 0);

  // More of `version`'s host copy exists (SnapshotStore::set_host_prefix, set_host_state): posts
  // the chunk sends of its fetches that it now covers.
  // A fetch answered while its version was still being copied to the host, whose remaining
  // chunks cannot be sent: the consumer is told with a refusal of the same fetch id.
  struct Withdrawn {
    std::string routing_id;
    protocol::FetchReply refusal;
    bool counts_as_failed = true;  // false: a send failure of the fetch was counted already
  };
  // Returns the fetches withdrawn because a send could not be posted.
  std::vector<Withdrawn> host_progress(std::uint64_t version);
  // Device versions whose host copy a two-sided fetch started (SnapshotStore::begin_host_copy:
  // they are kPending now), as (slot, version): the caller has each copied and reports the
  // progress as for any host copy. Emptied by the call.
  std::vector<std::pair<std::size_t, std::uint64_t>> take_host_copies();
  // `version`'s host copy failed: ends every fetch of it that still has chunks to send.
  std::vector<Withdrawn> host_failed(std::uint64_t version, const std::string& error);

  // A chunk send finished. A success is progress: the fetch's lease is renewed for another
  // lease_timeout, so a transfer that keeps moving is never abandoned however long it takes;
  // after the last, the lease waits for the ack (kAwaitingAck).
  // True the first time a send of that fetch fails: the fetch's one failed delivery (it is not
  // counted again however it ends).
  bool on_send_done(const std::string& routing_id, std::uint64_t fetch_id, bool ok, Clock::time_point now);

  struct AckOutcome {
    bool known = false;  // the ack matched a fetch in flight, or one whose lease lapsed
    bool ok = false;
    bool after_lease = false;  // the fetch's lease had lapsed: the consumer got it all the same
    std::string relay;   // the consumer that served the blocks; empty: the producer did
    bool relay_fault = false;  // that relay failed the fetch (it is passed over for a while)
    bool counts_as_failed = false;  // !ok, and no send failure of the fetch was counted before
    Delivery delivery;   // when ok
  };
  AckOutcome on_ack(const std::string& routing_id, const protocol::Ack& ack, const std::string& consumer_name,
                    Clock::time_point now);

  // Fetches answered before their version's digests existed: (routing id, fetch id) of each,
  // now marked as sent.
  std::vector<std::pair<std::string, std::uint64_t>> take_awaiting_digests(std::uint64_t version);

  // The consumer is gone: cancels its transfers and ends its leases; fetches it relayed are
  // withdrawn (queued for take_outgoing, where their refusals count them). Returns how many of
  // its own fetches ended undelivered without a send failure already reported for them.
  std::size_t drop(const std::string& routing_id);
  // A consumer joined (or joined again): what RelayPlanner needs of it.
  void joined(const ConsumerRecord& consumer);
  // A relay says it cannot serve an order: the fetch is withdrawn (queued). False for an order
  // that is not this relay's, or already over.
  bool relay_failed(const std::string& relay, const protocol::RelayFailed& failed);
  // A relay exported the buffer an order asked for: the fetch waiting for it is answered
  // (queued). False for an offer that is not this relay's, or that no fetch waits for.
  bool relay_offered(const std::string& relay, const protocol::RelayOffer& offer, Clock::time_point now);
  // Messages for consumers other than the one a call answered, in order.
  std::vector<std::pair<std::string, protocol::Message>> take_outgoing() { return std::exchange(outgoing_, {}); }
  const RelayPlanner& relays() const { return planner_; }
  // Whether the consumer has a fetch under way (whose transfers may still be posted), the drain
  // of a refusal it said it discards, or a cut-off not yet applied (take_cut_off): a join again
  // kept the connection, and with it sends the consumer need never take, cut off for no one.
  bool serving(const std::string& routing_id) const;
  // Relayed fetches under way: they hold no lease of the producer's, so the store's lease count
  // (the fetches the producer serves) leaves them out.
  std::size_t relayed_in_flight() const;
  // Ended fetches whose sends are still awaited: each holds its slot (SnapshotStore::holds_lease).
  std::size_t draining() const { return draining_.size(); }
  // A lease lapsed or a writer revoked it (SnapshotStore::take_expired): abandons the fetch that
  // held it. With sends still in flight the consumer is cut off (take_cut_off): the version will
  // not arrive. Otherwise every send has completed, and what its ack needs is kept, so that a
  // consumer that installs the version anyway counts as delivered.
  struct Expiry {
    bool cut_off = false;           // the fetch failed: its sends were still in flight
    bool counts_as_failed = false;  // cut off, and no send failure of it was counted before
  };
  Expiry expired(const SlotPool::Lease& lease);

  // Consumers whose connection must be closed to end the sends of a fetch that ended, each with
  // the refusal to send it first when it may still be waiting for that fetch.
  struct CutOff {
    std::string routing_id;
    std::size_t sends = 0;  // in flight when its fetch ended
    std::string why;
    std::optional<protocol::FetchReply> refusal;
  };
  std::vector<CutOff> take_cut_off() { return std::exchange(cut_off_, {}); }
  // Drains of refused fetches the consumer said it discards (Ack::discarded) with sends still
  // in flight kDiscardDrain after the ack: their consumers are cut off (take_cut_off), once each.
  void cut_stalled_drains(Clock::time_point now);
  // When cut_stalled_drains has something to do next; nothing while no such drain is under way.
  std::optional<Clock::time_point> next_stalled_drain() const;
  // A consumer that takes its chunks ends each send as it comes (a discard of a rendezvous send
  // moves no data): milliseconds. Longer than a publish waits for an ended lease's sends
  // (SnapshotStore::kDrainGrace), which is what bounds the trainer's wait, as for any refusal;
  // this bounds how long such a consumer stays joined with sends it will not take.
  static constexpr std::chrono::seconds kDiscardDrain{2};
  // Relays that never exported the buffer a fetch waited for (its consumer asked again): each
  // is passed over for a while, and the producer served that consumer itself.
  struct UnansweredRelay {
    std::string relay;     // its name
    std::string consumer;  // routing id
    std::uint64_t version = 0;
  };
  std::vector<UnansweredRelay> take_unanswered_relays() { return std::exchange(unanswered_relays_, {}); }

 private:
  struct Fetch {
    std::uint64_t lease_id = 0;
    std::uint64_t version = 0;
    // The consumer keeps parts of the model (its wants): it will hold only some blocks of the
    // version, so it is never chosen to relay it.
    bool in_part = false;
    bool awaiting_digests = false;
    std::size_t bytes = 0;
    std::size_t transport = 0;  // the consumer's, in the set
    std::vector<transport::TransferId> transfers;
    bool failed = false;  // a send failed: counted as a failed delivery then, and never again
    // When the version was published, kept here: a late ack comes after publish() may have
    // reused the slot, and the slot's own time with it.
    std::optional<Clock::time_point> published_at;
    // Two-sided fetches send `blocks` (every chunk, or a delta's changed ones) in order:
    // blocks[0, next) are posted; the rest wait for the host copy (a device version being
    // staged). `region` is the leased slot's, valid while leased.
    transfer::ChunkPlan plan;
    std::vector<std::uint32_t> blocks;
    std::size_t next = 0;
    std::size_t sent = 0;   // sends completed
    std::size_t ended = 0;  // sends that reported their end, completed or not
    bool sending = false;   // told the store: the lease holds its slot past its end until clear
    transport::PeerId peer = 0;
    const transport::MemoryRegion* region = nullptr;
    // A relayed fetch: the consumer serving it and its order (no lease, no sends here).
    std::string relay;
    std::uint64_t order_id = 0;
    // A one-sided relayed fetch: unanswered until the relay offers its buffer's export
    // (`reply` is the answer, less the region), then exported (the relay holds it pinned).
    bool awaiting_offer = false;
    bool exported = false;
    std::optional<protocol::FetchReply> reply;
  };
  // A fetch ended at the consumer's ack or departure: its relay, if any, is told to stop (an
  // exported one always, with whether the consumer installed the version).
  void end_relayed(const Fetch& fetch, bool tell_relay, bool delivered = false);
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
  std::size_t in_flight(const Fetch& fetch) const { return fetch.transfers.size() - fetch.ended; }
  // Tells the store whether the fetch still has sends in flight (see the file comment).
  void update_sending(Fetch& fetch);
  // A fetch is being erased: its sends still in flight are counted down in draining_ until they
  // end, and then its slot is let go. Returns how many were in flight.
  std::size_t retire(const std::string& routing_id, std::uint64_t fetch_id, const Fetch& fetch);
  // Whether the consumer has a drain of a fetch it discards whose deadline has not come (cut_at).
  bool discard_drain_of(const std::string& routing_id) const;
  // retire(), and the consumer is cut off when sends were in flight.
  void retire_and_cut_off(const std::string& routing_id, std::uint64_t fetch_id, const Fetch& fetch,
                          const std::string& why, std::optional<protocol::FetchReply> refusal);

  // A fetch whose sends have all completed holds its lease this long while its ack comes (see
  // on_send_done): in practice until the ack, the consumer's departure or a writer's need.
  static constexpr std::chrono::hours kAwaitingAck{1};
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
  std::vector<std::pair<std::size_t, std::uint64_t>> host_copies_;      // see take_host_copies
  std::map<std::string, std::map<std::uint64_t, Fetch>> fetches_;       // routing id -> fetch id
  // Fetches whose lease lapsed, awaiting a late ack: the newest kMaxLapsed of each consumer.
  struct Lapsed {
    std::uint64_t version = 0;
    std::size_t bytes = 0;
    bool failed = false;  // as Fetch's
    std::optional<Clock::time_point> published_at;
  };
  static constexpr std::size_t kMaxLapsed = 8;
  std::map<std::string, std::map<std::uint64_t, Lapsed>> lapsed_;       // routing id -> fetch id
  // Ended fetches with sends still in flight: (routing id, fetch id) -> lease and sends left.
  struct Draining {
    std::uint64_t lease_id = 0;
    std::size_t sends = 0;
    // A refused fetch whose consumer discards its chunks: it is cut off if sends are left at
    // this time. Unset: no such fetch, or its consumer was cut off or dropped already.
    std::optional<Clock::time_point> cut_at;
  };
  std::map<std::pair<std::string, std::uint64_t>, Draining> draining_;
  std::vector<CutOff> cut_off_;
  RelayPlanner planner_;
  std::uint64_t next_order_ = 1;
  std::vector<std::pair<std::string, protocol::Message>> outgoing_;
  std::vector<UnansweredRelay> unanswered_relays_;  // see take_unanswered_relays
};

}  // namespace modelcast::producer
