#include "core/consumer/rank_assembler.h"
#include "core/consumer/error_order.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <cstring>
#include <string_view>
#include <unordered_map>

#include "common/clock.h"
#include "common/shown_text.h"
#include "core/layout/pull_plan.h"
#include "core/model/tensor_selection.h"
#include "core/wire/protocol.h"
#include "modelcast/error.h"

namespace modelcast::consumer {
namespace {

constexpr std::size_t kAlignment = 64;  // each assembled box starts a cache line

std::uint64_t aligned(std::uint64_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

// How far step `to` lies past step `from` (to > from). Done unsigned: steps need only rise, so
// any two int64 steps may be published, and their difference may not fit an int64.
std::uint64_t step_gap(std::int64_t from, std::int64_t to) {
  return static_cast<std::uint64_t>(to) - static_cast<std::uint64_t>(from);
}

// Which versions a set of pieces is, by producer run and version number: kept instead of the
// versions themselves, whose receive buffers the rank services need back.
std::vector<std::pair<std::uint64_t, std::uint64_t>> key_of(
    const std::vector<std::shared_ptr<const detail::InstalledVersion>>& pieces) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> key;
  for (const auto& p : pieces) key.emplace_back(p->manifest.incarnation, p->manifest.version);
  return key;
}

// Whether pieces may make one version: each was published after every other piece's producer
// run started. A trainer restarted as a whole publishes the steps of the run before again (from
// its checkpoint), so a step alone does not say which run a piece is of: an old run's piece and a
// new run's piece of one step are two different models. A piece published before another rank's
// run began is of an older run than that rank's piece, or of a run that rank restarted out of.
// The times are each rank host's CLOCK_REALTIME: ranks on several hosts must agree to better
// than a restarted rank takes to publish. A producer that sends no start (0) is not held to it.
// Times cannot tell an old run's rank that still publishes after a new run's rank started: run
// ids (ProducerOptions::run_id) can, and pieces of two run ids never make one version.
bool of_other_runs(const std::vector<std::shared_ptr<const detail::InstalledVersion>>& pieces) {
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    for (std::size_t j = 0; j < pieces.size(); ++j) {
      if (i == j) continue;
      if (pieces[i]->manifest.publish_time_ns < pieces[j]->manifest.start_time_ns) return true;
      if (pieces[i]->manifest.run_id != pieces[j]->manifest.run_id) return true;
    }
  }
  return false;
}

}  // namespace

RankAssembler::RankAssembler(std::size_t ranks, std::vector<TensorWant> wants, std::vector<TensorConversion> conversions,
                             std::vector<TensorSpec> expected_layout, std::function<void(const ModelView&)> on_update, std::function<void(const Error&)> on_error,
                             VersionStore& readers, std::function<void(std::size_t, std::vector<TensorWant>, std::uint64_t)> refine,
                             std::unique_ptr<ShapingTarget> target)
    : ranks_(ranks),
      wants_(std::move(wants)),
      expected_layout_(std::move(expected_layout)),
      shaper_(std::move(conversions)),
      on_update_(std::move(on_update)),
      on_error_(std::move(on_error)),
      refine_(std::move(refine)),
      asked_(ranks),
      asked_run_(ranks, 0),
      held_(ranks),
      last_step_(ranks),
      stride_(ranks, 0),
      last_announced_(ranks),
      announced_stride_(ranks, 0),
      announced_count_(ranks, 0),
      recent_announced_(ranks),
      counts_at_news_(ranks, std::vector<std::uint64_t>(ranks, 0)),
      target_(target ? std::move(target) : std::make_unique<ShapingTarget>(3)),
      store_(readers) {}

RankAssembler::Counts RankAssembler::counts() const {
  std::lock_guard lock(mutex_);
  return counts_;
}

void RankAssembler::offer(std::size_t rank, std::shared_ptr<const detail::InstalledVersion> version) {
  Outcome outcome;
  {
    std::lock_guard lock(mutex_);
    if (rank >= ranks_ || !version) return;
    auto& mine = held_[rank];
    const std::int64_t step = version->manifest.step;
    // The greatest common divisor of every gap seen in this run: a rank whose steps come at
    // uneven gaps (1, 2, 1, 2) has stride 1, as if it published every step. The last gap alone
    // took 2 there, and the step that rank was about to bring was let go, again and again.
    stride_[rank] =
        last_step_[rank] && step > *last_step_[rank] ? std::gcd(stride_[rank], step_gap(*last_step_[rank], step)) : 0;
    last_step_[rank] = step;
    // A step newer than the rank's last announced one, or of another run, was published while
    // this consumer did not hear it (its link down, or its producer restarted: a join reply
    // names the newest step, and no announcement comes with it): an announcement all the same.
    // A piece of the run before fetched after the new run was heard would take the rank back to
    // that run, which costs no more than its cadence learned again; refusing other runs left a
    // restarted rank said to have stopped while its step was assembled.
    const auto& heard = last_announced_[rank];
    if (!heard || heard->first != version->manifest.incarnation || heard->second < step) {
      note_announced(rank, version->manifest.incarnation, step);
    }
    mine.push_back(std::move(version));
    const auto misconfigured = drop_outrun();
    if (mine.size() > 2) mine.erase(mine.begin() + static_cast<std::ptrdiff_t>(older_to_drop(rank)));
    outcome = assemble_newest();
    // Said once through on_error (until a version is made, by an offer or a retry: whichever
    // ranks the message names, with three or more it changes from piece to piece) and kept as
    // the last error: unlike a run winding down, it never ends by itself. Not a rejected version
    // (none was made).
    if (misconfigured && !run_id_error_said_) {
      run_id_error_said_ = true;
      counts_.last_error = *misconfigured;
      counts_.last_error_order = next_error_order();
      if (!outcome.failure) outcome.failure = Error(ErrorCode::kInvalidArgument, *misconfigured);
    }
  }
  tell(std::move(outcome));
}

