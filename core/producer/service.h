// The producer's service thread: the one loop that reads requests, handles events and sends
// every control message (replies, announcements, digests). It asks the stages (Membership,
// FetchServer, SnapshotStore) what to do and sends what they return.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include <zmq.hpp>

#include "common/clock.h"
#include "common/event_queue.h"
#include "common/log_rate.h"
#include "core/model/manifest.h"
#include "core/producer/control_plane.h"
#include "core/producer/digest_order.h"
#include "core/producer/fetch_server.h"
#include "core/producer/group_commit.h"
#include "core/producer/membership.h"
#include "core/producer/snapshot_store.h"
#include "modelcast/producer.h"
#include "transports/transport.h"

namespace spdlog {
class logger;
}

namespace modelcast::producer {

// Events for the service thread, from the trainer's thread, the digest thread and transfer
// completions.
// publish() has a slot and a version number and is about to copy: announce it now, so the
// notification does not wait for the copy. Fetches for it wait until SnapshotTaken.
struct SnapshotStarted {
  std::uint64_t version;
  std::int64_t step;
  std::int64_t publish_time_ns;
};
struct SnapshotTaken {
  std::size_t slot;
  Manifest manifest;  // digests filled in only when digests_ready
  std::chrono::steady_clock::time_point called_at;
  // A device snapshot, hashed on the device while it was staged, or a host snapshot that
  // publish() hashed as it copied (block_digests).
  bool digests_ready = false;
  // kReady: a host snapshot. kPending: a device snapshot whose host copy follows (HostStaged).
  // kNotCopied: a device snapshot copied to the host only once a two-sided fetch asks for it.
  SnapshotStore::HostState host = SnapshotStore::HostState::kReady;
  std::vector<std::uint64_t> block_digests;  // digests_ready, a host snapshot
};
// The staging thread has copied the first `bytes` of a device snapshot to its host slot: the
// chunks of two-sided fetches that lie within them may be sent.
struct HostProgress {
  std::size_t slot;
  std::uint64_t version;
  std::uint64_t bytes;
};
// The host copy of a device snapshot is done (or failed: `error`).
struct HostStaged {
  std::size_t slot;
  std::uint64_t version;
  std::string error;
};
// A device snapshot that could not be staged: its slot goes back, the version is never served.
struct SnapshotFailed {
  std::size_t slot;
  std::uint64_t version;
  std::string error;
};
struct SendDone {
  std::string routing_id;
  std::uint64_t fetch_id;
  bool ok;
  std::string error;
};
struct PeerFailed {
  std::size_t transport;  // index into the TransportSet
  transport::PeerId peer;
  std::string error;
};
struct DigestsReady {
  std::size_t slot;
  std::uint64_t version;
  std::vector<std::uint64_t> digests;        // per tensor: a device version's (pmix64) only
  std::vector<std::uint64_t> block_digests;  // per block: a host version's only
};
// The snapshot slots exist now, at `location`: routes are chosen for that memory from here on.
struct SlotsAllocated {
  transport::MemoryLocation location;
};
struct Stop {};
using Event = std::variant<SnapshotStarted, SnapshotTaken, SnapshotFailed, HostProgress, HostStaged, SendDone, PeerFailed,
                           DigestsReady, SlotsAllocated, Stop>;

// Counters the service thread updates and any thread reads. A lease that ends and the counter
// that says how it ended (leases_expired, deliveries) change together under the box's lock, and
// stats() reads the live lease count under the same lock, so no reader sees a lease gone and
// not yet counted. Lock order: the box, then the SnapshotStore.
class StatsBox {
 public:
  template <typename Mutate>
  void update(Mutate&& mutate) {
    {
      std::lock_guard lock(mutex_);
      mutate(stats_);
    }
    changed_.notify_all();
  }
  ProducerStats snapshot() const {
    std::lock_guard lock(mutex_);
    return stats_;
  }
  // The counters, completed by `read` under the same lock (state they must agree with).
  template <typename Read>
  ProducerStats snapshot_with(Read&& read) const {
    std::lock_guard lock(mutex_);
    ProducerStats copy = stats_;
    read(copy);
    return copy;
  }
  // False after `timeout`, or once waits are cancelled.
  bool wait_for_consumers(std::size_t count, std::chrono::milliseconds timeout) const {
    std::unique_lock lock(mutex_);
    changed_.wait_until(lock, deadline_after(timeout), [&] { return waits_cancelled_ || stats_.consumers >= count; });
    return !waits_cancelled_ && stats_.consumers >= count;
  }
  void cancel_waits() {
    update([&](ProducerStats&) { waits_cancelled_ = true; });
  }
  bool waits_cancelled() const {
    std::lock_guard lock(mutex_);
    return waits_cancelled_;
  }

 private:
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  ProducerStats stats_;
  bool waits_cancelled_ = false;
};

class ProducerService {
 public:
  using Clock = std::chrono::steady_clock;

  // Every reference must outlive the service.
  ProducerService(const ProducerOptions& options, std::uint64_t incarnation, SnapshotStore& store,
                  const transport::TransportSet& transports, ControlPlane& control, StatsBox& stats,
                  std::shared_ptr<spdlog::logger> log);

