// Online publish scheduler for the producer: feed it every logged loss, ask it at each
// logged step whether to publish now. It refits the forecast as points arrive (on a geometric
// schedule, or sooner when the curve leaves the forecast's band; inline or on a worker thread),
// re-plans the rest of the run exactly whenever the previous plan may no longer hold, and
// commits only the next decision.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "modelcast/error.h"
#include "modelcast/predictor_forecast.h"
#include "modelcast/predictor_hedge.h"
#include "modelcast/predictor_planner.h"

namespace modelcast::predictor {

namespace detail {
template <class Job, class Result>
class OnlineWorker;  // online_worker.h
}  // namespace detail

struct OnlineOptions {
  ForecastOptions forecast;    // total_steps required
  PublishCosts costs;          // window_s NaN: forecast end of training minus warm-up time
  std::int64_t warmup_step = 0;  // inference starts when this step completes (must be observed)
  // Refit policy. Fitting the ensemble is the expensive part (tens of ms on a long log), so
  // the forecast is refitted only when one of these holds:
  //  - geometric schedule: the number of observed points grew by refit_growth since the last
  //    fit (at least one new point). On a log of n points after a warm-up of w points that is
  //    about log(n / w) / log(1 + refit_growth) fits (default 0.5: 6 fits for n = 10 w).
  //    0 refits at every point.
  //  - while fewer than refit_every_below points are observed it refits at every point (fits
  //    of short prefixes are cheap, and each new point changes them most).
  //  - band trigger (regime change): the newest points (all newer than the last fit) lie
  //    outside the forecast's band widened band_trigger_width times around its centre, on the
  //    same side, and the departure began with a jump larger than that widened half-band (new
  //    data, a data shift, a sudden drop or rise). refit_band_points of them, or one fit bin's
  //    worth (points / ForecastOptions::max_fit_points) on long per-step logs, whose mean is
  //    compared instead so that per-step noise alone does not trigger. The forecast is then
  //    refitted from the jump on, and later refits keep to the new regime. A gradual departure
  //    is left to the geometric schedule. 0 disables it.
  // Between refits decisions are taken from an exact plan on the cached forecast, anchored on
  // the newest observed point (its loss and time residuals against the forecast are added to the
  // rest of the forecast), so "publish now?" is weighed against a future that continues from
  // where the run actually is.
  double refit_growth = 0.5;
  int refit_band_points = 5;
  double band_trigger_width = 2.0;
  int refit_every_below = 24;
  // Where a decision's work runs. Refits (tens of ms on a long log) and exact plans (0.5-8 ms,
  // most of it the hindsight check of a proposed publish) are the only parts of a decision that
  // take more than a microsecond.
  //  - kInline: both inside should_publish(), on the caller's thread; the answer is the plan's
  //    for this point. Deterministic.
  //  - kRefitsInBackground: refits on a worker thread the scheduler owns. When a refit is due,
  //    should_publish() hands the worker a copy of the regime's points and goes on deciding on
  //    the current forecast, adopting the new one at the first decision after it is ready
  //    (typically the next: the forecast lags the newest points by about one evaluation); no
  //    further refit starts while one is running. The forecaster is then called on the worker, one call
  //    at a time. Plans stay on the caller's thread.
  //  - kBackground: refits and plans on one worker, so that the caller's thread only does
  //    bookkeeping. After each decision the worker refits if a refit is due (the first forecast
  //    included: decisions wait for it), then plans the current point on the newest forecast
  //    and, for the point expected next (one more logging interval on), finds the loss below
  //    which publishing there is the plan's first move. When that point arrives where expected
  //    (at that step, within one interval of the expected time), the decision is a comparison
  //    with that threshold. Otherwise (irregular logging, a loss outside the range searched, a
  //    worker that has not finished) it acts on the plan of the point before: a "publish now"
  //    there publishes at this point, one evaluation late. With a worker that keeps up it
  //    decides as kRefitsInBackground does (bench/RESULTS.md, "Predictor across curve
  //    families"); the worker spends tens of ms per decision. One that does not keep up (points
  //    logged faster than it plans: a replay of a whole log in a loop) answers only as often as
  //    it finishes, each answer for a point as many evaluations back as it is behind, and says
  //    "wait" in between: publishes its plans would have made between two answers are not made
  //    (OnlineStats::answered_late counts those decisions). Replays use kInline, or
  //    wait_for_background() after each point.
  // While fewer than refit_every_below points are observed, both modes refit and plan inline:
  // short logs are cheap to fit and plan, and there each point changes the forecast most.
  // wait_for_background() lets the workers finish before the next point (tests, replays that
  // must be reproducible).
  enum class WorkMode { kInline, kRefitsInBackground, kBackground };
  WorkMode work_mode = WorkMode::kInline;
  // The workers run under Linux's SCHED_BATCH: woken by a decision, a worker takes an idle core
  // or waits for the next scheduler tick instead of preempting the trainer inside
  // should_publish() (with every core busy that preemption made the decision's 99th percentile
  // 4 ms instead of 0.1 ms); its share of the CPU is unchanged. false: the workers keep the
  // scheduling policy of the thread that created them. OnlineStats::batch_scheduled_workers
  // says whether the system agreed.
  bool batch_scheduled_workers = true;
  // Re-planning. An exact plan costs hundreds of microseconds on a long horizon, and most
  // decisions are "wait". With reuse_plans a decision re-plans only when the last plan's "wait"
  // may no longer hold: a new forecast, a publish, new costs, the plan's first publish at most one
  // forecast step away, the newest loss below the anchor the plan was made on (only a lower
  // point can make publishing now the better move; the proof is at previous_plan_holds() in
  // online_scheduler.cpp), or the time residual moved by more than replan_time_tolerance x the
  // last logging interval. Otherwise the answer is "wait", as the fresh plan's would be: exactly
  // so at forecast steps on an unthinned horizon, and in every replay of the development curves
  // (bench/RESULTS.md) otherwise. false re-plans at every decision.
  bool reuse_plans = true;
  double replan_time_tolerance = 0.25;
  // Plan on the expected loss over the forecast's scenarios (predictor_hedge.h) rather than on
  // the point forecast, so that a flat forecast does not rule out publishing.
  bool hedge = true;
  HedgeOptions hedge_options{.change_probability = 0.0, .early_saturation_probability = 0.0};
  // When the plan's first move is "publish now", publish only if that also beats waiting in
  // expectation over the scenarios, each followed by its own best plan (hindsight check): it
  // values the option to wait for a real drop that a plan on the mean path ignores. Needs
  // hedge; costs two exact plans per scenario for each proposed publish.
  bool hindsight_check = true;
  // Plans consider at most this many future candidates (evenly thinned, "now" always kept),
  // bounding the cost of re-planning at every logged step on very long logs.
  int max_candidates = 160;
  // How to forecast (empty: forecast_curve). Lets callers cache fits or inject a known curve;
  // it is called from should_publish() on the scheduler's thread.
  std::function<Forecast(std::span<const CurvePoint>, const ForecastOptions&)> forecaster;
};

// Counters of the scheduler's work, for monitoring the refit policy's cost.
struct OnlineStats {
  std::size_t fits = 0;           // forecasts computed (calls of the forecaster)
  std::size_t band_refits = 0;    // of which triggered by points outside the uncertainty band
  std::size_t plans = 0;          // exact re-plans (at most one per decision after the warm-up step)
  std::size_t plans_reused = 0;   // decisions answered by the previous plan (reuse_plans)
  std::size_t deferred = 0;       // proposed publishes the hindsight check deferred
  std::size_t background_fits = 0;  // of fits, those computed on the worker thread
  std::size_t background_plans = 0;  // of plans, those computed on the worker thread
  // kBackground decisions: answered by the threshold prepared for them (as the plan at this point
  // would answer), or acting on the plan of an earlier point (late: the point was not where it
  // was expected, its loss outside the prepared range, or the worker had not finished).
  std::size_t answered_ahead = 0;
  std::size_t answered_late = 0;
  double worker_s = 0.0;  // time the workers spent on collected refits and plans (kBackground)
  // Workers running under SCHED_BATCH as the kernel reports it (OnlineOptions::batch_scheduled_workers,
  // or a policy inherited from the thread that created them), as of their last collected result:
  // 0 before any, or where the system refused.
  std::size_t batch_scheduled_workers = 0;
  // Times a step past ForecastOptions::total_steps made the horizon longer (see observe()); the
  // horizon's end now: total_steps, or past it.
  std::size_t horizon_extensions = 0;
  std::int64_t horizon_end = 0;
};

// Not thread-safe: one producer thread drives it (with WorkMode::kBackground it also owns two
// worker threads, which touch only the copies handed to them). Throws Error(kInvalidArgument) on
// non-increasing steps, non-finite values or negative costs.
class OnlineScheduler {
 public:
  // Throws Error(kInvalidArgument) for options out of range, every cost field included
  // (validate_costs), here rather than at the first decision after the warm-up.
  explicit OnlineScheduler(OnlineOptions options);
  ~OnlineScheduler();  // waits for a refit or plan still running on a worker
  // A moved-from scheduler may be destroyed or assigned to; its other calls throw Error(kState).
  OnlineScheduler(OnlineScheduler&&) noexcept;
  OnlineScheduler& operator=(OnlineScheduler&&) noexcept;

