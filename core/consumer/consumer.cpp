// Consumer: see include/modelcast/consumer.h; the work is in ConsumerService (service.h).
//
// One producer: one service, whose store readers see. A model that several producer ranks
// publish: the service of the endpoint the user gave learns the others from its join reply
// (on_ranks), and the Consumer starts one service per other rank; every service then hands the
// versions it installs (that rank's pieces) to one RankAssembler, whose store readers see. A
// device consumer's services land their pieces on its device, where the assembler copies and
// converts them.
//
// The ranks are learnt again at every join: a trainer restarted with another layout (other ranks,
// or none) is followed, the services of the old one stopped, and readers keep the last version
// until the new layout brings one.
//
// Threads: on_ranks runs on the first service's thread and is the only writer of `ranked_`,
// `assembler_`, `others_` and `rank_of_` (under `mutex_`). Readers use `readers_` (VersionStore:
// its own lock), which the first service's thread or the assembler (under its lock) install into.
#include "modelcast/consumer.h"

#include <algorithm>
#include <limits>
#include <future>
#include <mutex>
#include <optional>

#include "common/contained_callback.h"
#include "common/log.h"
#include "common/log_rate.h"
#include "common/shown_text.h"
#include "core/consumer/consumer_options.h"
#include "core/consumer/rank_assembler.h"
#include "core/consumer/service.h"
#include "core/wire/protocol.h"

namespace modelcast {
namespace {

// The user's callbacks, contained; one at a time, since with several producer ranks each rank's
// service thread may report, and the headers promise one callback at a time.
ConsumerOptions with_contained_callbacks(ConsumerOptions options) {
  auto serial = std::make_shared<std::mutex>();
  const auto log = log::get("consumer");
  const std::string said = "model '" + options.model_name + "': ";
  options.on_update = contained(std::move(options.on_update), "on_update", log, serial, said);
  options.on_error = contained(std::move(options.on_error), "on_error", log, serial, said);
  return options;
}

}  // namespace

class Consumer::Impl {
 public:
  explicit Impl(ConsumerOptions options) : options_(with_contained_callbacks(std::move(options))) {
    ConsumerOptions first = options_;
    // The first service's thread starts inside its constructor and may join, install or fail
    // before first_ is set: every way in from that thread waits for the Impl to be whole (a join
    // reply naming ranks once reached first_ while it was still null).
    // The user's callbacks see whole versions: the first service's own only while it is the
    // only one.
    first.on_update = [this](const ModelView& view) {
      constructed_.wait();
      if (!ranked() && options_.on_update) options_.on_update(view);
    };
    if (options_.on_error) {
      first.on_error = [this](const Error& error) {
        constructed_.wait();
        options_.on_error(error);
      };
    }
    consumer::ServiceHooks hooks;
    hooks.on_ranks = [this](std::uint32_t rank, const std::vector<std::string>& endpoints) {
      constructed_.wait();
      return start_ranks(rank, endpoints);
    };
    hooks.on_installed = [this](std::shared_ptr<const detail::InstalledVersion> version) {
      constructed_.wait();
      std::shared_ptr<consumer::RankAssembler> a;
      std::uint32_t rank = 0;
      {
        std::lock_guard lock(mutex_);
        // One rank's pieces are never shown as the model, even when the ranks could not start.
        if (ranked_ && !assembler_) return;
        a = assembler_;
        rank = first_rank_;
      }
      if (a) {
        a->offer(rank, std::move(version));
      } else {
        readers_.install(std::move(version));
      }
    };
    hooks.on_announced = [this](std::uint64_t incarnation, std::int64_t step) {
      constructed_.wait();
      std::shared_ptr<consumer::RankAssembler> a;
      std::uint32_t rank = 0;
      {
        std::lock_guard lock(mutex_);
        a = assembler_;
        rank = first_rank_;
      }
      if (a) a->announced(rank, incarnation, step);
    };
    first_ = std::make_unique<consumer::ConsumerService>(std::move(first), std::move(hooks));
    whole_.set_value();  // if the service could not start, no thread of it waits
  }