void RankAssembler::announced(std::size_t rank, std::uint64_t incarnation, std::int64_t step) {
  std::lock_guard lock(mutex_);
  if (rank >= ranks_) return;
  note_announced(rank, incarnation, step);
}

void RankAssembler::note_announced(std::size_t rank, std::uint64_t incarnation, std::int64_t step) {
  auto& last = last_announced_[rank];
  auto& recent = recent_announced_[rank];
  const bool same_run = last && last->first == incarnation;
  // A heartbeat's repeat, or a step announced before (a heartbeat sent while the newest
  // announced version was still being copied names the newest published one): no news. A step
  // below the last that is new is a step back (a publish that failed after it was announced,
  // then an earlier step): the stride is learned afresh, as for a new run.
  if (same_run && std::find(recent.begin(), recent.end(), step) != recent.end()) return;
  const bool gap = same_run && step > last->second;
  announced_stride_[rank] = gap ? std::gcd(announced_stride_[rank], step_gap(last->second, step)) : 0;
  if (!same_run) recent.clear();
  recent.push_back(step);
  if (recent.size() > kRecentAnnounced) recent.erase(recent.begin());
  last = std::make_pair(incarnation, step);
  ++announced_count_[rank];
  counts_at_news_[rank] = announced_count_;
}

void RankAssembler::retry() {
  if (!waiting_for_room_.load(std::memory_order_relaxed) && !waiting_for_memory_.load(std::memory_order_relaxed)) return;
  Outcome outcome;
  {
    std::lock_guard lock(mutex_);
    if (waiting_for_memory_.load(std::memory_order_relaxed)) {
      if (Clock::now() < memory_retry_at_) return;
      waiting_for_memory_.store(false, std::memory_order_relaxed);
    } else if (!waiting_for_room_.load(std::memory_order_relaxed) || !target_->has_room()) {
      return;
    } else {
      waiting_for_room_.store(false, std::memory_order_relaxed);
    }
    outcome = assemble_newest();
  }
  tell(std::move(outcome));
}

