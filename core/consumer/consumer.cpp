// Consumer: see include/modelcast/consumer.h. A version's way in, one stage per file:
//   ProducerLink     join, announcements, pings, liveness; CurveZMQ and handshake failures
//   FetchClient      ask for the newest version, receive its chunks, hash them as they land
//   Verifier         manifest, limits, layout, chunk plan, signature, digests
//   VersionStore     receive buffers, the installed version, the swap readers see
// Only the service loop below sends control messages; the stages return what to send.
//
// Threads and what they own:
//  - reader threads call acquire()/wait_for_version(): VersionStore hands them views.
//  - the service thread owns the link, the fetch client and the store's buffers; it verifies
//    and installs versions.
//  - the transport's progress thread writes received bytes into a buffer no view refers to,
//    and its completions only push events.
// `mutex_` guards the stats.
#include "modelcast/consumer.h"

#include <algorithm>
#include <mutex>
#include <set>
#include <thread>
#include <variant>

#include <zmq.hpp>

#include "common/event_queue.h"
#include "common/host_identity.h"
#include "common/log.h"
#include "core/consumer/consumer_options.h"
#include "core/consumer/fetch_client.h"
#include "core/consumer/producer_link.h"
#include "core/consumer/verifier.h"
#include "core/consumer/version_store.h"
#include "core/wire/protocol.h"
#include "core/wire/zmq_channel.h"
#include "transports/transport_set.h"

namespace modelcast {
namespace {

using Clock = std::chrono::steady_clock;
using consumer::ChunkDone;

std::int64_t realtime_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct Stop {};
using Event = std::variant<ChunkDone, Stop>;

}  // namespace

class Consumer::Impl {
 public:
  explicit Impl(ConsumerOptions options)
      : options_(consumer::checked(std::move(options))),
        log_(log::get("consumer")),
        link_(options_),
        offered_(std::make_unique<transport::TransportSet>(options_.transports)),
        store_(options_.buffers, options_.caller_buffers),
        fetch_([events = events_](const ChunkDone& done) { events->push(done); }) {
    policy_.model = options_.model_name;
    policy_.limits.max_total_bytes = consumer::model_size_cap(options_);
    policy_.expected_layout = options_.expected_layout;
    policy_.producer = link_.pinned_key();
    service_ = std::thread([this] { service_loop(); });
  }

  ~Impl() {
    events_->push(Stop{});
    service_.join();
  }

  ModelView acquire() const { return store_.acquire(); }
  ModelView wait_for_version(std::uint64_t version, std::chrono::milliseconds timeout) const {
    return store_.wait_for(version, timeout);
  }
  ConsumerStats stats() const {
    std::lock_guard lock(mutex_);
    return stats_;
  }

 private:
  template <typename Mutate>
  void count(Mutate&& mutate) {
    std::lock_guard lock(mutex_);
    mutate(stats_);
  }

  // ---- service thread ------------------------------------------------------------------

  void service_loop() {
    join();
    for (;;) {
      zmq::socket_t* monitor = link_.monitor();
      zmq::socket_t* subscriber = link_.subscriber();
      zmq::pollitem_t items[4] = {{link_.dealer().handle(), 0, ZMQ_POLLIN, 0},
                                  {nullptr, events_->fd(), ZMQ_POLLIN, 0},
                                  {monitor ? monitor->handle() : nullptr, 0, ZMQ_POLLIN, 0},
                                  {subscriber ? subscriber->handle() : nullptr, 0, ZMQ_POLLIN, 0}};
      zmq::poll(items, subscriber ? 4 : monitor ? 3 : 2, tick());
      if (monitor && (items[2].revents & ZMQ_POLLIN)) guarded([&] { on_handshake_events(); });
      if (items[1].revents & ZMQ_POLLIN) {
        for (auto& event : events_->drain()) {
          if (std::holds_alternative<Stop>(event)) {
            abandon_fetch("consumer shutting down", false);
            return;
          }
          guarded([&] { finish(fetch_.on_chunk(std::get<ChunkDone>(event))); });
        }
      }
      if (items[0].revents & ZMQ_POLLIN) {
        while (auto parts = wire::receive(link_.dealer())) guarded([&] { on_reply(*parts); });
      }
      // A join reply just handled may have replaced the subscriber: poll results of the old
      // one no longer apply (and its socket is gone).
      if (subscriber && subscriber == link_.subscriber() && (items[3].revents & ZMQ_POLLIN)) {
        while (auto parts = wire::receive(*link_.subscriber())) guarded([&] { on_announce(*parts); });
      }
      guarded([&] {
        check_producer_alive();
        check_transfer_deadline();
        maybe_fetch();
      });
    }
  }