  // wall_time_s: producer's training clock, including the stalls of earlier publishes. A step
  // past ForecastOptions::total_steps (a run longer than it said) doubles the horizon's span past
  // the warm-up step until it holds the step, as for a run of unknown length: decisions go on
  // weighing publishes against the rest of the run (none was ever made past it). The forecast is
  // refitted to the new end (explicit future_steps end with the old one: the observed cadence
  // continues), after waiting for work on the workers; stats() counts it. Throws
  // Error(kInvalidArgument), keeping nothing of the point, for a step not after the last or
  // beyond kMaxCurveStep (2^53), a loss
  // that is not finite or beyond +-1e100, or a time that is negative or before the last point's.
  void observe(std::int64_t step, double loss, double wall_time_s);

  // Decision for the latest observed step (must equal `step`). Refits the forecast when the
  // refit policy (OnlineOptions) says so, then re-plans the rest of the run exactly from the
  // newest observed point on the current forecast, and returns true when publishing now is the
  // first move of that plan (WorkMode::kBackground: of the last plan that answered, see there);
  // the publish is then recorded with the current stall cost. Always false up to the warm-up
  // step. Rethrows what a worker's forecaster or plan threw.
  bool should_publish(std::int64_t step);

  // Update c and d from the producer's measured stall and delivery times. Throws
  // Error(kInvalidArgument), changing nothing, for a value that is negative or not finite.
  void set_costs(double stall_s, double delivery_s);