RankAssembler::Outcome RankAssembler::assemble_newest() {
  Outcome outcome;
  // The newest step every rank holds a version of (the newest such version of each rank), of
  // one run.
  std::vector<Held> pieces;
  for (auto it = held_[0].rbegin(); it != held_[0].rend() && pieces.empty(); ++it) {
    const std::int64_t step = (*it)->manifest.step;
    std::vector<Held> candidate{*it};
    for (std::size_t r = 1; r < ranks_; ++r) {
      auto match = std::find_if(held_[r].rbegin(), held_[r].rend(),
                                [&](const Held& h) { return h->manifest.step == step; });
      if (match == held_[r].rend()) break;
      candidate.push_back(*match);
    }
    // drop_outrun let go of every piece this would refuse: kept as the rule itself, whatever
    // the held versions are.
    if (candidate.size() == ranks_ && !of_other_runs(candidate)) pieces = std::move(candidate);
  }
  // Ranks out of step (one publishes even steps, another odd ones: an off-by-one in a trainer)
  // never meet: the model stayed as it was with no word, while every piece was fetched. The
  // strides are a forecast (a rank's gaps may change: 3, 3, then 2), and a rank a publish or two
  // behind meets the others when it catches up: said only once the ranks stayed out of step
  // while each announced kOutOfStepAnnouncements more steps. Then once through on_error, and in
  // `waiting` for as long as it lasts.
  if (auto why = pieces.empty() ? out_of_step() : std::nullopt) {
    if (!out_of_step_since_) out_of_step_since_ = announced_count_;
    bool lasted = true;
    for (std::size_t r = 0; r < ranks_; ++r) {
      lasted = lasted && announced_count_[r] >= (*out_of_step_since_)[r] + kOutOfStepAnnouncements;
    }
    if (lasted) {
      counts_.waiting = *why;
      if (!out_of_step_said_) outcome.notice = Error(ErrorCode::kState, *why);
      out_of_step_said_ = true;
    }
  } else {
    out_of_step_since_.reset();
    if (out_of_step_said_ && counts_.waiting.rfind(kOutOfStep, 0) == 0) counts_.waiting.clear();
    out_of_step_said_ = false;
  }
  // A rank that stopped publishing while the others go on (a trainer rank stuck, or one that no
  // longer calls publish()) leaves readers at the last step it published, as documented; said
  // once, and in `waiting` while it lasts, instead of not at all, below the other reasons to
  // wait (they say what to do). Ranks out of step are said first: their steps say nothing of
  // which rank is late.
  if (auto why = out_of_step_since_ ? std::nullopt : stopped_ranks()) {
    stopped_why_ = *why;
    if (counts_.waiting.empty() || counts_.waiting.rfind(kStopped, 0) == 0) counts_.waiting = *why;
    if (!stopped_said_) outcome.notice = Error(ErrorCode::kState, *why);
    stopped_said_ = true;
  } else if (stopped_said_) {
    if (counts_.waiting.rfind(kStopped, 0) == 0) counts_.waiting.clear();
    stopped_said_ = false;
  }
  if (pieces.empty()) return outcome;
  if (key_of(pieces) == assembled_from_ || key_of(pieces) == refused_) return outcome;
  // A step older than the one readers see is not gone back to (a rank that restarted and
  // publishes from an earlier step makes a newer version once every rank reaches it).
  auto current = store_.current();
  if (current && pieces.front()->manifest.incarnation == current->manifest.incarnation &&
      pieces.front()->manifest.step < current->manifest.step) {
    return outcome;
  }
  const std::int64_t step = pieces.front()->manifest.step;
  // Every buffer held by views: as on one producer, the step waits (said once) and is made when
  // one is released (retry(), at the rank services' turns), instead of being refused for good.
  if (!target_->has_room()) {
    if (!waiting_for_room_.exchange(true, std::memory_order_relaxed)) {
      outcome.failure = Error(ErrorCode::kResource,
                              "step " + std::to_string(step) + " waits: every buffer for assembled views is held by a "
                              "view still in use; updates resume when one is released (hold fewer views, or give "
                              "the consumer more buffers)");
      counts_.waiting = outcome.failure->what();
    }
    return outcome;
  }
  try {
    outcome.installed = assemble(pieces);
    if (!outcome.installed) return outcome;  // a rank's next version, fetched for the plan, completes it
    // Numbered as rank 0 numbered its piece: every consumer of the ranks (every member of a group,
    // a consumer restarted) calls a step by one number, the one rank 0's producer gave it (and
    // group_version counts). A set with another rank-0 piece is another step, or of another run
    // (restarted, a producer's numbers start again, as on one producer). One narrow case repeats
    // a number: a rank other than 0 restarted alone without a run id, its new piece of a step put
    // with the rank-0 piece that was assembled with its old one (modelcastd then keeps the first).
    outcome.installed->manifest.version = pieces.front()->manifest.version;
    assembled_from_ = key_of(pieces);
    counts_.current_version = outcome.installed->manifest.version;
    counts_.versions_installed++;
    counts_.waiting = stopped_said_ ? stopped_why_ : std::string();  // a rank stopped still is
    store_.install(outcome.installed);
    run_id_error_said_ = false;  // a version was made: a misconfiguration after it is said again
  } catch (const Error& e) {
    outcome.failure = e;
  } catch (const std::bad_alloc&) {
    outcome.failure = Error(ErrorCode::kResource, "out of memory while assembling the ranks' pieces of step " +
                                                      std::to_string(step));
  }
  if (outcome.failure) {
    outcome.installed.reset();
    // Memory the consumer cannot have now (a device allocation for the assembled views) is no
    // verdict on the pieces: put together again after kMemoryRetry (retry(), at the rank
    // services' turns: the last step of a run has no offer after it), said once per set of
    // pieces and in `waiting` meanwhile, and refused after kMemoryTries tries found none (memory
    // that never comes: the assembled copy larger than the device has free), as a consumer of one
    // producer does. Refused at once, the step was never made, for one failed allocation.
    const auto key = key_of(pieces);
    if (key != memory_key_) memory_tries_ = 0;
    memory_key_ = key;
    const bool no_memory = outcome.failure->code() == ErrorCode::kResource && ++memory_tries_ < kMemoryTries;
    if (no_memory) {
      const std::string said = "step " + std::to_string(step) + " waits for memory: " + outcome.failure->what() +
                               "; tried again in " + std::to_string(kMemoryRetry.count()) + " ms";
      memory_retry_at_ = Clock::now() + kMemoryRetry;
      waiting_for_memory_.store(true, std::memory_order_relaxed);
      counts_.waiting = said;
      memory_waiting_said_ = said;
      if (memory_tries_ > 1) {
        outcome.failure.reset();
        return outcome;
      }
      outcome.failure = Error(ErrorCode::kResource, said);
    } else {
      if (outcome.failure->code() == ErrorCode::kResource) {
        outcome.failure = Error(ErrorCode::kResource, std::string(outcome.failure->what()) + " (" +
                                                          std::to_string(kMemoryTries) + " tries found no memory)");
      }
      refused_ = key;
      counts_.versions_rejected++;
      // Nothing waits for memory now: the step it named is refused or given way.
      waiting_for_memory_.store(false, std::memory_order_relaxed);
      if (!memory_waiting_said_.empty() && counts_.waiting == memory_waiting_said_) counts_.waiting.clear();
    }
    counts_.last_error = outcome.failure->what();
    counts_.last_error_order = next_error_order();
  }
  return outcome;
}

