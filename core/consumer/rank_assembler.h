// A model that M producer ranks publish in pieces (ProducerOptions::rank_count). The consumer runs
// one ConsumerService per rank; each receives, verifies and installs that rank's pieces of what
// the consumer wants (TensorSelection of a piece), and hands every version it installs here.
// Once every rank holds a version of one step, the assembler plans which rank each wanted byte
// comes from (layout::plan_pulls: one owner per byte, replicated regions spread over their
// owners), copies the pieces into the wanted boxes, converts them if asked, and installs the
// whole as one version: what readers see. Ranks at different steps never mix, nor pieces of one
// step from different runs (a piece published before another rank's run started); a rank that
// is gone leaves readers on the last step every rank had.
//
// Threads: offer() and retry() run on the rank services' threads, one at a time under `mutex_`; readers
// call acquire()/wait_for()/counts() from any thread. An installed version is never written.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/consumer/tensor_shaper.h"
#include "core/layout/pull_plan.h"
#include "core/consumer/version_store.h"
#include "core/model/installed_version.h"
#include "modelcast/consumer.h"

namespace modelcast::consumer {

class RankAssembler {
 public:
  // Receive buffers each rank's service needs: two versions held here (held_) and one receiving.
  // With fewer a rank holding versions the others skipped could never receive again.
  static constexpr std::size_t kBuffersPerRank = 3;

  // `ranks` services will offer versions (rank ids 0 .. ranks - 1). `wants`, `conversions` and
  // `expected_layout` are the consumer's (checked already); the layout is checked against the
  // whole tensors the ranks' pieces make, as each rank's pieces are not the model. on_update and on_error run on the offering rank's
  // service thread, outside the assembler's lock.
  // Assembled versions are installed in `readers` (acquire/wait_for/install only), which must
  // outlive the assembler. `target` says where assembled versions live and does the copies:
  // host memory (null), or a device consumer's device, whose rank services hold their pieces
  // in device memory.
  RankAssembler(std::size_t ranks, std::vector<TensorWant> wants, std::vector<TensorConversion> conversions,
                std::vector<TensorSpec> expected_layout, std::function<void(const ModelView&)> on_update, std::function<void(const Error&)> on_error,
                VersionStore& readers, std::function<void(std::size_t, std::vector<TensorWant>, std::uint64_t)> refine,
                std::unique_ptr<ShapingTarget> target = nullptr);

  // Rank `rank` installed `version` (its pieces, verified). Assembles and installs a new version
  // when every rank now holds one of a step not assembled yet. Never throws: a set of pieces that
  // does not make the wanted boxes (ranks that disagree on a tensor, a wanted box no rank holds)
  // is reported, and the last assembled version stays.
  void offer(std::size_t rank, std::shared_ptr<const detail::InstalledVersion> version);
  // Rank `rank`'s producer announced a new version, of `step` in its run `incarnation`. Every
  // publish is announced, so the gaps between these are the rank's own cadence, where the
  // versions offered are only those this consumer had time to fetch. A step announced before in
  // the same run (a heartbeat's) is ignored. Any thread.
  void announced(std::size_t rank, std::uint64_t incarnation, std::int64_t step);
  // Makes the step that waited for a buffer (every one held by views) once one is free, or for
  // memory (its allocation failed) once kMemoryRetry passed. Cheap when none waits: the rank
  // services call it at every turn of their loops. Throws only std::bad_alloc.
  void retry();

  struct Counts {
    std::uint64_t current_version = 0;
    std::uint64_t versions_installed = 0;
    std::uint64_t versions_rejected = 0;
    std::uint64_t wanted_bytes = 0;
    std::string last_error;  // the last refusal
    std::uint64_t last_error_order = 0;  // when it was said (next_error_order())
    // Why no version is made for now (a step waiting for a buffer, a piece let go), until one is.
    // Below every error in the consumer's stats: it is no cause of its own.
    std::string waiting;
  };
  Counts counts() const;

 private:
  using Held = std::shared_ptr<const detail::InstalledVersion>;
  // What an offer or a retry made, told outside `mutex_` (tell()).
  struct Outcome {
    std::shared_ptr<detail::InstalledVersion> installed;
    std::optional<Error> failure;  // a step refused, or waiting for room
    // A state of the ranks said once through on_error (out of step, a rank stopped): it refuses
    // no step, so it goes beside `failure`, never in its place.
    std::optional<Error> notice;
  };
  // Assembles and installs the newest step every rank holds, of one run, if not done (or refused)
  // already. Under mutex_.
  Outcome assemble_newest();
  void tell(Outcome outcome);
  // The pieces of every rank (one version each, of one step) as one version; null when a rank's
  // version lacks blocks the plan takes from it (fetched before it was asked for just those:
  // its next version has them). Throws Error.
  std::shared_ptr<detail::InstalledVersion> assemble(const std::vector<Held>& pieces);
  // Lets go of every held version of a rank's earlier run, and of those published before another
  // rank's current run started. Returns a configuration error to report once: ranks one of
  // which sends a run id and another none (a variable unset on one rank), which never assemble.
  std::optional<std::string> drop_outrun();