  ~Impl() {
    // Waits end first: one made on a thread about to be joined (a callback's) would hold it.
    readers_.cancel_waits();
    // Every service's thread ends before any service goes: a callback on one of those threads
    // (the user's on_update calling stats(), an offer to the assembler) finds them all still there.
    // others_ is not written once the first service's thread has stopped.
    // The others stop side by side: each may wait for peers reading what it exported.
    first_->stop();
    for (auto& other : others_) other->request_stop();
    for (auto& other : others_) other->wait_stopped();
  }

  ModelView acquire() const { return readers_.acquire(); }

  ModelView wait_for_version(std::uint64_t version, std::chrono::milliseconds timeout) const {
    if (timeout.count() < 0) {
      throw Error(ErrorCode::kInvalidArgument, "wait_for_version: timeout " + std::to_string(timeout.count()) + " ms is negative");
    }
    if (in_callback()) {
      if (auto installed = readers_.wait_for(version, std::chrono::milliseconds(0)); !installed.empty()) return installed;
      // Cancelled waits end at once, here as on any thread.
      if (timeout.count() > 0 && !readers_.waits_cancelled()) refuse_blocking_wait_in_callback("wait_for_version");
      return {};
    }
    return readers_.wait_for(version, timeout);
  }
  void cancel_waits() { readers_.cancel_waits(); }

  ConsumerStats stats() const {
    auto [s, error_order] = first_->stats_and_error_order();
    std::lock_guard lock(mutex_);
    if (!ever_ranked_) return s;
    // Of the model as readers see it, across every layout the producer has had: the versions
    // readers were given, those the ranks or an assembler refused, and the ranks' transfers
    // summed. A rank whose service could not start leaves the model unassembled: not connected.
    s.current_version = 0;
    if (auto current = readers_.current()) s.current_version = current->manifest.version;
    s.versions_installed = readers_.installs();
    s.versions_rejected += retired_rejected_;
    if (!ranked_) return s;
    for (std::size_t r = 0; r < rank_of_.size(); ++r) {
      const auto* other = rank_of_[r];
      if (other == nullptr || other == first_.get()) continue;
      const auto [o, other_order] = other->stats_and_error_order();
      s.producer_connected = s.producer_connected && o.producer_connected;
      s.producer_stopped = s.producer_stopped || o.producer_stopped;
      s.versions_rejected += o.versions_rejected;
      s.transfers_aborted += o.transfers_aborted;
      s.bad_messages += o.bad_messages;
      s.reconnects += o.reconnects;
      s.failed_handshakes += o.failed_handshakes;
      s.bytes_received += o.bytes_received;
      s.arriving_bytes += o.arriving_bytes;
      // The newest error of any rank's, or the assembler's below: an older one (a layout refused,
      // then fixed) hid a newer one (a rank gone) for as long as the layout lasted.
      if (!o.last_error.empty() && (s.last_error.empty() || other_order > error_order)) {
        s.last_error = rank_said(r, layout_endpoints_[r]) + o.last_error;
        error_order = other_order;
      }
    }
    if (!rank_failure_.empty()) {  // a state, not an event: said while it lasts, over any error
      s.producer_connected = false;
      s.last_error = rank_failure_;
      error_order = std::numeric_limits<std::uint64_t>::max();
    }
    if (assembler_) {
      const auto c = assembler_->counts();
      s.versions_rejected += c.versions_rejected;
      s.wanted_bytes = c.wanted_bytes;
      if (!c.last_error.empty() && (s.last_error.empty() || c.last_error_order > error_order)) s.last_error = c.last_error;
      if (s.last_error.empty()) s.last_error = c.waiting;  // no cause of its own: below every error
    }
    return s;
  }