void RankAssembler::tell(Outcome outcome) {
  // One callback at a time, whichever rank's thread brought it, and in install order: two rank
  // threads may reach here in the other order than they installed; the one installed first is
  // not told (readers already see the other). By what readers see, not by number: a restarted
  // rank 0 numbers its versions from the start again.
  std::lock_guard callbacks(callback_mutex_);
  if (outcome.notice && on_error_) on_error_(*outcome.notice);
  if (outcome.failure && on_error_) on_error_(*outcome.failure);
  if (outcome.installed && outcome.installed == store_.current() && on_update_) {
    on_update_(ModelView(outcome.installed));
  }
}

std::optional<std::string> RankAssembler::drop_outrun() {
  std::optional<std::string> misconfigured;
  // A rank's versions come in the order its service installed them, each of the run at its
  // endpoint then: its newest is of its current run, which started at S, and it brings none of
  // an earlier run again. So its own versions of earlier runs, and other ranks' versions
  // published before S, can never be put with any of its versions (of_other_runs). Let go at
  // once: their receive buffers are the rank services', which a kept one would hold from the new
  // run's versions.
  std::vector<std::int64_t> started(ranks_, 0);
  for (std::size_t r = 0; r < ranks_; ++r) {
    if (!held_[r].empty()) started[r] = held_[r].back()->manifest.start_time_ns;
  }
  // The run of the rank whose run started last is the newest: a rank of another run id is of an
  // older one (a new run's ranks all start after the old run's), and its pieces can never be put
  // with that rank's. Let go of them all, until that rank's run reaches it too.
  std::size_t newest = 0;
  for (std::size_t r = 1; r < ranks_; ++r) {
    if (started[r] > started[newest]) newest = r;
  }
  if (!held_[newest].empty()) {
    const std::string& run_id = held_[newest].back()->manifest.run_id;
    for (std::size_t r = 0; r < ranks_; ++r) {
      if (held_[r].empty() || held_[r].back()->manifest.run_id == run_id) continue;
      const std::string& theirs = held_[r].back()->manifest.run_id;
      counts_.waiting = "rank " + std::to_string(r) + "'s versions are of run " + shown_text(theirs) + ", rank " +
                        std::to_string(newest) + "'s of run " + shown_text(run_id) +
                        ", which started later: they are put with no other rank's";
      // A run id on one rank and none on another is no restart: one rank's configuration lacks it.
      if (theirs.empty() != run_id.empty()) {
        const std::size_t without = theirs.empty() ? r : newest, with = theirs.empty() ? newest : r;
        const Manifest& sent = held_[without].back()->manifest;
        // A producer made without rank and rank_count sends no run id whatever it was given: that
        // is the mistake to name (the run ids were the same).
        if (sent.rank != without || sent.rank_count != ranks_) {
          misconfigured = "the producer reached as rank " + std::to_string(without) + " says it is rank " +
                          std::to_string(sent.rank) + " of " + std::to_string(sent.rank_count) + "; rank 0 lists " +
                          std::to_string(ranks_) + " ranks: give each rank its rank and rank_count";
        } else {
          misconfigured = "rank " + std::to_string(without) + " sends no run id while rank " + std::to_string(with) +
                          " sends " + shown_text(theirs.empty() ? run_id : theirs) +
                          ": their pieces are never put together; give every rank of a run the same run_id (or none)";
        }
      }
      held_[r].clear();
      started[r] = 0;
    }
  }
  for (std::size_t r = 0; r < ranks_; ++r) {
    if (held_[r].empty()) continue;
    const std::uint64_t run = held_[r].back()->manifest.incarnation;
    std::int64_t others = 0;  // the latest start of another rank's current run, rank `latest`'s
    std::size_t latest = r;
    for (std::size_t q = 0; q < ranks_; ++q) {
      if (q != r && started[q] > others) {
        others = started[q];
        latest = q;
      }
    }
    // Said until a version is made (a run's first pieces published before its last rank's
    // producer was made go so too).
    for (const auto& h : held_[r]) {
      if (h->manifest.incarnation == run && h->manifest.publish_time_ns < others) {
        counts_.waiting = "rank " + std::to_string(r) + "'s version of step " + std::to_string(h->manifest.step) +
                          " was published before rank " + std::to_string(latest) +
                          "'s producer started (of another run, or before every rank was up): it is put with no "
                          "other rank's";
      }
    }
    std::erase_if(held_[r], [&](const Held& h) {
      return h->manifest.incarnation != run || h->manifest.publish_time_ns < others;
    });
  }
  return misconfigured;
}

