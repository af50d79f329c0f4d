// The consumer's service: the one thread that talks to the producer. A version's way in, one
// stage per file:
//   ProducerLink     join, pings, liveness (announcements, a lost connection); CurveZMQ and
//                    handshake failures
//   FetchClient      ask for the newest version, receive its chunks, hash them as they land
//   Verifier         manifest, limits, layout, chunk plan, signature, digests
//   VersionStore     receive buffers, the installed version, the swap readers see
//   RelayServer      blocks of what this consumer holds, sent on to peers the producer names
//   TensorShaper     what a host consumer's views hold: the tensors and parts it wants, in the
//                    dtypes it asks for, cut and converted once verified
// Only this service sends control messages (service.cpp: the loop, the link and joins;
// service_fetch.cpp: fetch, verify, install); the stages return what to send.
//
// Threads and what they own:
//  - reader threads call acquire()/wait_for_version(): VersionStore hands them views.
//  - the service thread owns the link, the fetch client and the store's buffers; it verifies
//    and installs versions.
//  - the transport's progress thread writes received bytes into a buffer no view refers to,
//    reads the buffers relay orders hold, and its completions only push events.
//  - a releasing thread (release_retired_receives) drops what it is handed, nothing else:
//    releasing it may wait for a retired transport's release timeout.
// `mutex_` guards the stats.
#pragma once

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include <zmq.hpp>

#include "core/consumer/error_order.h"
#include "common/event_queue.h"
#include "common/log.h"
#include "common/log_rate.h"
#include "common/prefixed_log.h"
#include "core/consumer/consumer_options.h"
#include "core/consumer/device_landing.h"
#include "core/consumer/fetch_client.h"
#include "core/consumer/producer_link.h"
#include "core/consumer/relay_server.h"
#include "core/consumer/tensor_shaper.h"
#include "core/consumer/verifier.h"
#include "core/consumer/version_store.h"
#include "core/wire/protocol.h"
#include "modelcast/consumer.h"
#include "transports/transport_set.h"

namespace modelcast::consumer {

struct Stop {};
using Event = std::variant<ChunkDone, RelaySent, Stop>;

// What the Consumer that owns a service hears from it: each version it installs (which the
// Consumer makes what readers see, itself or through an assembler of several ranks' pieces,
// rank_assembler.h) and, for a model that several producer ranks publish, the ranks. Both run
// on the service thread.
struct ServiceHooks {
  // At each join: the producer says it is rank `rank` of the ranks at `endpoints` (none: it
  // publishes the whole model). Returns whether the service's versions go to an assembler now.
  std::function<bool(std::uint32_t rank, const std::vector<std::string>& endpoints)> on_ranks;
  // A version this service installed (after its own store, before on_update).
  std::function<void(std::shared_ptr<const detail::InstalledVersion>)> on_installed;
  // At every turn of the service loop (at most tick() apart): an assembler's retry().
  std::function<void()> on_turn;
  // Each new version the producer announces (every publish is; heartbeats repeat the newest),
  // by its run and step: an assembler learns from these which steps each rank publishes.
  std::function<void(std::uint64_t incarnation, std::int64_t step)> on_announced;
  // Feeds an assembler from the start (the services of the other ranks).
  bool feeds_assembler = false;
  // What the service's log lines start with after the model's name (another rank's service:
  // which rank, at which endpoint; its on_error adds the same).
  std::string said;
};

class ConsumerService {
 public:
  using Clock = std::chrono::steady_clock;

  // Checks the options (Error(kInvalidArgument)), creates the transports and starts the
  // service thread, which begins to join the producer.
  explicit ConsumerService(ConsumerOptions options, ServiceHooks hooks = {});
  ~ConsumerService();  // stop(); views already handed out stay valid
  // Stops the service thread (idempotent). The object stays usable for stats() and views, so a
  // callback that ran on that thread may still call into its owner while it stops. A service
  // whose device buffer peers read first waits for them (drain_exports), up to producer_timeout.
  void stop();
  // stop() in two halves, so that several services stop side by side: asks the thread to stop
  // (any thread, repeatable), then waits for it (idempotent).
  void request_stop();
  void wait_stopped();