 private:
  bool ranked() const {
    std::lock_guard lock(mutex_);
    return ranked_;
  }
  // On the first service's thread, at each join: the producer is rank `rank` of endpoints.size(),
  // or publishes the whole model (no endpoints). Returns whether its versions are pieces.
  bool start_ranks(std::uint32_t rank, const std::vector<std::string>& endpoints) {
    const bool first_join = !joined_once_;
    joined_once_ = true;
    {
      std::lock_guard lock(mutex_);
      if (rank == layout_rank_ && endpoints == layout_endpoints_) return ranked_;
    }
    const auto described = [](std::size_t ranks) {
      return ranks == 0 ? std::string("one producer") : std::to_string(ranks) + " ranks";
    };
    if (!first_join) {
      log::get("consumer")->info("model '{}': the producer's layout changed ({} before, {} now){}", options_.model_name,
                                 described(layout_endpoints_.size()), described(endpoints.size()),
                                 endpoints.empty() ? "" : ": assembling afresh");
    }
    leave_ranks();
    // The user's wants again, not the regions an old assembler asked of this rank.
    first_->set_wants(options_.wants);
    if (endpoints.empty() && rank != 0) return refuse_other_rank(rank);
    if (endpoints.empty()) return false;
    // Reported once mutex_ is released: on_error may call stats(), which takes it.
    std::vector<Error> failures;
    join_ranks(rank, endpoints, failures);
    for (const auto& failure : failures) {
      log::get("consumer")->error("model '{}': {}", options_.model_name, failure.what());
      if (options_.on_error) options_.on_error(failure);
    }
    return true;  // with or without the other ranks, its versions are pieces: never shown as the model
  }

  // The producer at the user's endpoint is rank `rank` (not 0) of a sharded model: only rank 0
  // tells consumers where the others are, so its pieces alone would have been installed as the
  // model (a [4, 4] part of an [8, 4] tensor, with no word). Its versions are pieces, never shown.
  bool refuse_other_rank(std::uint32_t rank) {
    const std::string why = "the producer at '" + options_.producer_endpoint + "' is rank " + std::to_string(rank) +
                            " of a model several ranks publish, and holds only its own pieces: point producer_endpoint "
                            "at rank 0, which tells consumers where every rank is";
    {
      std::lock_guard lock(mutex_);
      ranked_ = true;
      ever_ranked_ = true;
      layout_rank_ = rank;
      layout_endpoints_.clear();
      rank_failure_ = why;
    }
    log::get("consumer")->error("model '{}': {}", options_.model_name, why);
    // Reported once mutex_ is released: on_error may call stats(), which takes it.
    if (options_.on_error) options_.on_error(Error(ErrorCode::kInvalidArgument, why));
    return true;
  }

  // Stops the services of the ranks before; readers keep what they see until the next install.
  void leave_ranks() {
    std::vector<std::unique_ptr<consumer::ConsumerService>> old;
    {
      std::lock_guard lock(mutex_);
      old = std::move(others_);
      others_.clear();
      if (assembler_) retired_rejected_ += assembler_->counts().versions_rejected;
      assembler_.reset();
      rank_failure_.clear();
      ranked_ = false;
      layout_endpoints_.clear();
      layout_rank_ = 0;
    }
    // Outside the lock: a callback on their threads may call stats(). They may still offer to
    // the old assembler, which asks rank_of_ for them: cleared once they are stopped.
    for (auto& other : old) other->request_stop();
    for (auto& other : old) other->wait_stopped();
    old.clear();
    std::lock_guard lock(mutex_);
    rank_of_.clear();
  }