std::optional<std::size_t> RankAssembler::oldest_to_keep(std::size_t rank, bool by_stride) const {
  const auto& mine = held_[rank];
  auto may_meet = [&](std::size_t q, std::int64_t step, bool& holds) {
    holds = holds_step(q, step);
    return holds || may_bring(q, step, by_stride ? stride_[q] : 0);
  };
  for (std::size_t i = 0; i + 1 < mine.size(); ++i) {
    const std::int64_t step = mine[i]->manifest.step;
    bool every_rank_holds = true;
    bool meetable = true;
    for (std::size_t q = 0; q < ranks_ && meetable; ++q) {
      if (q == rank) continue;
      bool holds = false;
      meetable = may_meet(q, step, holds);
      every_rank_holds = every_rank_holds && holds;
    }
    // A step every rank holds was assembled (or refused) when its last piece came.
    if (meetable && !every_rank_holds) return i;
  }
  return std::nullopt;
}

bool RankAssembler::holds_step(std::size_t q, std::int64_t step) const {
  return std::any_of(held_[q].begin(), held_[q].end(), [&](const Held& h) { return h->manifest.step == step; });
}

bool RankAssembler::may_bring(std::size_t q, std::int64_t step, std::uint64_t stride) const {
  if (held_[q].empty()) return true;
  const std::int64_t newest = held_[q].back()->manifest.step;
  if (newest >= step) return false;
  return stride <= 1 || step_gap(newest, step) % stride == 0;
}

std::optional<std::string> RankAssembler::out_of_step() const {
  for (std::size_t r = 0; r < ranks_; ++r) {
    if (held_[r].empty()) return std::nullopt;  // a rank yet to publish (in this run)
  }
  for (std::size_t r = 0; r < ranks_; ++r) {
    for (const auto& h : held_[r]) {
      const std::int64_t step = h->manifest.step;
      bool meetable = true;
      for (std::size_t q = 0; q < ranks_ && meetable; ++q) {
        meetable = q == r || holds_step(q, step) || may_bring(q, step, announced_stride_[q]);
      }
      if (meetable) return std::nullopt;
    }
  }
  std::string said = std::string(kOutOfStep) + ": ";
  for (std::size_t r = 0; r < ranks_; ++r) {
    said += (r == 0 ? "rank " : "; rank ") + std::to_string(r) + (held_[r].size() > 1 ? " holds steps" : " holds step");
    for (std::size_t i = 0; i < held_[r].size(); ++i) {
      said += (i == 0 ? " " : ", ") + std::to_string(held_[r][i]->manifest.step);
    }
    if (announced_stride_[r] > 1) said += " (it publishes every " + std::to_string(announced_stride_[r]) + " steps)";
  }
  return said + ", and none will bring a step another holds: every rank must publish the same steps";
}

std::optional<std::string> RankAssembler::stopped_ranks() const {
  // Ranks publish the same steps (out_of_step() says so where they do not), so the cadence judged
  // by is the coarsest any rank announced. A rank whose own cadence is not known (one step
  // announced in its run) is not judged: a rank publishing every 3rd step was taken for stopped
  // by the others' quicker steps before its second one. So a rank that stops after its first
  // step of a run goes unsaid.
  std::uint64_t stride = 1;
  for (std::size_t r = 0; r < ranks_; ++r) {
    if (!last_announced_[r]) return std::nullopt;  // a rank yet to publish: nothing to judge by
    stride = std::max(stride, announced_stride_[r]);
  }
  std::string said;
  for (std::size_t r = 0; r < ranks_; ++r) {
    if (announced_stride_[r] == 0) continue;
    const std::int64_t last = last_announced_[r]->second;
    // Stopped: another rank announced kStoppedAnnouncements new steps since this one last did,
    // and went past two of its publishes (a rank one publish late, or at uneven gaps, is not
    // stopped). Judged against the rank furthest on, not every other one: several ranks that
    // stopped together (a node's) are each said. Steps of the ranks' runs are compared as they
    // are: ranks of one trainer number their steps alike. Compared unsigned, as any step may be
    // published (steps need only rise): last + 2 * stride may not fit.
    std::optional<std::size_t> furthest;
    for (std::size_t q = 0; q < ranks_; ++q) {
      if (q == r || announced_count_[q] < counts_at_news_[r][q] + kStoppedAnnouncements) continue;
      const std::int64_t reached = last_announced_[q]->second;
      // Past two publishes, written so that 2 * stride need not fit either.
      if (reached <= last || step_gap(last, reached) - std::min(step_gap(last, reached), stride) <= stride) continue;
      if (!furthest || reached > last_announced_[*furthest]->second) furthest = q;
    }
    if (!furthest) continue;
    said += (said.empty() ? std::string(kStopped) + ": " : std::string("; ")) + "rank " + std::to_string(r) +
            " announced no step after " + std::to_string(last) + " while rank " + std::to_string(*furthest) +
            " went on to step " + std::to_string(last_announced_[*furthest]->second);
  }
  if (said.empty()) return std::nullopt;
  return said + "; the model stays at the newest step every rank published until each publishes again";
}