  // What to fetch of each tensor from the next fetch on, instead of the options' wants (an
  // assembler asks each rank for the regions it takes from it). Any thread. Regions planned on
  // the versions of producer run `incarnation` hold for that run only: a trainer restarted at the
  // same endpoints may shape its tensors otherwise (boxes outside smaller ones would refuse every
  // version), so another run's versions are fetched with the options' wants until asked again.
  // 0: for any run.
  void set_wants(std::vector<TensorWant> wants, std::uint64_t incarnation = 0);

  ConsumerStats stats() const {
    std::lock_guard lock(mutex_);
    return stats_;
  }
  // stats(), and when its last_error was last said (next_error_order(); 0: never): changed by
  // count(), or said by report(), the same text again included.
  std::pair<ConsumerStats, std::uint64_t> stats_and_error_order() const {
    std::lock_guard lock(mutex_);
    return {stats_, last_error_order_};
  }

 private:
  void size_buffers();  // service thread, at each join
  template <typename Mutate>
  void count(Mutate&& mutate) {
    std::lock_guard lock(mutex_);
    // Into a kept buffer: counted once per received chunk, a copy that allocates each time would not do.
    last_error_before_.assign(stats_.last_error);
    mutate(stats_);
    if (!stats_.last_error.empty() && stats_.last_error != last_error_before_) last_error_order_ = next_error_order();
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

  // ---- service thread ------------------------------------------------------------------
  void service_loop();
  std::chrono::milliseconds tick() const;
  void back_off(unsigned& in_a_row, unsigned free_tries);
  void join();
  // After the producer died or restarted: fresh transports (a fresh UCX worker). On one host
  // endpoints run without peer-failure handling (UCX offers shared memory only so), and a peer
  // that dies there leaves the worker in an undefined state (seen: a UCX assertion when the next
  // producer's data came in). Buffers that views or unfinished receives still hold keep the old
  // transport alive.
  void rejoin_afresh(const std::string& why);
  // The DEALER's monitor: failed handshakes are reported; a lost connection means joining again.
  void on_monitor_events();
  void read_dealer();
  void check_producer_alive();
  void notice_unanswered_joins(Clock::time_point now);
  // A transfer the producer answered but never finishes (its lease lapsed, a sender hung) is
  // given up, so the consumer asks for the newest version again instead of waiting for ever.
  void check_transfer_deadline();
  void bad_message(const std::string& what);
  std::optional<protocol::Message> decode(const zmq::message_t& frame, const protocol::DecodeLimits& limits);
  void on_announce(const protocol::Announce& announce);
  // The producer's last announcement (Announce::stopping).
  void on_producer_stopping(const protocol::Announce& announce);
  void on_reply(std::vector<zmq::message_t>& parts);
  void on_join_reply(const protocol::JoinReply& reply);
  // What we hold: a newer announced version of this incarnation, or any version of a new one.
  bool wants(std::uint64_t version) const;
  std::shared_ptr<const detail::InstalledVersion> delta_base() const;
  void check_delta_base(const protocol::FetchReply& reply) const;
  void maybe_fetch();
  void on_fetch_reply(const protocol::FetchReply& reply);
  // A finished fetch: verified and installed, or rejected; acked either way.
  void finish(std::optional<FinishedFetch> done);
  // ConsumerStats::arriving_*: after every change of the fetch in flight.
  void count_arrival();
  // A chunk is in: a device consumer copies the grown prefix on to the device at once.
  void on_chunk(const ChunkDone& done);
  // Serving peers (relay_server.h): an order from the producer, a send finished, and posting
  // the blocks that became ready (after every turn of the loop).
  bool serves_peers() const;
  // Whether relay orders (under way, ending, or exported buffers) may hold receive buffers.
  bool relay_holds_buffers() const { return relay_.orders() + relay_.draining() + relay_.exported() > 0; }
  // Whether what holds receive buffers ends or is given up by itself (relay orders, an abandoned
  // fetch's receives): a stall is then no news for the user.
  bool buffers_free_by_themselves() const { return relay_holds_buffers() || fetch_.draining_holds_buffers(); }
  // Abandoned fetches whose receives made no progress for transfer_timeout are taken for ones
  // that never end (FetchClient::set_aside_stuck): their buffers leave the pool, and others are
  // allocated in their place. A relay killed mid-version left one, with the delta base it
  // pinned then, and updates stopped for good once they held the pool's last free buffers.
  void set_aside_stuck_receives(Clock::time_point now);
  // After a join: the abandoned fetches still receiving on transports no longer offered (made
  // afresh since) are let go of (FetchClient::take_retired), on a thread of their own, as that
  // waits up to the retired transport's release timeout. Meanwhile that transport's progress
  // thread is busy: other releases on it (the previous version's buffer, a reader's last view of
  // an older one) wait too, once, up to that timeout.
  void release_retired_receives();
  void on_relay_order(const protocol::RelayOrder& order);
  void export_installed(const protocol::RelayOrder& order);
  // Closing: waits, bounded, until no peer may still be reading an exported buffer.
  void drain_exports();
  // Closing: waits, bounded, until the receives of abandoned fetches have ended.
  void finish_abandoned_receives();
  void on_relay_cancel(const protocol::RelayCancel& cancel);
  void on_relay_sent(const RelaySent& sent);
  // A join was refused as the producer cannot reach this consumer's address
  // (protocol::kUnreachableConsumer): transports made while a network device had no carrier (its
  // link down) lack it for good, as UCX leaves such a device out, and every join would be refused
  // the same way. The next join offers transports made afresh, once producer_timeout has passed
  // since they were made, then after twice as long each time (up to 10 minutes).
  void reoffer_after_refusal(const protocol::JoinReply& reply);
  void pump_relays();
  void relay_failed(const protocol::RelayFailed& failed);
  std::shared_ptr<detail::ReceiveBuffer> installed_host_bytes(
      const std::shared_ptr<const detail::InstalledVersion>& current) const;
  // Whether `buffer` keeps a verified version's bytes until modelcast writes it again.
  bool stays_intact(const detail::ReceiveBuffer& buffer) const;
  // A staged device consumer's host copy of a version it verified, as kept (see landed_host_):
  // null where the buffer does not keep its bytes.
  std::shared_ptr<detail::ReceiveBuffer> host_copy_kept(std::shared_ptr<detail::ReceiveBuffer> buffer,
                                                        const Manifest& manifest) const;
  // That copy of the version it installs.
  void keep_landed_host(std::shared_ptr<detail::ReceiveBuffer> buffer, const Manifest& manifest);
  void release_landed_host();
  std::optional<std::pair<Manifest, std::uint64_t>> abandon_fetch(const std::string& why, bool counted);
  // Counted and reported before the ack: the ack is what the outside world sees first.
  void reject(const Manifest& manifest, std::uint64_t fetch_id, const Error& error);
  // Not a rejection: memory could not be had now; the version is asked for again after a backoff.
  void retry_later(const Manifest& manifest, std::uint64_t fetch_id, const Error& error);
  // The answer is refused before its receives were posted: takes and drops the chunks the
  // producer (or a relay) sends for it all the same (FetchClient::discard says why). Where every
  // chunk is taken so, the fetch's ack says it (discarded_fetch_).
  void discard_chunks(const protocol::FetchReply& reply);
  void report(const Error& error);
  // `shaped`: the shaped views' memory is what is held, not the receive buffers.
  void report_buffers_held(std::uint64_t version, bool shaped = false);
  // The group gave up `version`, which another member rejected (on_error).
  void report_group_gave_up(std::uint64_t version);
  // Makes a verified version what readers get (stats first, then the store); the caller then
  // runs on_update.
  void make_visible(std::shared_ptr<detail::InstalledVersion> installed);
  // A group member's announcement: the group's target becomes what to fetch, and a commit of
  // the prepared version makes it visible.
  void on_group_announce(const protocol::Announce& announce);
  // `again`: a failure that is no verdict on the version (protocol::Ack::again).
  void send_ack(const Manifest& manifest, std::uint64_t fetch_id, bool ok, const std::string& error,
                protocol::RelayFault relay_fault = protocol::RelayFault::kNone, bool again = false);

  ConsumerOptions options_;
  ServiceHooks hooks_;  // immutable after construction
  // Its versions are one rank's pieces, for an assembler: not shaped (the assembler cuts and
  // converts the whole), handed on once installed. Service thread only after construction.
  bool feeds_assembler_ = false;
  PrefixedLog log_;  // each line begins "model 'm': " and hooks_.said
  // Bad messages are logged at most once per 10 s (counted every time). Service thread only.
  LogRate bad_messages_logged_;
  // An error said again at every retry (a producer refusing the join: another model's name) is
  // logged at most once per 10 s; another error at once. Counted and handed to on_error every
  // time. Service thread only.
  RepeatRate errors_logged_;
  // Shared with transfer completions: views keep the transport (and so late completions of
  // cancelled receives) alive after this Consumer is gone.
  std::shared_ptr<EventQueue<Event>> events_ = std::make_shared<EventQueue<Event>>();

  mutable std::mutex mutex_;
  ConsumerStats stats_;  // guarded by mutex_
  std::uint64_t last_error_order_ = 0;  // guarded by mutex_: see stats_and_error_order()
  std::string last_error_before_;       // guarded by mutex_: count()'s scratch

  ProducerLink link_;        // service thread only after construction
  // What the next join offers; replaced when the producer is replaced, and after joins refused
  // as unreachable (reoffer_after_refusal). Service thread only.
  std::unique_ptr<transport::TransportSet> offered_;
  Clock::time_point offered_made_ = Clock::now();  // when offered_ was made
  // Why fresh transports are wanted at the next join: they could not be made yet (rejoin_afresh),
  // or the producer said it stops (on_producer_stopping); service thread.
  std::optional<std::string> afresh_pending_;
  std::chrono::milliseconds reoffer_wait_ = options_.producer_timeout;  // reoffer_after_refusal's; service thread
  VersionStore store_;       // see its header
  std::unique_ptr<DeviceLanding> landing_;  // device consumers only; service thread only
  FetchClient fetch_;        // service thread only
  RelayServer relay_;        // service thread only
  TensorShaper shaper_;       // service thread only after construction
  // Where shaped views go: host memory, or a device consumer's device (its own stream).
  std::unique_ptr<ShapingTarget> target_;  // service thread only after construction
  // Wants set by set_wants with the producer run they are for, not yet taken by the service
  // thread (under wants_mutex_), and those of the fetches from then on with their run and
  // generation (service thread only).
  std::mutex wants_mutex_;
  std::optional<std::vector<TensorWant>> next_wants_;
  std::uint64_t next_wants_run_ = 0;
  std::optional<std::vector<TensorWant>> fetch_wants_;
  std::uint64_t fetch_wants_run_ = 0;
  std::uint64_t wants_generation_ = 0;
  // What the fetch in flight keeps of its version (ConsumerOptions::wants resolved against its
  // manifest when the producer answered). Service thread only.
  TensorSelection selection_;
  VerifierPolicy policy_;    // immutable after construction
  // Service thread only: versions refused (the newest kMaxRemembered), the version the fetch in
  // flight asked for, and the refusals since the last install (reject() says why).
  static constexpr std::size_t kMaxRemembered = 1024;
  static constexpr std::chrono::seconds kMaxRejectBackoff{5};
  // How long a relay order's sends may stay posted after it ended before they are given up.
  static constexpr std::chrono::seconds kStuckRelaySends{1};
  std::set<std::uint64_t> rejected_;
  std::uint64_t asked_for_ = 0;
  // The version offered as the base of the fetch in flight; service thread only.
  std::shared_ptr<const detail::InstalledVersion> delta_base_;
  // A staged device consumer's installed version is on the device, but the host buffer it
  // arrived in still holds its verified bytes: kept here (not in the InstalledVersion, so views
  // pin only device memory) to serve peers from and as the base of a delta, and let go as soon
  // as a fetch needs a buffer and none other is free. Service thread only; null when there is
  // none (caller buffers the caller may write, a route that reads into device memory).
  std::shared_ptr<detail::ReceiveBuffer> landed_host_;
  std::uint64_t landed_host_version_ = 0;
  unsigned rejections_in_a_row_ = 0;
  // The last version whose one-sided read out of the producer's slot failed its check (fetched
  // again once: see finish()).
  std::uint64_t producer_read_failed_version_ = 0;
  // retry_later(): tries in a row (of any versions) that found no memory; a try that ends
  // otherwise (installed, rejected, failed in transfer) ends the row.
  static constexpr unsigned kMaxAllocationTries = 4;
  unsigned allocation_failures_ = 0;
  // Transfers that failed since the last install (finish()): the first is asked for again at
  // once, the next ones back off as rejections do, so that a failure that keeps coming (a
  // transport that fails every transfer) does not fetch the model again and again at full speed.
  unsigned failures_in_a_row_ = 0;
  // The size of the last version no free caller buffer could hold (0: none): fetched again only
  // once one of that size is free, not refused at every turn. Service thread.
  std::uint64_t caller_bytes_wanted_ = 0;
  bool buffers_held_reported_ = false;  // a stall on held buffers was reported, not yet over
  std::string buffers_held_said_;       // what it said, cleared from last_error when it is over
  bool stuck_refusal_reported_ = false;  // a stuck receive's buffer could not be set aside: said
  // Releases of retired receive buffers under way (release_retired_receives); a future's
  // destructor waits for its release, so none outlives the service.
  std::vector<std::future<void>> releasing_;
  std::uint64_t newest_announced_ = 0;
  // Group members (ConsumerOptions::group), service thread only: the version held verified until
  // the group commits it, what the group last committed (this producer incarnation's), and
  // whether it waits for members (reported once per wait), and whether it was ever whole.
  std::shared_ptr<detail::InstalledVersion> prepared_;
  // A staged device member's host copy of prepared_ (as landed_host_ is of the installed one):
  // apart until the commit, so the installed version's stays its delta base and what it relays
  // should the group give the prepared one up.
  std::shared_ptr<detail::ReceiveBuffer> prepared_host_;
  std::uint64_t group_committed_ = 0;
  std::uint64_t group_gave_up_said_ = 0;  // the given-up version reported (this incarnation's)
  std::uint64_t caller_buffers_said_for_ = 0;  // the model size caller buffers too small were named for
  bool group_waiting_ = false;
  bool group_was_whole_ = false;
  std::string group_waiting_said_;  // the last_error that says the group waits, while it does
  std::string unanswered_said_;      // the last_error that says joins go unanswered, while they do
  // The fetch whose every chunk discard_chunks took (its refusal's ack says so): service thread.
  std::uint64_t discarded_fetch_ = 0;
  Clock::time_point retry_fetch_after_{};
  bool closing_ = false;  // stop() was asked: no relay order is taken any more. Service thread only.
  const std::uint64_t session_ = random_session();
  std::thread service_;
};

}  // namespace modelcast::consumer