  // Nothing a peer sends may end the inference process: a failure while handling it is
  // reported (on_error, stats) and the last good version stays served.
  template <typename Step>
  void guarded(Step&& step) {
    try {
      step();
    } catch (const Error& e) {
      report(e);
    } catch (const zmq::error_t& e) {
      report(Error(ErrorCode::kTransport, std::string("control plane: ") + e.what()));
    } catch (const std::bad_alloc&) {
      abandon_fetch("out of memory", true);
      report(Error(ErrorCode::kResource, "out of memory while handling a message from the producer"));
    } catch (const std::exception& e) {
      report(Error(ErrorCode::kProtocol, std::string("while handling a message from the producer: ") + e.what()));
    }
  }

  std::chrono::milliseconds tick() const {
    return std::clamp(options_.producer_timeout / 8, std::chrono::milliseconds(10),
                      consumer::ProducerLink::kPingInterval / 2);
  }

  void join() {
    link_.join({options_.model_name, options_.consumer_name, offered_->offers(true), transport::MemoryLocation::host(),
                host_id(), process_token(), session_},
               Clock::now());
  }

  // After the producer died or restarted: fresh transports (a fresh UCX worker). On one host endpoints run without
  // peer-failure handling (UCX offers shared memory only so), and a peer that dies there leaves
  // the worker in an undefined state (seen: a UCX assertion when the next producer's data came
  // in). Buffers that views or unfinished receives still hold keep the old transport alive.
  void rejoin_afresh(const std::string& why) {
    abandon_fetch(why, true);
    offered_ = std::make_unique<transport::TransportSet>(options_.transports);
    join();
  }

  void on_handshake_events() {
    auto [failures, report_text] = link_.failed_handshakes();
    count([&](ConsumerStats& s) { s.failed_handshakes += failures; });
    if (report_text) report(Error(ErrorCode::kAuthentication, *report_text));
  }

  void check_producer_alive() {
    auto now = Clock::now();
    if (link_.join_due(now)) return join();
    if (link_.ping_due(now)) {
      link_.send(protocol::Ping{link_.incarnation()});
      link_.pinged(now);
    }
    if (link_.silent(now) && link_.subscriber()) {
      // This thread may just have been busy (allocating a large buffer takes a while): read
      // what the producer said meanwhile before judging it silent.
      while (auto parts = wire::receive(*link_.subscriber())) on_announce(*parts);
    }
    if (link_.silent(now)) {
      log_->warn("no word from the producer for {} ms; reconnecting", options_.producer_timeout.count());
      count([](ConsumerStats& s) { s.reconnects++; });
      rejoin_afresh("producer lost");
    }
  }

  // A transfer the producer answered but never finishes (its lease lapsed, a sender hung) is
  // given up, so the consumer asks for the newest version again instead of waiting for ever.
  void check_transfer_deadline() {
    if (!fetch_.transfer_overdue(Clock::now(), options_.transfer_timeout)) return;
    if (auto abandoned = abandon_fetch("no transfer progress within " +
                                           std::to_string(options_.transfer_timeout.count()) + " ms",
                                       true)) {
      send_ack(abandoned->first, abandoned->second, false, "transfer timed out");
    }
  }

  void bad_message(const std::string& what) {
    log_->warn("dropped a bad control message: {}", what);
    count([](ConsumerStats& s) { s.bad_messages++; });
  }

  std::optional<protocol::Message> decode(const zmq::message_t& frame, const protocol::DecodeLimits& limits) {
    try {
      return protocol::decode({static_cast<const std::byte*>(frame.data()), frame.size()}, limits);
    } catch (const Error& e) {
      bad_message(e.what());
      return std::nullopt;
    }
  }

  void on_announce(std::vector<zmq::message_t>& parts) {
    if (parts.size() != 2) return bad_message("announcement with " + std::to_string(parts.size()) + " frames");
    auto message = decode(parts[1], protocol::kAnnounceLimits);
    if (!message) return;
    auto* announce = std::get_if<protocol::Announce>(&*message);
    if (!announce) return bad_message("unexpected message type on the announcement channel");
    if (announce->incarnation != link_.incarnation()) {
      // A restarted producer: its old connection state is gone, so join it afresh.
      log_->info("producer restarted (incarnation {:016x}); joining again", announce->incarnation);
      return rejoin_afresh("producer restarted");
    }
    link_.heard(Clock::now());
    if (announce->version > newest_announced_) {
      newest_announced_ = announce->version;
      count([&](ConsumerStats& s) {
        s.last_notify_latency = std::chrono::nanoseconds(realtime_ns() - announce->publish_time_ns);
      });
    }
  }