  void join_ranks(std::uint32_t rank, const std::vector<std::string>& endpoints, std::vector<Error>& failures) {
    std::lock_guard lock(mutex_);
    ranked_ = true;
    ever_ranked_ = true;
    layout_rank_ = rank;
    layout_endpoints_ = endpoints;
    auto fail = [&](const std::string& why) {
      failures.emplace_back(ErrorCode::kInvalidArgument, why);
      rank_failure_ = why;
    };
    // The assembler keeps two versions of each rank while the next one arrives.
    if (!options_.caller_buffers.empty() && options_.caller_buffers.size() < consumer::RankAssembler::kBuffersPerRank) {
      return fail("a model published by several ranks needs >= " + std::to_string(consumer::RankAssembler::kBuffersPerRank) +
                  " caller_buffers (two held for assembly, one receiving), got " +
                  std::to_string(options_.caller_buffers.size()));
    }
    if (rank >= endpoints.size()) {
      return fail("the producer says it is rank " + std::to_string(rank) + " of " + std::to_string(endpoints.size()));
    }
    if (endpoints.size() > protocol::kMaxRanks) {
      return fail("the producer says its model has " + std::to_string(endpoints.size()) + " ranks; a consumer takes at most " +
                  std::to_string(protocol::kMaxRanks));
    }
    // Endpoints are the producer's words that this consumer connects to and names in its errors.
    for (std::size_t r = 0; r < endpoints.size(); ++r) {
      const std::string& endpoint = endpoints[r];
      if (endpoint.size() > protocol::kShownPeerTextBytes ||
          printable_text(endpoint, endpoint.size(), Backslash::kKept) != endpoint) {
        return fail("the producer gives rank " + std::to_string(r) + " the endpoint " + shown_text(endpoint) +
                    ", which is no endpoint (control or non-ASCII characters, or over " +
                    std::to_string(protocol::kShownPeerTextBytes) + " bytes)");
      }
    }
    first_rank_ = rank;
    rank_of_.assign(endpoints.size(), nullptr);
    assembler_ = std::make_shared<consumer::RankAssembler>(endpoints.size(), options_.wants, options_.conversions,
                                                           options_.expected_layout,
                                                           options_.on_update, assembler_errors(), readers_,
                                                           [this](std::size_t r, std::vector<TensorWant> wants, std::uint64_t run) {
                                                             if (auto* s = service_of(r)) s->set_wants(std::move(wants), run);
                                                           },
                                                           assembly_target());
    for (std::uint32_t r = 0; r < endpoints.size(); ++r) {
      if (r == rank) continue;
      ConsumerOptions o = options_;
      o.producer_endpoint = endpoints[r];
      // host:pid as the first service's, so that the producer ranks' logs tell consumers apart.
      o.consumer_name =
          (options_.consumer_name.empty() ? consumer::default_consumer_name() : options_.consumer_name) + "/rank" +
          std::to_string(r);
      // What goes wrong with another rank names it: the user configured rank 0's endpoint only.
      if (options_.on_error) {
        o.on_error = [on_error = options_.on_error, said = rank_said(r, endpoints[r])](const Error& e) {
          on_error(Error(e.code(), said + e.what()));
        };
      }
      o.conversions.clear();
      // The caller's buffers are the first service's: the other ranks receive into their own.
      o.caller_buffers.clear();
      o.caller_buffers_untouched = false;
      o.on_update = nullptr;
      o.serve_peers = false;
      consumer::ServiceHooks hooks;
      hooks.feeds_assembler = true;
      hooks.said = rank_said(r, endpoints[r]);
      hooks.on_installed = [assembler = assembler_, r](std::shared_ptr<const detail::InstalledVersion> version) {
        assembler->offer(r, std::move(version));
      };
      hooks.on_turn = [assembler = assembler_] { assembler->retry(); };
      hooks.on_announced = [assembler = assembler_, r](std::uint64_t incarnation, std::int64_t step) {
        assembler->announced(r, incarnation, step);
      };
      try {
        others_.push_back(std::make_unique<consumer::ConsumerService>(std::move(o), std::move(hooks)));
        rank_of_[r] = others_.back().get();
      } catch (const Error& e) {
        failures.emplace_back(e.code(), "rank " + std::to_string(r) + " at '" + endpoints[r] + "': " + e.what());
        if (rank_failure_.empty()) rank_failure_ = failures.back().what();
      }
    }
    rank_of_[rank] = first_.get();
  }

