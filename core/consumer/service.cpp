#include "core/consumer/service.h"

#include <algorithm>

#include "common/clock.h"
#include "common/host_identity.h"
#include "common/library_thread.h"
#include "common/shown_text.h"
#include "core/consumer/consumer_options.h"
#include "core/consumer/rank_assembler.h"
#include "core/wire/zmq_channel.h"

namespace modelcast::consumer {
ConsumerService::ConsumerService(ConsumerOptions options, ServiceHooks hooks)
    : options_(checked(std::move(options))),
      hooks_(std::move(hooks)),
      feeds_assembler_(hooks_.feeds_assembler),
      log_(log::get("consumer"), "model '" + options_.model_name + "': " + hooks_.said),
      link_(options_),
      offered_(std::make_unique<transport::TransportSet>(options_.transports, transport::Side::kConsumer)),
      store_(options_.buffers, options_.caller_buffers),
      fetch_([events = events_](const ChunkDone& done) { events->push(done); }, options_.memory != MemoryKind::kCuda),
      relay_([events = events_](const RelaySent& sent) { events->push(sent); }),
      shaper_(options_.conversions) {
  policy_.model = options_.model_name;
  policy_.limits.max_total_bytes = model_size_cap(options_);
  policy_.expected_layout = options_.expected_layout;
  policy_.producer = link_.pinned_key();
  if (options_.memory == MemoryKind::kCuda) {
    landing_ = std::make_unique<DeviceLanding>(*device::device_runtime(), options_.device, options_.buffers);
    target_ = std::make_unique<ShapingTarget>(*device::device_runtime(), options_.device, options_.buffers);
  } else {
    target_ = std::make_unique<ShapingTarget>(std::max(options_.buffers, options_.caller_buffers.size()));
  }
  service_ = library_thread("consumer service", [this] { service_loop(); });
}

ConsumerService::~ConsumerService() { stop(); }

// Pieces for an assembler need RankAssembler::kBuffersPerRank buffers whatever `buffers` says
// (2 is a whole model's least: one served, one receiving): with two, the first rank's service
// stopped for good once the assembler held both. Caller buffers are counted at the join
// (Consumer::Impl::join_ranks refuses fewer).
void ConsumerService::size_buffers() {
  const std::size_t count =
      feeds_assembler_ ? std::max(options_.buffers, RankAssembler::kBuffersPerRank) : options_.buffers;
  store_.set_buffer_count(count);
  if (landing_) landing_->set_buffer_count(count);
}

void ConsumerService::set_wants(std::vector<TensorWant> wants, std::uint64_t incarnation) {
  std::lock_guard lock(wants_mutex_);
  next_wants_ = std::move(wants);
  next_wants_run_ = incarnation;
}

void ConsumerService::stop() {
  request_stop();
  wait_stopped();
}

void ConsumerService::request_stop() {
  if (service_.joinable()) events_->push(Stop{});
}

void ConsumerService::wait_stopped() {
  if (service_.joinable()) service_.join();
}

void ConsumerService::service_loop() {
  guarded([&] { join(); });  // a join that fails is tried again when due (ProducerLink::join)
  for (;;) {
    zmq::socket_t* monitor = link_.monitor();
    zmq::pollitem_t items[3] = {{link_.dealer().handle(), 0, ZMQ_POLLIN, 0},
                                {nullptr, events_->fd(), ZMQ_POLLIN, 0},
                                {monitor ? monitor->handle() : nullptr, 0, ZMQ_POLLIN, 0}};
    zmq::poll(items, monitor ? 3 : 2, tick());
    if (monitor && (items[2].revents & ZMQ_POLLIN)) guarded([&] { on_monitor_events(); });
    if (items[1].revents & ZMQ_POLLIN) {
      bool stopping = false;
      for (auto& event : events_->drain()) {
        if (std::holds_alternative<Stop>(event)) {
          // At once: what arrives after it belongs to an abandoned fetch, never installed.
          if (!stopping) abandon_fetch("consumer shutting down", false);
          stopping = true;
        } else if (auto* sent = std::get_if<RelaySent>(&event)) {
          guarded([&] { on_relay_sent(*sent); });
        } else {
          guarded([&] { on_chunk(std::get<ChunkDone>(event)); });
        }
      }
      if (stopping) {
        guarded([&] { finish_abandoned_receives(); });
        guarded([&] { drain_exports(); });
        guarded([&] { link_.leave(); });
        return;
      }
    }
    if (items[0].revents & ZMQ_POLLIN) read_dealer();
    guarded([&] {
      check_producer_alive();
      check_transfer_deadline();
      maybe_fetch();
      pump_relays();
      if (hooks_.on_turn) hooks_.on_turn();
    });
  }
}

std::chrono::milliseconds ConsumerService::tick() const {
  return std::clamp(options_.producer_timeout / 8, std::chrono::milliseconds(10),
                    ProducerLink::kPingInterval / 2);
}

void ConsumerService::join() {
  // A producer that hears this join has forgotten any orders this consumer served (it forgets a
  // consumer before it asks it to join again): their sends stop and their buffers are unpinned.
  relay_.clear();
  caller_bytes_wanted_ = 0;  // another producer's versions may have another size
  auto memory = options_.memory == MemoryKind::kCuda ? transport::MemoryLocation::cuda(options_.device)
                                                     : transport::MemoryLocation::host();
  // Before the join goes out: its answer may come before this thread's next statement.
  count([](ConsumerStats& s) { s.producer_connected = false; });
  link_.join({options_.model_name, options_.consumer_name, offered_->offers(true), memory,
              host_id(), process_token(), session_, parse_delivery_path(options_.path), serves_peers(),
              options_.group, options_.group_size, options_.wants},
             Clock::now());
}

// After the producer died or restarted: fresh transports (a fresh UCX worker). On one host endpoints run without
// peer-failure handling (UCX offers shared memory only so), and a peer that dies there leaves
// the worker in an undefined state (seen: a UCX assertion when the next producer's data came
// in). Buffers that views or unfinished receives still hold keep the old transport alive.
void ConsumerService::rejoin_afresh(const std::string& why) {
  abandon_fetch(why, true);
  release_landed_host();
  prepared_host_.reset();  // registered with the transports going: relayed from no more
  try {
    offered_ = std::make_unique<transport::TransportSet>(options_.transports, transport::Side::kConsumer);
  } catch (const Error&) {
    // Short of descriptors or memory: the link is left unjoined, and the next try comes when a
    // join is due (check_producer_alive), not at every turn as a link still joined and silent.
    afresh_pending_ = why;
    link_.join_failed(Clock::now());
    count([](ConsumerStats& s) { s.producer_connected = false; });
    throw;
  }
  afresh_pending_.reset();
  offered_made_ = Clock::now();
  join();
}

void ConsumerService::reoffer_after_refusal(const protocol::JoinReply& reply) {
  // Only where the producer could not reach this consumer's address: after another refusal, a
  // join retried with the old address would find its transport gone.
  if (reply.refusal != protocol::Refusal::kBadRequest || !reply.error.starts_with(protocol::kUnreachableConsumer)) return;
  const auto now = Clock::now();
  if (now - offered_made_ < reoffer_wait_) return;
  offered_made_ = now;
  // Refused on, the next time waits twice as long: an address fresh transports do not make
  // reachable costs a few of them, not one every producer_timeout for ever. A join let in starts
  // it over.
  reoffer_wait_ = std::min<std::chrono::milliseconds>(2 * reoffer_wait_, std::chrono::minutes(10));
  // Not compared with the old ones: a UCX address names its worker, so fresh ones always differ.
  auto fresh = std::make_unique<transport::TransportSet>(options_.transports, transport::Side::kConsumer);
  log_.debug("no transport of this consumer's reaches the producer: transports made afresh for the next join");
  abandon_fetch("transports made afresh", true);
  release_landed_host();
  prepared_host_.reset();
  offered_ = std::move(fresh);
}

void ConsumerService::on_monitor_events() {
  auto news = link_.read_monitor();
  if (news.failed_handshakes) count([&](ConsumerStats& s) { s.failed_handshakes += news.failed_handshakes; });
  if (news.report) report(Error(ErrorCode::kAuthentication, *news.report));
  if (news.disconnected) {
    // A producer that stops says so just before its connections close: read first, so that the
    // close of one that said it stops is no loss (its word makes this link afresh already).
    read_dealer();
    if (link_.producer_said_it_stopped()) return link_.stopped_connection_closed();
    if (!link_.is_joined()) return;  // what was read made the link afresh already
    // ZeroMQ reconnects by itself, but the producer knows a consumer by its connection: a new
    // one is a stranger to it (and after a restart, so is everything else).
    log_.warn("connection to the producer lost; joining again");
    count([](ConsumerStats& s) { s.reconnects++; });
    rejoin_afresh("connection to the producer lost");
  }
}

// Replies and announcements, in the order the producer sent them. Handling one may replace the
// DEALER (every join gets a fresh one): what is left on the old one is the old link's.
void ConsumerService::read_dealer() {
  zmq::socket_t* dealer = &link_.dealer();
  while (dealer == &link_.dealer()) {
    auto parts = wire::receive(*dealer);
    if (!parts) break;
    guarded([&] { on_reply(*parts); });
  }
}

// Nothing answers a join where no producer runs (yet), or at a mistyped endpoint, and ZeroMQ
// says nothing either: said once per unanswered streak, in last_error and the log, as a state
// rather than an error (a consumer started before its producer is normal: no on_error). Five
// producer timeouts: 10 s by default, well past a producer that is merely starting or busy.
void ConsumerService::notice_unanswered_joins(Clock::time_point now) {
  const auto unanswered = link_.unanswered_for(now);
  // In milliseconds: five times a producer_timeout of over 58 years overflows nanoseconds.
  if (!unanswered || std::chrono::duration_cast<std::chrono::milliseconds>(*unanswered) < 5 * options_.producer_timeout ||
      !unanswered_said_.empty()) {
    return;
  }
  // A failed handshake is why nothing answers, and last_error says so already: "none runs
  // there" would be false (one does, and refused this consumer's key).
  if (link_.handshake_failing()) return;
  const std::string waited =
      "no answer from a producer at " + options_.producer_endpoint + " for " +
      std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(*unanswered).count()) + " ms: ";
  // Connections closed by the other end before any answer: something listens there.
  if (link_.mostly_closed_unanswered()) {
    unanswered_said_ = waited + "what listens there closed the connection before answering " +
                       std::to_string(link_.closed_unanswered()) + " of " + std::to_string(link_.sent_unanswered()) +
                       " join(s) (not a modelcast producer, or a producer at its connection limit closing "
                       "connections that have not joined); still asking";
  } else if (link_.producer_said_it_stopped()) {
    // Said at info: the end of training is how producers usually go, and nothing is wrong.
    unanswered_said_ = waited + "the one there said it stopped (the end of its run, or a restart); still asking";
    log_.info("{}", unanswered_said_);
    count([&](ConsumerStats& s) { s.last_error = unanswered_said_; });
    return;
  } else if (link_.joined_before()) {
    // The endpoint is right: a producer answered there (the end of training, a restart).
    unanswered_said_ = waited + "one answered there before; it stopped, is restarting, or the network drops the "
                                "joins; still asking";
  } else {
    unanswered_said_ =
        waited + "none runs there yet, the endpoint is wrong, or the network drops what it sends; still asking";
  }
  log_.warn("{}", unanswered_said_);
  count([&](ConsumerStats& s) { s.last_error = unanswered_said_; });
}