std::size_t RankAssembler::older_to_drop(std::size_t rank) const {
  // Keep the oldest version that a rank still behind may meet: a rank that lags several of
  // this rank's versions (it publishes late, or its transfers take longer) then meets it at
  // that step. Dropping the oldest instead would leave it chasing steps this rank no longer
  // holds, and nothing would ever assemble. The newest version is always kept. A rank behind
  // that publishes every d-th step meets only those: the version kept is one of them where this
  // rank holds one (it kept an odd step for a rank publishing even ones, dropped the even ones,
  // and no step ever assembled); where none is, as if it published every step.
  auto keep = oldest_to_keep(rank, true);
  if (!keep) keep = oldest_to_keep(rank, false);
  return keep && *keep == 0 ? 1 : 0;
}

std::shared_ptr<detail::InstalledVersion> RankAssembler::assemble(const std::vector<Held>& pieces) {
  const std::int64_t step = pieces.front()->manifest.step;
  // Every rank's pieces in the whole tensors' coordinates; a piece's id is its manifest index.
  std::vector<std::vector<layout::Piece>> by_rank(ranks_);
  for (std::size_t r = 0; r < ranks_; ++r) {
    const Manifest& m = pieces[r]->manifest;
    if (m.rank != r || m.rank_count != ranks_) {
      throw Error(ErrorCode::kLayoutMismatch, "the producer reached as rank " + std::to_string(r) + " says it is rank " +
                                                  std::to_string(m.rank) + " of " + std::to_string(m.rank_count) +
                                                  "; rank 0 lists " + std::to_string(ranks_) + " ranks");
    }
    if (!pieces[r]->buffer && !pieces[r]->device) {
      throw Error(ErrorCode::kState, "rank " + std::to_string(r) + "'s version has no bytes");
    }
    if ((pieces[r]->device != nullptr || pieces[r]->buffer->device_owned != nullptr) != target_->on_device()) {
      throw Error(ErrorCode::kState, "rank " + std::to_string(r) + "'s version is not where assembled versions go");
    }
    for (const auto& t : m.tensors) {
      layout::Piece piece;
      piece.tensor = t.spec.name;
      piece.global_shape = t.is_piece() ? t.global_shape : t.spec.shape;
      piece.dtype = t.spec.dtype;
      piece.box = t.is_piece() ? layout::Box(t.global_offset, t.spec.shape) : layout::Box::whole(t.spec.shape);
      by_rank[r].push_back(std::move(piece));
    }
  }
  const layout::PieceCatalog catalog(std::move(by_rank));
  // ConsumerOptions::expected_layout is of the model, so of the whole tensors; the ranks' services
  // do not check it on their pieces.
  if (!expected_layout_.empty()) {
    Manifest whole;
    whole.model = pieces.front()->manifest.model;
    whole.version = pieces.front()->manifest.version;  // the number it would be installed as
    for (const auto& tensor : catalog.tensors()) {
      TensorEntry entry;
      entry.spec = TensorSpec{tensor.name, tensor.dtype, tensor.shape};
      whole.tensors.push_back(std::move(entry));
    }
    try {
      check_expected_layout(expected_layout_, whole);
    } catch (const Error& e) {
      throw Error(e.code(), "step " + std::to_string(step) + ": " + e.what());
    }
  }
  // The consumer's wants, tensor by tensor (named ones the ranks lack are refused by the plan).
  layout::ConsumerLayout wanted;
  wanted.unlisted_whole = false;
  for (const auto& want : wants_) {
    if (want.tensor != "*" && !catalog.find(want.tensor)) {
      throw Error(ErrorCode::kLayoutMismatch, "step " + std::to_string(step) + ": no rank holds tensor '" +
                                                  want.tensor + "' (ConsumerOptions::wants)");
    }
  }
  // As on one producer: a conversion names a tensor of the model, of a dtype that converts.
  for (const auto& c : shaper_.conversions()) {
    if (c.tensor == "*") continue;
    const auto* tensor = catalog.find(c.tensor);
    if (!tensor) {
      throw Error(ErrorCode::kLayoutMismatch, "step " + std::to_string(step) + ": no rank holds tensor '" + c.tensor +
                                                  "' to convert to " + std::string(dtype_name(c.to)));
    }
    if (tensor->dtype != DType::kF32 && tensor->dtype != DType::kF16 && tensor->dtype != DType::kBF16) {
      throw Error(ErrorCode::kLayoutMismatch, "tensor '" + c.tensor + "' at step " + std::to_string(step) + " is " +
                                                  std::string(dtype_name(tensor->dtype)) +
                                                  ": only f32, f16 and bf16 tensors convert");
    }
  }
  for (const auto& tensor : catalog.tensors()) {
    const std::string what = "tensor '" + tensor.name + "' of shape " + layout::shape_to_string(tensor.shape) +
                             " at step " + std::to_string(step);
    auto boxes = TensorSelection::wanted_of(wants_, tensor.name, tensor.shape, what);
    if (!boxes) continue;
    wanted.tensors[tensor.name] = boxes->empty() ? layout::PullWant::whole() : layout::PullWant::of(std::move(*boxes));
  }
  // plan_pulls names any wanted box no rank holds; the message says which step it was.
  layout::PullPlan plan;
  try {
    plan = layout::plan_pulls(catalog, wanted);
  } catch (const Error& e) {
    throw Error(e.code(), "step " + std::to_string(step) + ": " + e.what());
  }

  refine_wants(plan, pieces);
  // Every byte the plan takes from a rank must be in the blocks that rank's version holds.
  for (std::size_t r = 0; r < ranks_; ++r) {
    const auto& held = pieces[r]->blocks_held;
    if (held.empty()) continue;
    const Manifest& rm = pieces[r]->manifest;
    auto holds = [&](std::uint64_t begin, std::uint64_t length) {
      if (length == 0) return true;
      for (std::uint64_t b = begin / rm.block_bytes; b <= (begin + length - 1) / rm.block_bytes; ++b) {
        if (b >= held.size() || !held[b]) return false;
      }
      return true;
    };
    for (const auto& range : plan.by_rank[r]) {
      const std::uint64_t first = rm.tensors[range.piece].offset + range.src_offset;
      for (std::uint64_t i = 0; i < range.count; ++i) {
        if (!holds(first + i * range.src_stride, range.length)) return nullptr;
      }
    }
  }

  auto installed = std::make_shared<detail::InstalledVersion>();
  Manifest& m = installed->manifest;
  const Manifest& first = pieces.front()->manifest;
  m.model = first.model;
  m.incarnation = first.incarnation;
  m.step = step;
  m.metadata = first.metadata;
  m.integrity = first.integrity;
  m.publish_time_ns = 0;
  for (const auto& p : pieces) m.publish_time_ns = std::max(m.publish_time_ns, p->manifest.publish_time_ns);

  // The boxes in the producer's dtype, back to back; then, for those a conversion names, the
  // converted bytes after them (the producer's bytes of a converted box are scratch).
  std::uint64_t bytes = 0;
  std::vector<std::uint64_t> at(plan.destinations.size());
  std::vector<const TensorConversion*> conversion(plan.destinations.size(), nullptr);
  std::vector<std::uint64_t> converted_at(plan.destinations.size(), 0);
  for (std::size_t d = 0; d < plan.destinations.size(); ++d) {
    at[d] = bytes;
    bytes += aligned(plan.destinations[d].bytes);
  }
  for (std::size_t d = 0; d < plan.destinations.size(); ++d) {
    const auto& dest = plan.destinations[d];
    conversion[d] = shaper_.conversion_for(TensorSpec{dest.tensor, dest.dtype, {}});
    if (!conversion[d]) continue;
    converted_at[d] = bytes;
    bytes += aligned(dest.box.volume() * dtype_size(conversion[d]->to));
  }
  std::byte* memory = target_->take(bytes);
  std::vector<layout::CopyRun> runs;
  for (std::size_t r = 0; r < ranks_; ++r) {
    const Manifest& rm = pieces[r]->manifest;
    // A device consumer's ranks hold their pieces in device memory (a copy, or the buffer a
    // one-sided route read into), as the target's memory is.
    const std::byte* base = pieces[r]->device ? static_cast<const std::byte*>(pieces[r]->device->base)
                                              : pieces[r]->buffer->memory.data();
    runs.clear();
    for (const auto& range : plan.by_rank[r]) {
      const std::uint64_t src = rm.tensors[range.piece].offset + range.src_offset;
      const std::uint64_t dst = at[range.destination] + range.dst_offset;
      for (std::uint64_t i = 0; i < range.count; ++i) {
        runs.push_back({src + i * range.src_stride, dst + i * range.dst_stride, range.length});
      }
    }
    target_->gather(memory, base, runs);
  }
  std::uint64_t wanted_bytes = 0;
  for (std::size_t d = 0; d < plan.destinations.size(); ++d) {
    const auto& dest = plan.destinations[d];
    const auto* tensor = catalog.find(dest.tensor);
    detail::ShapedTensor view;
    view.spec.name = dest.tensor;
    view.spec.dtype = dest.dtype;
    view.spec.shape.assign(dest.box.extents().begin(), dest.box.extents().end());
    view.spec.memory = target_->on_device() ? MemoryKind::kCuda : MemoryKind::kHost;
    view.spec.device = target_->device();
    view.in_receive_buffer = false;
    view.offset = at[d];
    if (!(dest.box == layout::Box::whole(tensor->shape))) {
      view.box_offset.assign(dest.box.offsets().begin(), dest.box.offsets().end());
      view.whole_shape = tensor->shape;
    }
    if (conversion[d]) {
      view.spec.dtype = conversion[d]->to;
      view.offset = converted_at[d];
      target_->convert(dest.dtype, memory + at[d], *conversion[d], memory + converted_at[d], dest.box.volume(),
                       view.scales, view.scale_block);
    }
    wanted_bytes += dest.bytes;
    installed->shaped.push_back(std::move(view));
  }
  // The plan goes tensor by tensor in name order (plans must not depend on registration order);
  // readers see the producer's registration order, as on one producer: rank 0's tensors as it
  // registered them, then those only later ranks hold, each rank's in its order. Stable, so a
  // tensor's boxes stay in the order they were asked for.
  std::unordered_map<std::string_view, std::size_t> registered_at;
  for (const auto& p : pieces) {
    for (const auto& t : p->manifest.tensors) registered_at.try_emplace(t.spec.name, registered_at.size());
  }
  std::stable_sort(installed->shaped.begin(), installed->shaped.end(),
                   [&](const detail::ShapedTensor& a, const detail::ShapedTensor& b) {
                     return registered_at.at(a.spec.name) < registered_at.at(b.spec.name);
                   });
  target_->install(*installed);
  installed->shapes_views = true;
  installed->update_latency = since_realtime(m.publish_time_ns);
  counts_.wanted_bytes = wanted_bytes;
  return installed;
}