  EventQueue<Event>& events() { return events_; }
  // The service thread: returns after a Stop event.
  void run();
  // Set before the first publish: where new snapshots are hashed (DigestsReady comes back).
  void set_digest_submit(std::function<void(std::size_t slot, std::uint64_t version)> submit) {
    submit_digests_ = std::move(submit);
  }
  // Optional, set before the first publish: told each version once its digests are in (or at
  // once without integrity), so persisted bytes are the ones consumers verify.
  void set_persist(std::function<void(std::uint64_t version)> persist) {
    persist_ = std::move(persist);
    refresh_host_copies();
  }
  // Set before the first publish: has `version`, published as HostState::kNotCopied in `slot`,
  // copied to its host slot (HostProgress and HostStaged come back). Service thread.
  void set_host_copy(std::function<void(std::size_t slot, std::uint64_t version)> copy) {
    host_copy_ = std::move(copy);
  }
  // Any thread: whether a device version published now should be copied to the host at once
  // (a joined consumer receives over a two-sided transport, or versions are persisted) rather
  // than when a two-sided fetch first asks for it.
  bool host_copies_wanted() const { return host_copies_wanted_.load(std::memory_order_relaxed); }
  // Relayed fetches under way (FetchServer::relayed_in_flight), as of the loop's last turn. Any
  // thread: stats() adds them to the leased ones for fetches_in_flight.
  std::size_t relayed_in_flight() const { return relayed_in_flight_.load(std::memory_order_relaxed); }

 private:
  // Drops the consumers whose control connection closed (connection_cap.h reads the events).
  void drop_closed_connections();
  // Closes control connections past the cap (connection_cap.h), sparing joined ones.
  void cap_connections();
  void reply(const std::string& routing_id, const protocol::Message& message);
  void send_outgoing();
  void close_cut_off();
  void announce();
  // The last announcement, as the service stops (Announce::stopping).
  void say_stopping();
  static constexpr std::chrono::milliseconds kStoppingLinger{250};
  // To every joined consumer; a group member hears its group's target and state instead of the
  // newest version (GroupCommit).
  void announce(const protocol::Announce& announcement);
  // To the members of groups whose state changed, at once.
  void announce_group_changes();
  // One encoded message to one connection; never throws (a message that cannot go out is lost,
  // as one to a full queue is).
  void send_encoded(const std::string& routing_id, std::span<const std::byte> bytes);
  void on_event(SnapshotStarted& e);
  void on_event(SnapshotTaken& e);
  void on_event(SnapshotFailed& e);
  void on_event(HostProgress& e);
  void on_event(HostStaged& e);
  void withdraw(const std::vector<FetchServer::Withdrawn>& withdrawn);
  void on_event(SlotsAllocated& e);
  void on_event(DigestsReady& e);
  void digests_in(DigestsReady& e);  // signs, persists and answers: in version order
  void on_event(SendDone& e);
  void on_event(PeerFailed& e);
  void on_event(Stop&) {}
  void drop_consumer(const std::string& routing_id);
  // The same, telling the consumer why (it joins again at once).
  void drop_consumer(const std::string& routing_id, const std::string& why);
  // drop_consumer() that keeps the record's transport connection and returns the record.
  std::optional<ConsumerRecord> forget_consumer(const std::string& routing_id);
  void drop_silent_consumers();
  void expire_leases();
  void on_request(std::vector<zmq::message_t>& parts);
  void bad_message(const std::string& what);
  // `connection_fd`: the descriptor the join came in on (the connection cap spares it).
  void on_join(const std::string& routing_id, const std::string& key, int connection_fd,
               const protocol::JoinRequest& join);
  // Chooses the consumer's transport and connects to it, or takes over the connection of an
  // earlier record of the same consumer at the same address (disconnecting the others); fills
  // the reply's transport and path. Throws Error naming why no transport fits or the chosen one
  // cannot reach the consumer (the earlier records' connections are closed then too).
  ConsumerRecord admit(const protocol::JoinRequest& join, protocol::JoinReply& answer,
                       std::vector<ConsumerRecord> earlier);
  void on_fetch(const std::string& routing_id, const protocol::FetchRequest& request);
  void on_ack(const std::string& routing_id, const protocol::Ack& ack);

  const ProducerOptions& options_;
  const std::uint64_t incarnation_;
  const std::string host_id_;
  SnapshotStore& store_;
  const transport::TransportSet& transports_;
  const std::vector<transport::TransportOffer> offers_;  // this side of every negotiation
  ControlPlane& control_;
  StatsBox& stats_;
  std::shared_ptr<spdlog::logger> log_;
  // What peers can cause at will is logged at most once per 10 s each (counted every time).
  LogRate refusals_logged_, bad_messages_logged_, refused_joins_logged_, asked_again_logged_;
  // A consumer that rejects every version (a layout it does not expect): once per 10 s each
  // (by routing id; at most 256 texts remembered).
  RepeatedLines rejections_logged_;
  EventQueue<Event> events_;
  Membership membership_;
  // Device versions whose host copy is still being made, and the pin that keeps each slot.
  std::map<std::uint64_t, std::uint64_t> host_staging_;
  // Where the snapshot slots are (host until a device producer allocates its device slots).
  transport::MemoryLocation slots_ = transport::MemoryLocation::host();
  FetchServer fetches_;
  GroupCommit groups_;
  std::function<void(std::size_t, std::uint64_t)> submit_digests_;
  DigestOrder<DigestsReady> digest_order_;
  std::function<void(std::uint64_t)> persist_;
  std::function<void(std::size_t, std::uint64_t)> host_copy_;
  // Written by the service thread on joins and departures (refresh_host_copies), read by the
  // trainer's publish(). A stale read costs nothing but time: a version published without its
  // host copy gets one when a two-sided fetch asks.
  std::atomic<bool> host_copies_wanted_{false};
  std::atomic<std::size_t> relayed_in_flight_{0};  // written by the service thread each turn
  void refresh_host_copies();
  // Has the host copies the fetch server started made (take_host_copies), holding their slots.
  void start_host_copies();
  std::size_t evicted_unlogged_ = 0;  // cap_connections(): evictions not logged yet
  bool cap_due_ = false;  // connection events were read and the cap not enforced since
  Clock::time_point next_eviction_log_{};
};

}  // namespace modelcast::producer