void ConsumerService::check_producer_alive() {
  auto now = Clock::now();
  notice_unanswered_joins(now);
  if (link_.join_due(now)) return afresh_pending_ ? rejoin_afresh(*afresh_pending_) : join();
  if (link_.ping_due(now)) {
    link_.send(protocol::Ping{link_.incarnation()});
    link_.pinged(now);
  }
  if (link_.silent(now)) {
    // This thread may just have been busy (allocating a large buffer takes a while): read
    // what the producer said meanwhile before judging it silent.
    read_dealer();
  }
  if (link_.silent(now)) {
    // Gone, or alive but no longer announcing to this consumer: it forgets a consumer whose
    // connection it closed or that it heard nothing from, and all of them when it restarts.
    log_.warn("no announcement from the producer for {} ms; joining again", options_.producer_timeout.count());
    count([](ConsumerStats& s) { s.reconnects++; });
    rejoin_afresh("producer lost");
  }
}

// A transfer the producer answered that stops making progress (its lease lapsed, a sender
// hung) is given up, so the consumer asks for the newest version again instead of waiting for
// ever; one that keeps progressing is waited for however long it takes.
void ConsumerService::check_transfer_deadline() {
  if (!fetch_.transfer_stalled(Clock::now(), options_.transfer_timeout)) return;
  // A relay that stopped sending is left: the producer serves this consumer itself next time.
  const std::string relay = fetch_.relay();
  if (auto abandoned = abandon_fetch("no transfer progress within " +
                                         std::to_string(options_.transfer_timeout.count()) + " ms" +
                                         (relay.empty() ? std::string() : " from relay '" + relay + "'"),
                                     true)) {
    if (!relay.empty()) {
      count([](ConsumerStats& s) { s.relay_faults++; });
      report(Error(ErrorCode::kTransport, "relay '" + relay + "' sent nothing of version " +
                                              std::to_string(abandoned->first.version) + " for " +
                                              std::to_string(options_.transfer_timeout.count()) +
                                              " ms; fetching it from the producer"));
    }
    send_ack(abandoned->first, abandoned->second, false, "transfer timed out",
             relay.empty() ? protocol::RelayFault::kNone : protocol::RelayFault::kStalled, /*again=*/true);
  }
}