  // What the assembler reports: logged, as the services' errors are (its "no step can be put
  // together" repeats at every retry: the same text at most once per 10 s), then on_error.
  std::function<void(const Error&)> assembler_errors() const {
    struct Logged {
      std::mutex mutex;
      RepeatRate rate;
    };
    return [model = options_.model_name, on_error = options_.on_error, logged = std::make_shared<Logged>()](
               const Error& error) {
      std::optional<std::string> note;
      {
        std::lock_guard lock(logged->mutex);
        note = logged->rate.admit(error.what(), RepeatRate::Clock::now());
      }
      if (note) log::get("consumer")->error("model '{}': {}{}", model, error.what(), *note);
      if (on_error) on_error(error);
    };
  }

  // How an error of rank r's service starts.
  static std::string rank_said(std::size_t r, const std::string& endpoint) {
    return "rank " + std::to_string(r) + " at '" + endpoint + "': ";
  }

  // Where assembled versions live: a device consumer's device (its ranks' services land their
  // pieces there too, so the pieces are copied and converted on the device), or host memory.
  std::unique_ptr<consumer::ShapingTarget> assembly_target() const {
    // As many as the consumer's buffers: views readers hold keep theirs.
    const std::size_t buffers = std::max(options_.buffers, options_.caller_buffers.size());
    if (options_.memory != MemoryKind::kCuda) return std::make_unique<consumer::ShapingTarget>(buffers);
    return std::make_unique<consumer::ShapingTarget>(device::require_device_runtime("a device consumer"),
                                                     options_.device, buffers);
  }

  // Rank r's service (the first one for the rank the user's endpoint is), null if it could not
  // start. Called by the assembler, which assembles only once every rank offered a version: after
  // start_ranks (on the first service's thread, which offers too) filled rank_of_ for good.
  // No lock, on purpose: the assembler calls this holding its mutex, and stats() and leave_ranks
  // take mutex_ before the assembler's; taking mutex_ here would take them the other way round.
  // A ThreadSanitizer run of the ranked tests (2026-12-07) reported no race on rank_of_.
  consumer::ConsumerService* service_of(std::size_t r) { return r < rank_of_.size() ? rank_of_[r] : nullptr; }

  const ConsumerOptions options_;  // the user's
  // What readers see: the first service's versions, or the assembled ones. Declared before the
  // services, which install into it, so that it outlives them.
  consumer::VersionStore readers_{0, {}};
  std::promise<void> whole_;  // set once first_ is
  std::shared_future<void> constructed_ = whole_.get_future().share();
  std::unique_ptr<consumer::ConsumerService> first_;
  mutable std::mutex mutex_;
  // The layout the producer last joined said (no endpoints: the whole model from one), and
  // whether its versions are pieces. Guarded by mutex_.
  std::uint32_t layout_rank_ = 0;
  std::vector<std::string> layout_endpoints_;
  bool ranked_ = false;
  bool ever_ranked_ = false;        // guarded by mutex_: stats() then speaks of readers' versions
  std::uint64_t retired_rejected_ = 0;  // guarded by mutex_: refusals of assemblers gone
  std::string rank_failure_;        // guarded by mutex_: why a rank of this layout could not start
  bool joined_once_ = false;  // the first service's thread only
  std::shared_ptr<consumer::RankAssembler> assembler_;  // guarded by mutex_; null if the ranks could not start
  std::vector<std::unique_ptr<consumer::ConsumerService>> others_;  // guarded by mutex_
  std::uint32_t first_rank_ = 0;  // written before assembler_ is set, under mutex_
  std::vector<consumer::ConsumerService*> rank_of_;  // by rank; filled by join_ranks, cleared by leave_ranks
};

Consumer::Consumer(ConsumerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
Consumer::~Consumer() = default;
ModelView Consumer::acquire() const { return impl_->acquire(); }
ModelView Consumer::wait_for_version(std::uint64_t version, std::chrono::milliseconds timeout) const {
  return impl_->wait_for_version(version, timeout);
}
void Consumer::cancel_waits() { impl_->cancel_waits(); }
ConsumerStats Consumer::stats() const { return impl_->stats(); }

}  // namespace modelcast