  // Blocks until the refit and the plan running on the workers (if any) are done, so that the
  // next decision uses their results. Rethrows what they threw. No effect in kInline mode.
  void wait_for_background();
  bool refit_in_flight() const;
  bool plan_in_flight() const;

  const std::vector<std::int64_t>& published_steps() const;
  // The forecast used for the latest decision (empty before the warm-up step).
  const Forecast& last_forecast() const;
  const OnlineStats& stats() const;
  // First step of the regime the forecast is fitted on (the first observed step until the
  // band trigger detects a change).
  std::int64_t regime_start_step() const;

 private:
  struct Fitted {
    Forecast forecast;
    std::vector<Scenario> scenarios;  // empty when not hedged
    std::optional<CurvePoint> fitted_to;  // the last point the forecast was fitted to
  };
  // The last exact plan, for previous_plan_holds().
  struct PlanMemo {
    bool valid = false;
    std::size_t forecast_version = 0, published = 0;
    double loss_shift = 0.0, time_shift = 0.0;
    bool publishes = false;  // the plan publishes at all
    std::int64_t first_publish = 0;
  };
  // Everything a plan reads, by value or immutable: it may run on a worker.
  struct PlanInput {
    std::shared_ptr<const Fitted> fitted;
    CurvePoint now;              // the newest point, on the stall-free clock
    bool in_horizon = false;     // now.step < total_steps: the forecast's future is a candidate
    bool anchored = false;       // loss_shift and time_shift were measured at now
    double loss_shift = 0.0, time_shift = 0.0;
    double stall_total_s = 0.0;  // stalls so far: the producer's clock is now.time_s + this
    double warmup_time_s = 0.0, origin_loss = 0.0, origin_servable_s = 0.0;
    std::size_t published = 0, forecast_version = 0;
    PublishCosts costs;
    int max_candidates = 0;
    bool hindsight_check = false;
    std::int64_t total_steps = 0;
    // The point expected next (the last logging interval again), to prepare its answer ahead
    // (kBackground); next_step 0: none.
    std::int64_t next_step = 0;
    double next_time_s = 0.0;
    // kBackground: a refit due, of these points, to run first; the plans are then made on it.
    std::vector<CurvePoint> refit_regime;
  };
  // The answer for the point expected next, prepared while the caller trains: at `step`, at a
  // time within [time_lo, time_hi] (one logging interval either side of the expected one) and
  // with nothing published since, a loss in [low, high] publishes when it is at most the
  // threshold, interpolated in time between the two found at time_lo and time_hi. Only a lower
  // point can make publishing now the better move (previous_plan_holds()), so there is one
  // threshold at each time; prepare_next() solves for it (see there). A loss just above it,
  // below gap_lo / gap_hi, is not answered: there the plan's own rounding may decide either way.
  struct Prepared {
    bool valid = false;
    std::int64_t step = 0;
    double time_lo = 0.0, time_hi = 0.0;
    double threshold_lo = 0.0, threshold_hi = 0.0;
    double gap_lo = 0.0, gap_hi = 0.0;
    double low = 0.0, high = 0.0;
    std::size_t published = 0;
    double stall_s = 0.0, delivery_s = 0.0;  // the costs it was prepared with
    // Publish or wait at this point (stall-free clock), or nothing where it does not answer.
    std::optional<bool> answer(const CurvePoint& point) const;
  };
  struct PlanOutcome {
    PlanMemo memo;
    bool publish = false;   // publishing at the input's step is the plan's first move, not deferred
    bool deferred = false;  // the plan's first move was to publish; the hindsight check said wait
    Prepared next;          // kBackground only
    std::shared_ptr<const Fitted> refitted;  // kBackground: the forecast fitted for this job
  };
  // The forecast (hedged when options.hedge) of the regime's points: what a refit computes, on
  // whichever thread runs it.
  static Fitted fit(std::span<const CurvePoint> regime, const OnlineOptions& options);
  // The exact plan from the input's newest point, and the hindsight check of a proposed publish:
  // what a decision computes, on whichever thread runs it.
  static PlanOutcome plan(const PlanInput& input);
  // The candidates plan() weighs: "now" first, then the forecast's future steps on the
  // producer's clock, thinned to max_candidates; source[k]: forecast index of candidate k (kNow
  // for the first); and the end of the inference window on that clock.
  struct Candidates {
    Trajectory future;
    std::vector<std::size_t> source;
    double window_end = 0.0;
  };
  static Candidates candidates(const PlanInput& input);
  // The answer for input.next_step, prepared ahead (kBackground's worker).
  static Prepared prepare_next(const PlanInput& input);
  static bool waiting_pays(const PlanInput& input, const Trajectory& future, const std::vector<std::size_t>& source,
                           double window_end);
  void adopt(Fitted fitted);
  // Throws Error(kState) naming `call` when this scheduler was moved from.
  void refuse_if_moved_from(const char* call) const;
  // Fewer than refit_every_below points: refits and plans run inline in every mode, as they are
  // cheap on a short log and each new point changes them most (a forecast one point behind cost
  // the whole gain on some short development runs).
  bool short_log() const { return observed_.size() < static_cast<std::size_t>(options_.refit_every_below); }
  std::size_t batch_scheduled_workers() const;  // OnlineStats::batch_scheduled_workers now
  void refit_if_due();
  // Takes the answer of the plan under way, if there is one by now (kBackground).
  std::optional<PlanOutcome> collect_plan();
  // The plan job under way threw: nothing is in flight any more (before the error goes on).
  void end_failed_plan_job();
  // Books a plan worker's answer in, adopting the forecast fitted with it.
  void absorb(PlanOutcome& answer);
  // The plan worker's job: a refit if one came with it, then the plan of the input's point and
  // the answer prepared for the next.
  static PlanOutcome plan_job(PlanInput& input, const OnlineOptions& options);
  // Records a publish at the newest point.
  void publish_now();
  // The plan's inputs at the newest point; prepare() hands them to the plan worker with the
  // point expected next (kBackground).
  PlanInput plan_input(bool in_horizon, double loss_shift, double time_shift, bool anchored) const;
  void prepare(std::int64_t step, bool in_horizon);
  // Makes the horizon hold `step`, a step past total_steps (see observe()).
  void extend_horizon(std::int64_t step);
  // The previous plan still answers this decision (see OnlineOptions::reuse_plans).
  bool previous_plan_holds(std::int64_t step, double loss_shift, double time_shift) const;
  // The newest points since the last fit lie outside its band; also gives the widened band's
  // half-width at the first of them.
  bool left_band(double* first_half_width) const;
  // Each point since the forecast was adopted against that forecast's band, kept with prefix
  // sums so that left_band reads a fit bin's mean in constant time: it scanned the bin
  // (observed_.size() / max_fit_points points) at every decision, which made a per-step log of
  // 10^6 points cost 88 us a decision late in the run, and half of a replay's time. Caller's
  // thread (left_band); extended by it, and started again when the forecast changes.
  struct BandResiduals {
    std::uint64_t fits = ~std::uint64_t{0};  // stats_.fits of the forecast they are against
    std::size_t from = 0;                    // observed_ index of the first
    std::vector<double> half;                // the widened half-width at each
    std::vector<double> z;                   // the residual in half-widths (0 where no band)
    std::vector<double> z_sum{0.0};          // prefix sums of z
    std::vector<std::size_t> bandless{0};    // prefix counts of points with no band there
  };
  mutable BandResiduals band_;