// Dropped without on_error (nothing was rejected), but named in last_error: a consumer that
// stops receiving versions from a producer speaking another protocol must say why.
void ConsumerService::bad_message(const std::string& what) {
  if (auto note = bad_messages_logged_.admit(LogRate::Clock::now())) {
    log_.warn("dropped a bad control message: {}{}", what, *note);
  }
  count([&](ConsumerStats& s) {
    s.bad_messages++;
    s.last_error = "dropped a bad control message: " + what;
  });
}

std::optional<protocol::Message> ConsumerService::decode(const zmq::message_t& frame, const protocol::DecodeLimits& limits) {
  try {
    return protocol::decode({static_cast<const std::byte*>(frame.data()), frame.size()}, limits);
  } catch (const Error& e) {
    bad_message(e.what());
    return std::nullopt;
  }
}

void ConsumerService::on_announce(const protocol::Announce& announce) {
  // The producer announces to joined consumers only: one that arrives before this link's join
  // was answered says nothing about it.
  if (!link_.is_joined()) return;
  if (announce.stopping) {
    // Another incarnation's last word is no news of the producer this link joined.
    if (announce.incarnation == link_.incarnation()) on_producer_stopping(announce);
    return;
  }
  if (announce.incarnation != link_.incarnation()) {
    // A restarted producer: its old connection state is gone, so join it afresh.
    log_.info("producer restarted (incarnation {:016x}); joining again", announce.incarnation);
    return rejoin_afresh("producer restarted");
  }
  link_.heard(Clock::now());
  if (announce.group) return on_group_announce(announce);
  if (announce.version > newest_announced_) {
    newest_announced_ = announce.version;
    if (hooks_.on_announced) hooks_.on_announced(announce.incarnation, announce.step);
    count([&](ConsumerStats& s) {
      s.last_notify_latency = since_realtime(announce.publish_time_ns);
    });
  }
}