  // Which of rank `rank`'s three held versions to let go (0 or 1; the newest, 2, stays).
  std::size_t older_to_drop(std::size_t rank) const;
  // The first of rank `rank`'s held versions but its newest that a rank behind may still meet
  // and not every rank holds; `by_stride`: a rank behind meets only the steps its stride reaches.
  std::optional<std::size_t> oldest_to_keep(std::size_t rank, bool by_stride) const;
  // Whether rank q holds a version of `step`; whether it may still bring one: it has not reached
  // the step yet (a rank's versions come in step order within a run) and `stride` (its fetched
  // or its announced one; 0 or 1: any step) reaches it.
  bool holds_step(std::size_t q, std::int64_t step) const;
  bool may_bring(std::size_t q, std::int64_t step, std::uint64_t stride) const;
  // Why no step held can ever be put together (each lacks a rank that neither holds it nor will
  // bring it), naming what each rank holds; nothing where one still may be.
  std::optional<std::string> out_of_step() const;
  // announced()'s bookkeeping, under mutex_; offer() calls it too, with the step it brings: a
  // step published while the rank's link was down is never announced to this consumer.
  void note_announced(std::size_t rank, std::uint64_t incarnation, std::int64_t step);
  // Which ranks stopped publishing while another went on, naming them; nothing where none did.
  std::optional<std::string> stopped_ranks() const;
  // Asks each rank for just the regions the plan (made on `pieces`) takes from it, where that
  // changed or the rank's producer run did.
  void refine_wants(const layout::PullPlan& plan, const std::vector<Held>& pieces);

  const std::size_t ranks_;
  const std::vector<TensorWant> wants_;
  const std::vector<TensorSpec> expected_layout_;
  TensorShaper shaper_;  // for its conversions; under mutex_
  const std::function<void(const ModelView&)> on_update_;
  const std::function<void(const Error&)> on_error_;
  // Tells rank r's service what to fetch from now on of the producer run (incarnation) the plan
  // was made on (ConsumerService::set_wants: another run's versions it fetches with the options'
  // wants).
  const std::function<void(std::size_t, std::vector<TensorWant>, std::uint64_t)> refine_;
  // What each rank was last asked for, and for which of its runs; under mutex_. A rank restarted
  // at its endpoint is asked again even where the plan is as before: its service dropped the
  // regions of the run before.
  std::vector<std::vector<TensorWant>> asked_;
  std::vector<std::uint64_t> asked_run_;

  std::mutex callback_mutex_;  // held while on_update or on_error runs
  mutable std::mutex mutex_;
  // Per rank, two versions (older first): its newest, and the older one a rank behind it may
  // still meet (older_to_drop), else its last but one. Ranks that publish faster than a transfer
  // may each skip steps. Two is what a rank's service can spare of its three receive buffers
  // while it receives the next.
  std::vector<std::vector<Held>> held_;
  // Per rank, the step of its newest version offered and the greatest common divisor of the
  // gaps between its steps (0: not known, or its steps went back: a new run); under mutex_. A
  // rank that publishes every d-th step meets the others only at those (older_to_drop).
  std::vector<std::optional<std::int64_t>> last_step_;
  std::vector<std::uint64_t> stride_;
  // The same of the steps each rank announced (announced()), with the run they were of: a
  // consumer slower than the trainer may fetch only odd steps of one rank and even ones of
  // another, whose fetched strides then say 2 while both publish every step. Under mutex_.
  std::vector<std::optional<std::pair<std::uint64_t, std::int64_t>>> last_announced_;
  std::vector<std::uint64_t> announced_stride_;
  std::vector<std::uint64_t> announced_count_;  // steps each rank announced (heartbeats' repeats not)
  // The last steps each rank announced in its current run: a heartbeat naming one of them again
  // is no news.
  std::vector<std::vector<std::int64_t>> recent_announced_;
  static constexpr std::size_t kRecentAnnounced = 8;
  // Per rank, announced_count_ when it last announced a new step: the others' announcements
  // since are how long it has been quiet, counted in their publishes (stopped_ranks()).
  std::vector<std::vector<std::uint64_t>> counts_at_news_;
  static constexpr std::uint64_t kStoppedAnnouncements = 3;
  bool stopped_said_ = false;  // stopped_ranks() holds and was said; under mutex_
  std::string stopped_why_;    // what it said last; under mutex_
  static constexpr const char* kStopped = "a rank stopped publishing";
  // announced_count_ when out_of_step() began to hold (nullopt: it does not), and how many more
  // steps each rank must announce while it holds before it is said.
  std::optional<std::vector<std::uint64_t>> out_of_step_since_;
  static constexpr std::uint64_t kOutOfStepAnnouncements = 2;
  // The pieces (incarnation, version per rank) the current version was made of, and the last
  // set that did not assemble (not tried again).
  std::vector<std::pair<std::uint64_t, std::uint64_t>> assembled_from_;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> refused_;
  // A step waits for a buffer of target_ (views hold every one); written under mutex_, read
  // first without it by retry().
  std::atomic<bool> waiting_for_room_{false};
  // A step whose assembly found no memory (its buffer's allocation failed), tried again by
  // retry() from memory_retry_at_; written under mutex_, read first without it by retry().
  std::atomic<bool> waiting_for_memory_{false};
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kMemoryRetry{500};
  static constexpr unsigned kMemoryTries = 4;
  Clock::time_point memory_retry_at_{};  // under mutex_
  // The pieces (key_of) whose assembly last found no memory, how many tries found none, and
  // what `waiting` said of it; under mutex_.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> memory_key_;
  unsigned memory_tries_ = 0;
  std::string memory_waiting_said_;
  bool run_id_error_said_ = false;  // since the last version made; under mutex_
  // out_of_step() holds, and was said through on_error; under mutex_.
  bool out_of_step_said_ = false;
  static constexpr const char* kOutOfStep = "no step can be put together";
  Counts counts_;
  std::unique_ptr<ShapingTarget> target_;  // under mutex_
  VersionStore& store_;  // the readers'; assembled versions own their memory
};

}  // namespace modelcast::consumer