  OnlineOptions options_;
  std::vector<CurvePoint> observed_;  // times with past stalls removed
  std::vector<std::int64_t> published_;
  double stall_total_s_ = 0.0;
  double stall_unseen_s_ = 0.0;    // assumed stalls of publishes since the last observe()
  double last_wall_time_s_ = 0.0;  // observe()'s, as given: it never decreases
  double warmup_time_s_ = std::numeric_limits<double>::quiet_NaN();
  double origin_loss_ = 0.0;
  double origin_servable_s_ = 0.0;  // on the producer's clock
  std::size_t points_at_last_fit_ = 0;
  bool refit_now_ = false;  // the horizon grew: the forecast must reach its new end
  std::size_t fit_from_ = 0;  // first observed point of the current regime
  std::size_t band_points() const;
  // The current forecast and its scenarios, immutable once made, so that a plan on a worker can
  // hold it while the caller adopts a newer one.
  std::shared_ptr<const Fitted> fitted_;
  OnlineStats stats_;
  PlanMemo memo_;
  std::size_t forecast_version_ = 0;  // bumped whenever forecast_ or the costs change
  // Threads: everything above belongs to the caller's thread. refit_worker_ (kRefitsInBackground)
  // runs fits on copies of the points and options, plan_worker_ (kBackground) refits and plans
  // on a PlanInput (copies, and the immutable fitted_ it was made with); each meets the caller
  // only in its mailbox (online_worker.h).
  std::unique_ptr<detail::OnlineWorker<std::vector<CurvePoint>, Fitted>> refit_worker_;
  std::unique_ptr<detail::OnlineWorker<PlanInput, PlanOutcome>> plan_worker_;
  bool refit_in_flight_ = false;  // a refit is running (kRefitsInBackground) or due (kBackground)
  bool plan_in_flight_ = false;
  // kBackground: the points of a refit that is due, for the next plan job; whether the job in
  // flight carries one.
  std::vector<CurvePoint> refit_regime_;
  bool refit_in_plan_job_ = false;
  std::optional<PlanOutcome> answered_;  // a plan's answer that wait_for_background() took
  Prepared prepared_;  // the newest answer prepared for the point expected next
};

}  // namespace modelcast::predictor