// The version served stays; joins go on (a producer restarted there is joined as a new run),
// and the silence is said once, at info (notice_unanswered_joins). The next join waits for the
// stopping producer's connection to close (ProducerLink::producer_stopping): sent at once, it
// would meet a control plane that is closing, and a handshake cut off there is an error. It
// comes with fresh transports, as after any producer that goes: its endpoints close under the
// worker.
void ConsumerService::on_producer_stopping(const protocol::Announce& announce) {
  std::uint64_t serving = 0;
  count([&](ConsumerStats& s) {
    s.producer_stopped = true;
    s.producer_connected = false;
    serving = s.current_version;
  });
  log_.info("the producer stopped (incarnation {:016x}, newest version {}: the end of its run, or a restart); "
            "serving version {} and asking {} for the next one",
            announce.incarnation, announce.version, serving, options_.producer_endpoint);
  abandon_fetch("the producer stopped", true);
  relay_.clear();  // the orders it gave end with it (as at any join)
  release_landed_host();
  prepared_host_.reset();
  afresh_pending_ = "the producer stopped";
  link_.producer_stopping(Clock::now());
}

void ConsumerService::on_reply(std::vector<zmq::message_t>& parts) {
  if (parts.size() != 1) return bad_message("reply with " + std::to_string(parts.size()) + " frames");
  auto message = decode(parts[0], {});
  if (!message) return;
  if (auto* announce = std::get_if<protocol::Announce>(&*message)) return on_announce(*announce);
  if (auto* join = std::get_if<protocol::JoinReply>(&*message)) return on_join_reply(*join);
  if (auto* fetch = std::get_if<protocol::FetchReply>(&*message)) return on_fetch_reply(*fetch);
  if (auto* order = std::get_if<protocol::RelayOrder>(&*message)) return on_relay_order(*order);
  if (auto* cancel = std::get_if<protocol::RelayCancel>(&*message)) return on_relay_cancel(*cancel);
  if (auto* digests = std::get_if<protocol::Digests>(&*message)) {
    try {
      return finish(fetch_.on_digests(*digests));
    } catch (const Error& e) {
      return bad_message(e.what());
    }
  }
  bad_message("unexpected message type on the request channel");
}