void RankAssembler::refine_wants(const layout::PullPlan& plan, const std::vector<Held>& pieces) {
  if (!refine_) return;
  for (std::size_t r = 0; r < ranks_; ++r) {
    // The regions of each tensor this rank provides, and none of any other tensor. Found by name
    // through a map: a search per region was quadratic in the tensors (26 s for 65,536 a rank).
    std::vector<TensorWant> regions;
    std::unordered_map<std::string_view, std::size_t> region_of;
    for (const auto& [tensor, box] : plan.regions_by_rank[r]) {
      auto [it, added] = region_of.try_emplace(tensor, regions.size());
      if (added) regions.push_back(TensorWant::of(tensor, {}));
      regions[it->second].boxes.push_back(
          {{box.offsets().begin(), box.offsets().end()}, {box.extents().begin(), box.extents().end()}});
    }
    // A plan cut finer than a want may list: see below (too large for a request).
    const bool too_fine = std::any_of(regions.begin(), regions.end(),
                                      [](const TensorWant& w) { return w.boxes.size() > TensorSelection::kMaxBoxes; });
    // Said compactly: a tensor taken whole (the rank's whole piece of it) is wanted whole, and
    // "*" stands for the more numerous of the tensors taken whole and those not taken. A want
    // per tensor took more than a request carries past about 4,000 tensors a rank: the rank's
    // requests were dropped unread, and the consumer stayed on its first step for good.
    std::vector<TensorWant> wants;
    std::vector<std::string_view> whole, unwanted;
    for (const auto& entry : pieces[r]->manifest.tensors) {
      auto it = region_of.find(entry.spec.name);
      if (it == region_of.end()) {
        unwanted.push_back(entry.spec.name);
        continue;
      }
      const auto& boxes = regions[it->second].boxes;
      const std::vector<std::int64_t> origin =
          entry.is_piece() ? entry.global_offset : std::vector<std::int64_t>(entry.spec.shape.size(), 0);
      if (boxes.size() == 1 && boxes[0].offset == origin && boxes[0].extent == entry.spec.shape) {
        whole.push_back(entry.spec.name);
      } else {
        wants.push_back(std::move(regions[it->second]));
      }
    }
    const bool whole_by_default = whole.size() >= unwanted.size();
    for (const auto name : whole_by_default ? unwanted : whole) {
      wants.push_back(whole_by_default ? TensorWant::nothing(std::string(name)) : TensorWant::whole(std::string(name)));
    }
    wants.push_back(whole_by_default ? TensorWant::whole("*") : TensorWant::nothing("*"));
    // Still more than a request carries (regions of most tensors): the rank is asked for what the
    // consumer's own wants take of it, as before any plan (its whole pieces where it wants
    // everything), which costs bytes and works. Keeping its earlier ask (review) kept regions an
    // earlier plan took, and a plan that takes others found their blocks missing at every step.
    // The same for a plan cut finer than a want may list.
    if (too_fine || protocol::fetch_request_bytes(wants) > protocol::kMaxWantsBytes) wants = wants_;
    auto same = [](const std::vector<TensorWant>& a, const std::vector<TensorWant>& b) {
      if (a.size() != b.size()) return false;
      for (std::size_t i = 0; i < a.size(); ++i) {
        if (a[i].tensor != b[i].tensor || a[i].kind != b[i].kind || a[i].boxes.size() != b[i].boxes.size()) return false;
        for (std::size_t j = 0; j < a[i].boxes.size(); ++j) {
          if (a[i].boxes[j].offset != b[i].boxes[j].offset || a[i].boxes[j].extent != b[i].boxes[j].extent) return false;
        }
      }
      return true;
    };
    const std::uint64_t run = pieces[r]->manifest.incarnation;
    if (run == asked_run_[r] && same(wants, asked_[r])) continue;
    asked_[r] = wants;
    asked_run_[r] = run;
    refine_(r, std::move(wants), run);
  }
}

}  // namespace modelcast::consumer
