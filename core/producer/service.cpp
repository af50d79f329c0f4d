#include "core/producer/service.h"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "common/host_identity.h"
#include "common/shown_text.h"
#include "core/security/curve.h"
#include "core/security/curve_to_ed25519.h"
#include "core/wire/protocol.h"
#include "core/wire/zmq_channel.h"
#include "modelcast/error.h"

namespace modelcast::producer {

namespace {
// Control requests read in one turn of the service loop before its events get their turn: a
// few hundred microseconds of work, far more than real consumers send between two turns.
constexpr int kRequestsPerTurn = 256;

// The consumers the producer admits: max_consumers, less where the open-file limit cannot carry
// that many (ConnectionCap::joined_limit).
std::size_t consumer_limit(const ProducerOptions& options, ControlPlane& control) {
  return std::min(options.max_consumers, control.connections().joined_limit());
}
}  // namespace

ProducerService::ProducerService(const ProducerOptions& options, std::uint64_t incarnation, SnapshotStore& store,
                                 const transport::TransportSet& transports, ControlPlane& control, StatsBox& stats,
                                 std::shared_ptr<spdlog::logger> log)
    : options_(options),
      incarnation_(incarnation),
      host_id_(host_id()),
      store_(store),
      transports_(transports),
      offers_(transports.offers(false)),
      control_(control),
      stats_(stats),
      log_(std::move(log)),
      membership_(options.model_name, consumer_limit(options, control),
                  consumer_limit(options, control) < options.max_consumers ? "what its open-file limit leaves room for"
                                                                            : "max_consumers"),
      fetches_(store, transports, incarnation, options.lease_timeout,
               [this](const std::string& routing_id, std::uint64_t fetch_id, const transport::TransferResult& r) {
                 events_.push(SendDone{routing_id, fetch_id, r.ok, r.error});
               },
               options.relay_fanout),
      groups_(store, options.snapshot_slots, !options.persist.directory.empty(), consumer_limit(options, control)) {
  fetches_.set_chunk_option(options.transfer_chunk_bytes);
  if (const auto admitted = consumer_limit(options, control); admitted < options.max_consumers) {
    log_->warn("admitting at most {} consumers, not max_consumers {}: the open-file limit leaves room for no more "
               "(each costs the producer descriptors; raise the hard limit: ulimit -Hn, systemd's LimitNOFILE=)",
               admitted, options.max_consumers);
  }
}

void ProducerService::run() {
  auto next_heartbeat = Clock::now();
  for (;;) {
    auto now = Clock::now();
    if (now >= next_heartbeat) {
      announce();
      next_heartbeat = now + options_.heartbeat_interval;
    }
    auto wake = std::min({next_heartbeat, store_.next_expiry().value_or(next_heartbeat),
                          fetches_.next_stalled_drain().value_or(next_heartbeat)});
    auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(wake - Clock::now()).count();
    zmq::socket_t* zap = control_.authentication_socket();
    zmq::pollitem_t items[] = {{control_.router().handle(), 0, ZMQ_POLLIN, 0},
                               {nullptr, events_.fd(), ZMQ_POLLIN, 0},
                               {control_.connections().events().handle(), 0, ZMQ_POLLIN, 0},
                               {zap ? zap->handle() : nullptr, 0, ZMQ_POLLIN, 0}};
    zmq::poll(items, zap ? 4 : 3, std::chrono::milliseconds(std::max<long>(wait, 0) + 1));
    if (zap && (items[3].revents & ZMQ_POLLIN)) {
      control_.answer_authentication([this](const std::string& key) {
        if (auto note = refusals_logged_.admit(LogRate::Clock::now())) {
          log_->warn("refused a connection from key {}: not on the allow-list{}", security::describe_curve_key(key),
                     *note);
        }
        stats_.update([](ProducerStats& s) { s.refused_peers++; });
      });
    }
    if (items[1].revents & ZMQ_POLLIN) {
      for (auto& event : events_.drain()) {
        if (std::holds_alternative<Stop>(event)) return say_stopping();
        std::visit([this](auto& e) { on_event(e); }, event);
      }
    }
    if (items[0].revents & ZMQ_POLLIN) {
      // A bounded number a turn: a peer sending without pause would otherwise keep this loop
      // here, and snapshots (publish() waits for their slots), heartbeats and lease expiry with
      // it. The router queues fairly across connections, so real consumers' requests still come.
      for (int read = 0; read < kRequestsPerTurn; ++read) {
        auto parts = wire::receive(control_.router());
        if (!parts) break;
        on_request(*parts);
      }
    }
    // After the requests: a join already read makes its connection safe from eviction. A join
    // may have read the connection events already (on_join): those are capped here too.
    if ((items[2].revents & ZMQ_POLLIN) || cap_due_) {
      drop_closed_connections();
      cap_connections();
      cap_due_ = false;
    }
    expire_leases();
    drop_silent_consumers();
    send_outgoing();
    fetches_.cut_stalled_drains(Clock::now());
    close_cut_off();
    relayed_in_flight_.store(fetches_.relayed_in_flight(), std::memory_order_relaxed);
  }
}

// A consumer that dies (killed, crashed) without saying Leave has its control connection closed
// by its kernel: it is dropped then, not after the silence limit, so that its lease goes, the
// fetches it relays go to others at once, and it is chosen as a relay no more. Only consumers
// that spoke since their join: one that did not may still be waiting for the answer, and then
// sends its join again on a new connection, keeping its transport connection (on_join).
//
// Why the events before every join (on_join calls this): a descriptor is reused once closed, and
// the event of a connection that closed is queued before its descriptor is freed, so before any
// join on a connection that reuses it; read first, it cannot be taken for the new connection's.
void ProducerService::drop_closed_connections() {
  cap_due_ = true;  // the accepted connections read with them are counted, not yet capped
  for (int fd : control_.connections().read_events()) {
    for (const auto& routing_id : membership_.spoke_over(fd)) {
      // Info, as for a Leave: the Leave of a consumer that closed may be read after this event.
      log_->info("the control connection of consumer '{}' closed: dropping it", membership_.find(routing_id)->name);
      drop_consumer(routing_id);
    }
  }
}

void ProducerService::cap_connections() {
  auto& connections = control_.connections();
  auto enforced = connections.enforce(membership_.connection_fds());
  if (enforced.evicted == 0) return;
  // A flood would log a line per connection: the first time, and then a count every 10 s.
  evicted_unlogged_ += enforced.evicted;
  auto now = Clock::now();
  if (!enforced.first && now < next_eviction_log_) return;
  log_->warn("{} control connections open, the cap ({}, half the open-file limit): closed {} that had not joined, "
             "the oldest first",
             connections.open(), connections.cap(), evicted_unlogged_);
  evicted_unlogged_ = 0;
  next_eviction_log_ = now + std::chrono::seconds(10);
}

void ProducerService::reply(const std::string& routing_id, const protocol::Message& message) {
  wire::send(control_.router(), message, &routing_id);
}

// What the fetch server queued for consumers other than the one a request came from: relay
// orders and cancels, fetches withdrawn because their relay failed or left, and answers that
// waited for a relay's export.
void ProducerService::send_outgoing() {
  for (auto& [routing_id, message] : fetches_.take_outgoing()) {
    if (auto* refusal = std::get_if<protocol::FetchReply>(&message); refusal && !refusal->ok) {
      auto* consumer = membership_.find(routing_id);
      log_->warn("withdrew a relayed fetch of '{}': {}", consumer ? consumer->name : std::string("?"), refusal->error);
      stats_.update([](ProducerStats& s) { s.failed_deliveries++; });
    }
    try {
      reply(routing_id, message);
    } catch (const zmq::error_t& e) {
      log_->warn("could not send a relay message: {}", e.what());
    }
  }
}

// Consumers with sends in flight from a fetch that ended without them (FetchServer's file
// comment): closing the connection is what ends those sends, and with them the slot's hold (over
// TCP the transport closes it once they end, or by force after UcxOptions::busy_close_grace).
// The consumer is told first when it may still be waiting, and joins again.
void ProducerService::close_cut_off() {
  for (auto& cut : fetches_.take_cut_off()) {
    auto* consumer = membership_.find(cut.routing_id);
    if (!consumer) continue;  // already gone: its connection is closed
    log_->warn("closing the connection of '{}' ({}): {} send(s) from the slot were still in flight, and only "
               "closing stops them; it joins again",
               consumer->name, cut.why, cut.sends);
    if (cut.refusal) {
      try {
        reply(cut.routing_id, *cut.refusal);
      } catch (const zmq::error_t& e) {
        log_->warn("could not tell '{}': {}", consumer->name, e.what());
      }
    }
    drop_consumer(cut.routing_id, "its connection was closed");
    stats_.update([](ProducerStats& s) { s.connections_cut++; });  // after: the count says it is done
  }
}

void ProducerService::announce() {  // heartbeat: the newest published version
  auto [step, time] = store_.newest_step_and_time();
  announce(protocol::Announce{incarnation_, store_.newest_version(), step, time, std::nullopt});
}

// To every joined consumer, over the ROUTER (control_plane.h says why not a PUB socket). A
// consumer that is not reading has its copy dropped (ZMQ_SNDHWM) and hears the next one; one
// the producer has forgotten hears none and joins again after its producer_timeout.
void ProducerService::announce(const protocol::Announce& announcement) {
  auto bytes = protocol::encode(announcement);
  for (const auto& routing_id : membership_.routing_ids()) {
    if (auto told = groups_.announcement(routing_id)) {
      protocol::Announce to_member = announcement;
      to_member.version = told->first;
      to_member.group = told->second;
      send_encoded(routing_id, protocol::encode(to_member));
    } else {
      send_encoded(routing_id, bytes);
    }
  }
}

// The end of training is the usual way a producer goes: told, its consumers wait for the next
// one quietly instead of warning that they lost it. The router's linger (0 while the service
// runs: a send must never wait on a consumer) lets the word out when the control plane closes,
// bounded: a consumer that reads nothing delays the producer's close by at most that.
void ProducerService::say_stopping() {
  auto [step, time] = store_.newest_step_and_time();
  protocol::Announce last{incarnation_, store_.newest_version(), step, time, std::nullopt};
  last.stopping = true;
  announce(last);
  control_.router().set(zmq::sockopt::linger, static_cast<int>(kStoppingLinger.count()));
  log_->debug("told {} consumers that this producer stops", membership_.routing_ids().size());
}

void ProducerService::announce_group_changes() {
  auto members = groups_.take_changed();
  if (members.empty()) return;
  auto [step, time] = store_.newest_step_and_time();
  protocol::Announce base{incarnation_, store_.newest_version(), step, time, std::nullopt};
  for (const auto& routing_id : members) {
    auto told = groups_.announcement(routing_id);
    if (!told) continue;
    protocol::Announce to_member = base;
    to_member.version = told->first;
    to_member.group = told->second;
    send_encoded(routing_id, protocol::encode(to_member));
  }
}

void ProducerService::send_encoded(const std::string& routing_id, std::span<const std::byte> bytes) {
  try {
    control_.router().send(zmq::buffer(routing_id), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    (void)control_.router().send(zmq::buffer(bytes.data(), bytes.size()), zmq::send_flags::dontwait);
  } catch (const zmq::error_t& e) {
    log_->warn("could not send a control message: {}", e.what());
  }
}

void ProducerService::on_event(SnapshotStarted& e) {
  announce(protocol::Announce{incarnation_, e.version, e.step, e.publish_time_ns, std::nullopt});
  fetches_.expect(e.version);
}

void ProducerService::on_event(SnapshotTaken& e) {
  // Already announced. Fetches may start before the digests exist: the slot is pinned until
  // the digest thread is done, and the digests follow.
  std::uint64_t version = e.manifest.version;
  bool integrity = e.manifest.integrity;
  std::vector<std::uint64_t> digests;
  if (integrity && e.digests_ready && e.block_digests.empty()) {
    for (const auto& t : e.manifest.tensors) digests.push_back(t.digest);
  }
  store_.publish(e.slot, std::move(e.manifest), e.called_at, integrity, e.host);
  if (e.host == SnapshotStore::HostState::kPending) {
    // The staging thread still copies out of the device slot: no reuse until it is done.
    if (auto pinned = store_.pin(version, "(host staging)")) host_staging_[version] = pinned->lease_id;
  }
  if (integrity && !e.digests_ready) {
    submit_digests_(e.slot, version);
    digest_order_.hashing(version);
  }
  if (integrity && e.digests_ready) {
    // Signed and the slot unpinned before any fetch is answered, unless an older version's
    // digests are still to come (then with them).
    for (auto& ready : digest_order_.ready(
             version, DigestsReady{e.slot, version, std::move(digests), std::move(e.block_digests)})) {
      digests_in(ready);
    }
  }
  if (!integrity && persist_ && e.host == SnapshotStore::HostState::kReady) persist_(version);
  log_->debug("version {} published in slot {}", version, e.slot);
  groups_.published(version);
  announce_group_changes();
  for (auto& [routing_id, request] : fetches_.published(version)) on_fetch(routing_id, request);
}

void ProducerService::on_event(SnapshotFailed& e) {
  store_.cancel(e.slot);
  log_->error("version {} could not be snapshot and is not served: {}", e.version, e.error);
  stats_.update([](ProducerStats& s) { s.failed_snapshots++; });
  // Fetches parked for it are answered now: it is not held.
  for (auto& [routing_id, request] : fetches_.published(e.version)) on_fetch(routing_id, request);
}

void ProducerService::on_event(HostProgress& e) {
  store_.set_host_prefix(e.slot, e.bytes);
  withdraw(fetches_.host_progress(e.version));
}

void ProducerService::on_event(HostStaged& e) {
  store_.set_host_state(e.slot, e.error.empty());
  if (!e.error.empty()) {
    log_->error("version {} could not be copied to the host: only consumers reading device memory get it: {}",
                e.version, e.error);
    stats_.update([](ProducerStats& s) { s.failed_snapshots++; });
    withdraw(fetches_.host_failed(e.version, e.error));
  } else {
    stats_.update([](ProducerStats& s) { s.host_copies++; });
    withdraw(fetches_.host_progress(e.version));
  }
  // Considered while the staging pin still holds the slot (see DigestsReady).
  if (e.error.empty() && persist_) persist_(e.version);
  if (auto it = host_staging_.find(e.version); it != host_staging_.end()) {
    store_.unpin(it->second);
    host_staging_.erase(it);
  }
  // Fetches parked until the host copy existed are answered now (or refused, if it failed).
  for (auto& [routing_id, request] : fetches_.published(e.version)) on_fetch(routing_id, request);
}

// Fetches whose remaining chunks will not come: the consumer is told at once rather than left
// to time out, and each counts as a failed delivery.
void ProducerService::withdraw(const std::vector<FetchServer::Withdrawn>& withdrawn) {
  for (const auto& w : withdrawn) {
    auto* consumer = membership_.find(w.routing_id);
    log_->warn("withdrew a fetch of '{}': {}", consumer ? consumer->name : std::string("?"), w.refusal.error);
    reply(w.routing_id, w.refusal);
  }
  const auto failed = std::count_if(withdrawn.begin(), withdrawn.end(), [](const auto& w) { return w.counts_as_failed; });
  if (failed > 0) stats_.update([&](ProducerStats& s) { s.failed_deliveries += static_cast<std::uint64_t>(failed); });
}

// Consumers that joined before the tensors were known were routed for host slots: they join
// again (their next fetch is refused as not joined) and get a route for where the slots are.
void ProducerService::on_event(SlotsAllocated& e) {
  if (e.location == slots_) return;
  slots_ = e.location;
  for (const auto& routing_id : membership_.routing_ids()) drop_consumer(routing_id, "the slots moved");
}

void ProducerService::on_event(DigestsReady& e) {
  const std::uint64_t version = e.version;
  for (auto& ready : digest_order_.ready(version, std::move(e))) digests_in(ready);
}

void ProducerService::digests_in(DigestsReady& e) {
  // The digest lease is what keeps publish() from reusing the slot. set_digests() ends it, so the
  // slot is held over until the persist decision has pinned it: a publish() in between would
  // take it and leave the version due for writing with nothing to write from.
  std::optional<std::uint64_t> held;
  if (persist_) {
    if (auto pinned = store_.pin(e.version, "(persist decision)")) held = pinned->lease_id;
  }
  auto signature = store_.set_digests(e.slot, e.digests, e.block_digests, control_.signer());
  // Before the digests go out: a consumer that has verified this version knows it was considered.
  // A device version is written once its host copy exists (HostStaged).
  if (persist_ && store_.host_state(e.version) == SnapshotStore::HostState::kReady) persist_(e.version);
  if (held) store_.unpin(*held);
  for (const auto& [routing_id, fetch_id] : fetches_.take_awaiting_digests(e.version)) {
    reply(routing_id, protocol::Digests{fetch_id, e.version, e.digests, e.block_digests, signature});
  }
  // Delta fetches waited for the block digests, which are their delta.
  for (auto& [routing_id, request] : fetches_.digests_ready(e.version)) on_fetch(routing_id, request);
}

void ProducerService::on_event(SendDone& e) {
  if (!fetches_.on_send_done(e.routing_id, e.fetch_id, e.ok, Clock::now())) return;
  auto* consumer = membership_.find(e.routing_id);
  log_->warn("sending to '{}' failed: {}", consumer ? consumer->name : std::string("?"), e.error);
  stats_.update([](ProducerStats& s) { s.failed_deliveries++; });
}

void ProducerService::on_event(PeerFailed& e) {
  if (auto routing_id = membership_.find_peer(e.transport, e.peer)) {
    log_->warn("consumer '{}' lost: its transport connection failed ({}; the process may have exited, or its "
               "host or network gone); releasing its leases",
               membership_.find(*routing_id)->name, e.error);
    drop_consumer(*routing_id, "its transport connection failed");
  }
}


void ProducerService::drop_consumer(const std::string& routing_id) {
  if (auto record = forget_consumer(routing_id)) transports_.at(record->transport).disconnect(record->peer);
}

// A consumer dropped while it may be alive is told, or it would learn only from the silence,
// producer_timeout later (announcements go to joined consumers only).
void ProducerService::drop_consumer(const std::string& routing_id, const std::string& why) {
  drop_consumer(routing_id);
  protocol::FetchReply dropped;
  dropped.refusal = protocol::Refusal::kNotJoined;
  dropped.error = "the producer dropped this consumer (" + why + "); join again";
  send_encoded(routing_id, protocol::encode(dropped));
}

std::optional<ConsumerRecord> ProducerService::forget_consumer(const std::string& routing_id) {
  // A fetch the consumer took with it is a delivery that failed, whether or not a send
  // failure said so first (which of the two UCX reports first is a race).
  auto undelivered = fetches_.drop(routing_id);
  auto record = membership_.remove(routing_id);
  refresh_host_copies();
  if (auto committed = groups_.committed_of(routing_id); record && groups_.announcement(routing_id)) {
    log_->warn("consumer '{}' left its group, which stays on version {} until a member takes its place", record->name,
               committed);
  }
  groups_.left(routing_id);
  announce_group_changes();
  stats_.update([&](ProducerStats& s) {
    s.consumers = membership_.size();
    s.failed_deliveries += undelivered;
  });
  return record;
}

// Consumers ping at least every second; one silent this long has hung, or died where its
// connection's end did not reach the producer (a host or network gone). One that died on a live
// host had its connection closed (drop_closed_connections); across hosts UCX reports it too.
void ProducerService::drop_silent_consumers() {
  auto limit = std::max<Clock::duration>(options_.lease_timeout, std::chrono::seconds(5));
  for (const auto& routing_id : membership_.silent(Clock::now(), limit)) {
    log_->warn("consumer '{}' silent for over {} ms; dropping it", membership_.find(routing_id)->name,
               std::chrono::duration_cast<std::chrono::milliseconds>(limit).count());
    drop_consumer(routing_id, "it was silent");
  }
}

void ProducerService::expire_leases() {
  if (auto next = store_.next_expiry(); !next || *next > Clock::now()) return;
  std::vector<SlotPool::Lease> expired;
  stats_.update([&](ProducerStats& s) {
    expired = store_.take_expired(Clock::now());
    s.leases_expired += expired.size();
  });
  if (expired.empty()) return;
  for (const auto& lease : expired) {
    auto* consumer = membership_.find(lease.holder);
    const std::string name = consumer ? consumer->name : std::string("?");
    if (const auto expiry = fetches_.expired(lease); expiry.cut_off) {
      // Sends still in flight: the consumer is cut off (close_cut_off), and its slot stays held
      // until those sends have ended.
      log_->warn("lease of '{}' on version {} ended with sends in flight: the fetch failed", name, lease.version);
      if (expiry.counts_as_failed) stats_.update([](ProducerStats& s) { s.failed_deliveries++; });
    } else {
      // Every send had completed: the consumer may still install the version, and its ack counts.
      log_->warn("lease of '{}' on version {} ended while its ack was awaited: its slot may be reused "
                 "(a late ack still counts)",
                 name, lease.version);
    }
  }
}

void ProducerService::on_request(std::vector<zmq::message_t>& parts) {
  if (parts.size() != 2) return bad_message("request with " + std::to_string(parts.size()) + " frames (expected 2)");
  std::string routing_id = parts[0].to_string();
  protocol::Message message;
  try {
    message = protocol::decode({static_cast<const std::byte*>(parts[1].data()), parts[1].size()},
                               protocol::kRequestLimits);
  } catch (const Error& e) {
    // A consumer of the previous protocol is told why it cannot join, in words it decodes;
    // dropped silently, it would send its join again and again and never say why.
    if (auto version = protocol::foreign_version({static_cast<const std::byte*>(parts[1].data()), parts[1].size()})) {
      if (auto refusal = protocol::encode_version_refusal(*version)) send_encoded(routing_id, *refusal);
    }
    return bad_message(e.what());
  }
  // Whatever a request makes go wrong costs that request only: the trainer keeps training.
  try {
    auto* join = std::get_if<protocol::JoinRequest>(&message);
    if (auto* consumer = membership_.find(routing_id)) {
      consumer->last_seen = Clock::now();
      if (!join) consumer->spoke_since_join = true;
    }
    if (join) {
      on_join(routing_id, security::peer_key(parts[1]).value_or(""), zmq_msg_get(parts[1].handle(), ZMQ_SRCFD),
              *join);
    } else if (std::holds_alternative<protocol::Ping>(message)) {
      // last_seen is all a ping updates
    } else if (auto* leave = std::get_if<protocol::Leave>(&message)) {
      auto* consumer = membership_.find(routing_id);
      if (consumer && (leave->incarnation == incarnation_ || leave->incarnation == 0)) {
        log_->info("consumer '{}' left", consumer->name);
        drop_consumer(routing_id);
      }
    } else if (auto* fetch = std::get_if<protocol::FetchRequest>(&message)) {
      on_fetch(routing_id, *fetch);
    } else if (auto* ack = std::get_if<protocol::Ack>(&message)) {
      on_ack(routing_id, *ack);
    } else if (auto* failed = std::get_if<protocol::RelayFailed>(&message)) {
      if (membership_.find(routing_id) && fetches_.relay_failed(routing_id, *failed)) {
        log_->warn("relay '{}' could not serve a fetch: {}", membership_.find(routing_id)->name, failed->error);
      }
    } else if (auto* offer = std::get_if<protocol::RelayOffer>(&message)) {
      if (membership_.find(routing_id)) fetches_.relay_offered(routing_id, *offer, Clock::now());
    } else {
      bad_message("unexpected message type on the request channel");
    }
  } catch (const std::exception& e) {
    bad_message(std::string("request failed: ") + e.what());
  }
}

void ProducerService::bad_message(const std::string& what) {
  if (auto note = bad_messages_logged_.admit(LogRate::Clock::now())) {
    log_->warn("dropped a bad control message: {}{}", what, *note);
  }
  stats_.update([](ProducerStats& s) { s.bad_messages++; });
}

void ProducerService::on_join(const std::string& routing_id, const std::string& key, int connection_fd,
                              const protocol::JoinRequest& join) {
  drop_closed_connections();
  protocol::JoinReply answer;
  answer.incarnation = incarnation_;
  answer.model_bytes = store_.slot_bytes();
  auto decision = membership_.decide(routing_id, key, join);
  answer.refusal = decision.refusal;
  answer.error = decision.error;
  // A reconnecting member takes its old record's place in the group: that place counts as free
  // here, and is given up once the join is admitted (forget_consumer below). A refused join
  // leaves the old record a member, as it stays a joined consumer.
  if (decision.refusal == protocol::Refusal::kNone && !join.group.empty()) {
    if (auto why = groups_.refusal(join.group, join.group_size, decision.replaces); !why.empty()) {
      answer.refusal = protocol::Refusal::kBadRequest;
      answer.error = why;
    }
  }
  if (answer.refusal == protocol::Refusal::kNone) {
    // Earlier records of this consumer, whose connection it may keep. Not one with a fetch under
    // way: cancelling does not end UCX sends, closing the connection does, and sends left
    // posted would read a slot whose lease has ended.
    std::vector<ConsumerRecord> earlier;
    for (const auto& old : decision.replaces) groups_.left(old);  // its place is the new record's: not a departure
    for (const auto& old : decision.replaces) {
      if (fetches_.serving(old)) {
        drop_consumer(old);
      } else if (auto record = forget_consumer(old)) {
        earlier.push_back(std::move(*record));
      }
    }
    try {
      ConsumerRecord record = admit(join, answer, std::move(earlier));
      record.routing_id = routing_id;
      record.key = key;
      record.connection_fd = connection_fd;
      fetches_.joined(record);
      membership_.add(std::move(record));
      refresh_host_copies();
      if (!join.group.empty()) groups_.joined(routing_id, join.group, join.group_size);
      answer.ok = true;
      log_->info("consumer '{}' joined over {} ({})", join.consumer_name, answer.transport,
                 delivery_path_name(answer.path));
    } catch (const Error& e) {
      answer.error = e.what();
      if (answer.refusal == protocol::Refusal::kNone) answer.refusal = protocol::Refusal::kBadRequest;
    }
  }
  answer.latest_version = store_.newest_version();
  answer.rank = options_.rank;
  if (options_.rank == 0 && options_.rank_count > 1) answer.rank_endpoints = options_.rank_endpoints;
  stats_.update([&](ProducerStats& s) {
    s.consumers = membership_.size();
    if (!answer.ok) s.refused_joins++;
  });
  if (!answer.ok) {
    // The error may quote what the stranger sent (its transports, for one): shown escaped.
    if (auto note = refused_joins_logged_.admit(LogRate::Clock::now())) {
      log_->warn("refused a join from {}: {}{}", shown_text(join.consumer_name), printable_text(answer.error, 400),
                 *note);
    }
  }
  reply(routing_id, answer);
  announce_group_changes();  // after the reply: a member hears its group once joined
}

ConsumerRecord ProducerService::admit(const protocol::JoinRequest& join, protocol::JoinReply& answer,
                                      std::vector<ConsumerRecord> earlier) {
  // Whatever is not taken over below is closed, on every way out.
  struct CloseRest {
    const transport::TransportSet& transports;
    std::vector<ConsumerRecord>& records;
    ~CloseRest() {
      for (const auto& r : records) transports.at(r.transport).disconnect(r.peer);
    }
  } close_rest{transports_, earlier};
  transport::RouteQuery query;
  query.producer = slots_.kind;
  query.consumer = join.memory.kind;
  query.forced = join.path;
  query.distance = transport::distance_between(host_id_, process_token(), join.host_id, join.process);
  transport::Route route;
  try {
    route = transport::choose_route(offers_, join.offers, query);
  } catch (const Error&) {
    answer.refusal = protocol::Refusal::kNoTransport;
    throw;
  }
  answer.transport = offers_[route.producer_transport].name;
  answer.path = route.path;
  // A consumer the transport may not watch (a near one, reached by shared memory) is noticed
  // through its lease if it dies.
  bool detect_failure = transports_.at(route.producer_transport).detects_failure_at(query.distance);
  std::size_t t = route.producer_transport;
  const auto& address = join.offers[route.consumer_offer].address;
  ConsumerRecord record;
  record.name = join.consumer_name;
  record.session = join.session;
  record.host_id = join.host_id;
  record.process = join.process;
  record.serves_peers = join.serves_peers;
  record.memory = join.memory;
  record.wants = join.wants;
  record.transport = t;
  record.peer_address = address;
  record.last_seen = Clock::now();
  // A consumer that joins again from the same address (it gave up waiting for the reply to its
  // first join, or its control socket was replaced) keeps its connection (on_join passes only
  // records with no fetch under way). Closing an endpoint while it still wires up and opening a
  // second one to the same worker is a path into UCX 1.13 assertions.
  auto same = std::find_if(earlier.begin(), earlier.end(), [&](const ConsumerRecord& r) {
    return r.transport == t && r.peer_address == address;
  });
  if (same != earlier.end()) {
    record.peer = same->peer;
    earlier.erase(same);
    return record;
  }
  try {
    record.peer = transports_.at(t).connect(address, detect_failure,
                                            [this, t](transport::PeerId p, const std::string& error) {
                                              events_.push(PeerFailed{t, p, error});
                                            });
  } catch (const Error& e) {
    // A consumer closed (or its process gone) before its join was read has taken its address
    // with it (on this host, UCX's shared memory segment: shmat fails): said, as a producer's
    // log otherwise suggests a transport fault where a probe or a short script merely left.
    throw Error(e.code(), std::string(protocol::kUnreachableConsumer) + answer.transport + " address: " + e.what() +
                              " (or the consumer closed before its join was read)");
  }
  stats_.update([](ProducerStats& s) { s.connections_opened++; });
  return record;
}

void ProducerService::on_fetch(const std::string& routing_id, const protocol::FetchRequest& request) {
  auto answer =
      fetches_.start(routing_id, membership_.find(routing_id), request, Clock::now(), groups_.target_of(routing_id));
  for (const auto& unanswered : fetches_.take_unanswered_relays()) {
    auto* consumer = membership_.find(unanswered.consumer);
    log_->warn("relay '{}' never exported version {} for consumer '{}': passed over for {} s; the producer serves it",
               unanswered.relay, unanswered.version, consumer ? consumer->name : std::string("?"),
               RelayPlanner::kDistrustFor.count());
    stats_.update([](ProducerStats& s) { s.relay_faults++; });
  }
  start_host_copies();
  if (answer) reply(routing_id, *answer);
}

void ProducerService::start_host_copies() {
  for (const auto& [slot, version] : fetches_.take_host_copies()) {
    // As for a copy started at publish: the slot is not written again until HostStaged.
    if (auto pinned = store_.pin(version, "(host staging)")) host_staging_[version] = pinned->lease_id;
    log_->debug("version {}: a two-sided fetch asked for its host copy", version);
    host_copy_(slot, version);
  }
}

void ProducerService::refresh_host_copies() {
  bool wanted = static_cast<bool>(persist_);
  for (const auto& routing_id : membership_.routing_ids()) {
    const auto* consumer = membership_.find(routing_id);
    wanted = wanted || (consumer && transports_.at(consumer->transport).capabilities().two_sided);
  }
  host_copies_wanted_.store(wanted, std::memory_order_relaxed);
}

void ProducerService::on_ack(const std::string& routing_id, const protocol::Ack& ack) {
  auto* consumer = membership_.find(routing_id);
  if (!consumer) return;
  FetchServer::AckOutcome outcome;
  stats_.update([&](ProducerStats& s) {
    outcome = fetches_.on_ack(routing_id, ack, consumer->name, Clock::now());  // ends the lease
    if (!outcome.known) return;
    if (outcome.ok) {
      s.deliveries++;
      if (outcome.relay.empty()) {
        s.bytes_sent += outcome.delivery.bytes;
      } else {
        s.relayed_deliveries++;
        s.bytes_relayed += outcome.delivery.bytes;
      }
    } else {
      if (outcome.counts_as_failed) s.failed_deliveries++;
      if (outcome.relay_fault) s.relay_faults++;
    }
  });
  if (!outcome.known) return;
  // A relay fault is no verdict on the version: the consumer fetches it again from the producer.
  // Nor is a failure the consumer marks `again` (its transfer, a timeout, no free buffer): a
  // group keeps the version as its target (GroupCommit::acked).
  if (!outcome.relay_fault) {
    const std::uint64_t committed = groups_.committed_of(routing_id);
    groups_.acked(routing_id, ack.version, outcome.ok, ack.again);
    if (groups_.committed_of(routing_id) != committed) {
      // Debug: a group switches at every version, as a lone consumer installs one (said at debug too).
      log_->debug("group '{}' switches to version {} (the last of its members to hold it: consumer '{}')",
                  groups_.group_name_of(routing_id), groups_.committed_of(routing_id), consumer->name);
    } else if (!outcome.ok && !ack.again && groups_.announcement(routing_id)) {
      log_->warn("consumer '{}' rejected its group's next version {}: the group stays on version {}", consumer->name,
                 ack.version, committed);
    }
    announce_group_changes();
  }
  if (!outcome.ok) {
    if (outcome.relay_fault) {
      log_->warn("relay '{}' failed consumer '{}' on version {} ({}): passed over for {} s; the producer serves "
                 "'{}' itself",
                 outcome.relay, consumer->name, ack.version, ack.error, RelayPlanner::kDistrustFor.count(),
                 consumer->name);
      return;
    }
    // A consumer asks again at its own pace (one whose buffers are held asks until one is free):
    // one line per interval for all of them. A rejection is its own, but the same one again (a
    // consumer that refuses every version) is said once per interval for that consumer.
    const std::string line = fmt::format("consumer '{}' {} version {}{}: {}", consumer->name,
                                         ack.again ? "did not receive (and asks again for)" : "rejected",
                                         ack.version, outcome.after_lease ? " (after its lease lapsed)" : "",
                                         ack.error);
    const auto note = ack.again ? asked_again_logged_.admit(LogRate::Clock::now())
                                : rejections_logged_.admit(routing_id, line);  // two may share a name
    if (note) log_->warn("{}{}", line, *note);
    return;
  }
  if (outcome.after_lease) {
    log_->info("consumer '{}' installed version {} after its lease lapsed", consumer->name, outcome.delivery.version);
  }
  if (options_.on_delivery) options_.on_delivery(outcome.delivery);
}

}  // namespace modelcast::producer