void ConsumerService::on_join_reply(const protocol::JoinReply& reply) {
  count([](ConsumerStats& s) { s.producer_stopped = false; });  // a producer answers there again
  if (!unanswered_said_.empty()) {
    // Answered at last: the wait is not left as the last error (any error said since stays).
    count([&](ConsumerStats& s) {
      if (s.last_error == unanswered_said_) s.last_error.clear();
    });
    unanswered_said_.clear();
  }
  if (!reply.ok) {
    link_.refused();
    // Said first: fresh transports that cannot be had (reoffer_after_refusal throws) must not
    // hide why the producer refused.
    report(Error(ErrorCode::kState, "producer refused to join: " + reply.error));
    return reoffer_after_refusal(reply);
  }
  reoffer_wait_ = options_.producer_timeout;
  auto chosen = offered_->find(reply.transport);
  if (!chosen) {
    link_.refused();
    return report(Error(ErrorCode::kTransport, "producer chose transport " + shown_text(reply.transport) +
                                                   ", which this consumer did not offer (" + offered_->names() + ")"));
  }
  // A one-sided device route reads straight into device buffers; every other route lands in
  // host buffers (a device consumer then copies each version to the device: DeviceLanding).
  bool into_device = reply.path == DeliveryPath::kCudaIpc && options_.memory == MemoryKind::kCuda;
  store_.use_transport(offered_->shared(*chosen), into_device ? transport::MemoryLocation::cuda(options_.device)
                                                              : transport::MemoryLocation::host());
  release_retired_receives();
  count([&](ConsumerStats& s) {
    s.transport = reply.transport;
    s.path = std::string(delivery_path_name(reply.path));
  });
  const std::uint64_t previous_incarnation = link_.incarnation();  // 0: none joined before
  bool new_producer = reply.incarnation != previous_incarnation;
  link_.joined(reply, Clock::now());
  // At every join: a producer restarted with other ranks, or none, changes what versions are.
  if (hooks_.on_ranks) feeds_assembler_ = hooks_.on_ranks(reply.rank, reply.rank_endpoints);
  size_buffers();
  count([](ConsumerStats& s) { s.producer_connected = true; });
  if (new_producer) {  // version numbers restart with a new producer
    rejected_.clear();
    rejections_in_a_row_ = 0;
    failures_in_a_row_ = 0;
    producer_read_failed_version_ = 0;
    allocation_failures_ = 0;
    group_committed_ = 0;
    group_gave_up_said_ = 0;
  }
  // A member that joins again is a new member to its group: what it had prepared counted for
  // its old place, and is fetched again if the group still wants it.
  if (prepared_) {
    prepared_.reset();
    prepared_host_.reset();
    count([](ConsumerStats& s) { s.prepared_version = 0; });
  }
  // A group member fetches only what its group's announcements name (the producer sends one
  // right after this reply): the newest version may not be the group's next, and a version
  // fetched outside the group's round would never be counted toward a commit.
  newest_announced_ = options_.group.empty() ? reply.latest_version : 0;
  // Versions arrive as this producer's snapshots (one rank's, with ranks): the first one's
  // buffer can be made now, while nothing arrives; never past what this consumer takes.
  store_.allocate_ahead(reply.model_bytes, policy_.limits.max_total_bytes);
  // Caller buffers are checked against the model only here: with some too small and others
  // not, each reply could find none free that fits, the producer cut the connection, and the
  // consumer joined again, for good, saying nothing. (With none that fits, the version's size is
  // refused and said already.) Said once per model size.
  if (!options_.caller_buffers.empty() && reply.model_bytes != caller_buffers_said_for_) {
    std::size_t small = 0, smallest = 0;
    for (const auto& buffer : options_.caller_buffers) {
      if (buffer.size() >= reply.model_bytes) continue;
      smallest = small++ == 0 ? buffer.size() : std::min(smallest, buffer.size());
    }
    if (small > 0 && small < options_.caller_buffers.size()) {
      caller_buffers_said_for_ = reply.model_bytes;
      report(Error(ErrorCode::kResource,
                   std::to_string(small) + " of the " + std::to_string(options_.caller_buffers.size()) +
                       " caller buffers (the smallest " + std::to_string(smallest) + " bytes) cannot hold model '" +
                       options_.model_name + "' of " + std::to_string(reply.model_bytes) +
                       " bytes: every caller buffer must hold the whole model"));
    }
  }
  // The incarnation tells a restarted producer's versions (numbered afresh) from the last run's.
  log_.info("joined at {} over {} ({}; producer incarnation {:016x}{}; latest version {})", options_.producer_endpoint,
            reply.transport, delivery_path_name(reply.path), reply.incarnation,
            new_producer && previous_incarnation != 0 ? ", a new producer run" : "", reply.latest_version);
}

void ConsumerService::report(const Error& error) {
  // Named: a process may hold consumers of several models (modelcastd does), and this line is
  // the one every error gets (modelcastd leaves on_error to its own reports).
  if (auto note = errors_logged_.admit(error.what(), RepeatRate::Clock::now())) {
    log_.error("{}{}", error.what(), *note);
  }
  {
    // The newest error even where its text is the one before (a refusal said again after
    // another part of a sharded consumer said something else): count() sees no change then.
    std::lock_guard lock(mutex_);
    stats_.last_error = error.what();
    last_error_order_ = next_error_order();
  }
  if (options_.on_error) options_.on_error(error);
}

}  // namespace modelcast::consumer