  void on_reply(std::vector<zmq::message_t>& parts) {
    if (parts.size() != 1) return bad_message("reply with " + std::to_string(parts.size()) + " frames");
    auto message = decode(parts[0], {});
    if (!message) return;
    if (auto* join = std::get_if<protocol::JoinReply>(&*message)) return on_join_reply(*join);
    if (auto* fetch = std::get_if<protocol::FetchReply>(&*message)) return on_fetch_reply(*fetch);
    if (auto* digests = std::get_if<protocol::Digests>(&*message)) {
      try {
        return finish(fetch_.on_digests(*digests));
      } catch (const Error& e) {
        return bad_message(e.what());
      }
    }
    bad_message("unexpected message type on the request channel");
  }

  void on_join_reply(const protocol::JoinReply& reply) {
    if (!reply.ok) {
      link_.refused();
      return report(Error(ErrorCode::kState, "producer refused to join: " + reply.error));
    }
    auto chosen = offered_->find(reply.transport);
    if (!chosen) {
      link_.refused();
      return report(Error(ErrorCode::kTransport, "producer chose transport '" + reply.transport +
                                                     "', which this consumer did not offer (" + offered_->names() + ")"));
    }
    store_.use_transport(offered_->shared(*chosen));
    count([&](ConsumerStats& s) { s.transport = reply.transport; });
    bool new_producer = reply.incarnation != link_.incarnation();
    link_.joined(reply, Clock::now());
    if (new_producer) rejected_.clear();  // version numbers restart with a new producer
    newest_announced_ = reply.latest_version;
    log_->info("joined model '{}' at {} over {} ({}; latest version {})", options_.model_name,
               options_.producer_endpoint, reply.transport, delivery_path_name(reply.path), reply.latest_version);
  }

  // What we hold: a newer announced version of this incarnation, or any version of a new one.
  bool wants(std::uint64_t version) const {
    if (version == 0 || rejected_.count(version)) return false;
    auto current = store_.current();
    if (!current || current->manifest.incarnation != link_.incarnation()) return true;
    return version > current->manifest.version;
  }

  void maybe_fetch() {
    auto now = Clock::now();
    if (fetch_.reply_overdue(now, options_.producer_timeout)) {
      log_->warn("no answer to a fetch in {} ms; asking again", options_.producer_timeout.count());
      fetch_.forget();
    }
    if (!link_.is_joined() || fetch_.in_flight() || !wants(newest_announced_)) return;
    // Readers holding every buffer, or a refusal just now: wait for the next tick rather than
    // asking the producer again and again.
    if (now < retry_fetch_after_ || !store_.buffer_available()) return;
    link_.send(fetch_.begin(link_.incarnation(), newest_announced_, now));
  }

  void on_fetch_reply(const protocol::FetchReply& reply) {
    if (!fetch_.answers(reply)) return;  // a stale reply
    if (!reply.ok) {
      log_->debug("fetch refused: {}", reply.error);
      fetch_.forget();
      retry_fetch_after_ = Clock::now() + tick();
      if (reply.refusal == protocol::Refusal::kNotJoined || reply.refusal == protocol::Refusal::kStaleIncarnation) {
        join();
      }
      return;
    }
    const Manifest& manifest = reply.manifest;
    std::shared_ptr<detail::ReceiveBuffer> buffer;
    try {
      consumer::check_reply(policy_, reply);
      buffer = store_.take_buffer(manifest.total_bytes);
    } catch (const std::bad_alloc&) {
      return reject(manifest, reply.fetch_id, Error(ErrorCode::kResource, "cannot allocate " +
                                                        std::to_string(manifest.total_bytes) + " bytes for version " +
                                                        std::to_string(manifest.version)));
    } catch (const Error& e) {
      return reject(manifest, reply.fetch_id, e);
    }
    if (!buffer) {
      std::string why = options_.caller_buffers.empty()
                            ? "every receive buffer is held by a reader; will fetch the newest when one frees"
                            : "no caller buffer of " + std::to_string(manifest.total_bytes) + " bytes is free";
      log_->debug("{}", why);
      send_ack(manifest, reply.fetch_id, false, why);
      fetch_.forget();
      retry_fetch_after_ = Clock::now() + tick();
      return;
    }
    finish(fetch_.accept(reply, std::move(buffer), Clock::now()));
  }

  // A finished fetch: verified and installed, or rejected; acked either way.
  void finish(std::optional<consumer::FinishedFetch> done) {
    if (!done) return;
    if (!done->failure.empty()) {
      log_->warn("transfer of version {} failed: {}", done->manifest.version, done->failure);
      send_ack(done->manifest, done->fetch_id, false, done->failure);
      count([](ConsumerStats& s) { s.transfers_aborted++; });
      return;
    }
    try {
      auto current = store_.current();
      consumer::check_arrived(policy_, done->manifest, done->received, done->signature,
                              current ? &current->manifest : nullptr);
    } catch (const Error& e) {
      return reject(done->manifest, done->fetch_id, e);
    }
    auto installed = std::make_shared<detail::InstalledVersion>();
    installed->update_latency = std::chrono::nanoseconds(realtime_ns() - done->manifest.publish_time_ns);
    installed->manifest = std::move(done->manifest);
    installed->buffer = std::move(done->buffer);
    const Manifest& m = installed->manifest;
    // Stats first: a reader woken by the install sees them already counted.
    count([&](ConsumerStats& s) {
      s.current_version = m.version;
      s.versions_installed++;
      s.bytes_received += m.total_bytes;
      s.last_update_latency = installed->update_latency;
    });
    store_.install(installed);
    send_ack(m, done->fetch_id, true, {});
    log_->debug("installed version {} (step {})", m.version, m.step);
    if (options_.on_update) options_.on_update(ModelView(installed));
  }

  std::optional<std::pair<Manifest, std::uint64_t>> abandon_fetch(const std::string& why, bool counted) {
    if (!fetch_.in_flight()) return std::nullopt;
    auto abandoned = fetch_.abort();
    log_->warn("discarding the transfer{}: {}",
               abandoned ? " of version " + std::to_string(abandoned->first.version) : std::string(), why);
    if (counted) count([](ConsumerStats& s) { s.transfers_aborted++; });
    return abandoned;
  }

  // Counted and reported before the ack: the ack is what the outside world sees first.
  void reject(const Manifest& manifest, std::uint64_t fetch_id, const Error& error) {
    rejected_.insert(manifest.version);
    fetch_.forget();
    count([](ConsumerStats& s) { s.versions_rejected++; });
    report(error);
    send_ack(manifest, fetch_id, false, error.what());
  }

  void report(const Error& error) {
    log_->error("{}", error.what());
    count([&](ConsumerStats& s) { s.last_error = error.what(); });
    if (options_.on_error) options_.on_error(error);
  }

  void send_ack(const Manifest& manifest, std::uint64_t fetch_id, bool ok, const std::string& error) {
    link_.send(protocol::Ack{link_.incarnation(), manifest.version, fetch_id, ok, error});
  }

  ConsumerOptions options_;
  std::shared_ptr<spdlog::logger> log_;
  // Shared with transfer completions: views keep the transport (and so late completions of
  // cancelled receives) alive after this Consumer is gone.
  std::shared_ptr<EventQueue<Event>> events_ = std::make_shared<EventQueue<Event>>();

  mutable std::mutex mutex_;
  ConsumerStats stats_;  // guarded by mutex_

  consumer::ProducerLink link_;        // service thread only after construction
  // What the next join offers; replaced when the producer is replaced. Service thread only.
  std::unique_ptr<transport::TransportSet> offered_;
  consumer::VersionStore store_;       // see its header
  consumer::FetchClient fetch_;        // service thread only
  consumer::VerifierPolicy policy_;    // immutable after construction
  std::set<std::uint64_t> rejected_;   // service thread only
  std::uint64_t newest_announced_ = 0;
  Clock::time_point retry_fetch_after_{};
  const std::uint64_t session_ = consumer::random_session();
  std::thread service_;
};

Consumer::Consumer(ConsumerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
Consumer::~Consumer() = default;
ModelView Consumer::acquire() const { return impl_->acquire(); }
ModelView Consumer::wait_for_version(std::uint64_t version, std::chrono::milliseconds timeout) const {
  return impl_->wait_for_version(version, timeout);
}
ConsumerStats Consumer::stats() const { return impl_->stats(); }

}  // namespace modelcast
