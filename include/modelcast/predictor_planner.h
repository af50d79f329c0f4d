// Publish planning under this workflow model:
//  - step k completes at logged training time t(k); each publish stalls training by stall_s,
//    so every later step completes stall_s later; the published version becomes servable
//    delivery_s after its stall ends;
//  - inference starts when the warm-up step W completes, serving W's model, and lasts
//    window_s (default t(last) - t(W)); requests arrive at request_rate per second;
//  - CIL = request_rate x integral over the window of the served version's loss.
// All functions here are pure (no shared state, thread-safe), take their inputs by const
// reference and return values; they throw Error(kInvalidArgument) on malformed input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "modelcast/error.h"
#include "modelcast/predictor_forecast.h"

namespace modelcast::predictor {

// Logged (or forecast) points: strictly increasing steps, finite loss and time.
struct Trajectory {
  std::vector<std::int64_t> steps;
  std::vector<double> loss;
  std::vector<double> time_s;
};

// The logged points as a trajectory. No validation: the caller's points are already checked.
Trajectory trajectory_of(std::span<const CurvePoint> points);

// The logged prefix followed by a forecast of the rest: what the planner plans on. Forecast
// times are clamped so they never run backwards from the last logged point. Throws
// Error(kInvalidArgument) unless the forecast has as many losses and times as steps.
Trajectory extend_with_forecast(std::span<const CurvePoint> prefix, const Forecast& forecast);

struct PublishCosts {
  double stall_s = 0.0;        // c: training stall per publish (>= 0)
  double delivery_s = 0.0;     // d: stall end -> servable (>= 0)
  double request_rate = 1.0;   // r: requests per second (> 0)
  double window_s = std::numeric_limits<double>::quiet_NaN();  // H; NaN: t(last) - t(W)
  double max_slowdown_s = std::numeric_limits<double>::infinity();  // cap on stall_s x publishes
};

struct ScheduleResult {
  std::vector<std::int64_t> publish_steps;
  double cil = 0.0;
  double slowdown_s = 0.0;
};

// How validate_costs names each field in its messages, after `context` (the online scheduler
// and the C ABI name the fields as their callers set them).
struct PublishCostNames {
  std::string_view context;
  std::string_view stall_s = "publish cost (stall)";
  std::string_view delivery_s = "update latency (delivery)";
  std::string_view request_rate = "request rate";
  std::string_view window_s = "window";
  std::string_view max_slowdown_s = "max slowdown";
};

// Throws Error(kInvalidArgument), naming the field and its value, unless stall_s and delivery_s
// are finite and >= 0, request_rate is finite and > 0, window_s is NaN (not given) or finite and
// > 0, and max_slowdown_s is >= 0 (infinity: no cap). The one check of every entry point.
void validate_costs(const PublishCosts& costs, const PublishCostNames& names = {});

// How many publishes max_slowdown_s allows at stall_s, at most `limit` (also with no cap: an
// infinite max_slowdown_s or a zero stall). Costs as validate_costs() accepts them; any thread.
std::size_t publishes_allowed(const PublishCosts& costs, std::size_t limit);

// Throws Error(kInvalidArgument) unless the trajectory is well formed, warmup_index is valid
// and the costs are finite and non-negative (rate > 0).
void validate_problem(const Trajectory& curve, std::size_t warmup_index, const PublishCosts& costs);

// CIL of publishing at publish_steps (each must be a logged step after W, strictly
// increasing; throws Error(kInvalidArgument) naming the offending step otherwise).
double evaluate_cil(const Trajectory& curve, std::size_t warmup_index, const PublishCosts& costs,
                    std::span<const std::int64_t> publish_steps);

// Exact minimum-CIL schedule by dynamic programming over (last publish, number of publishes),
// honouring max_slowdown_s. Ties go to fewer publishes. Only record lows (a loss below every
// earlier one) can be published in some optimum, so n counts those: O(n log n) per layer (number
// of publishes), and states that cannot beat the best schedule found even if every later
// candidate were published for free are dropped, which ends the layers. A noisy log of 10^6
// points has a few hundred record lows (milliseconds); a smooth one is all record lows (10^5
// points: about 10 s and 350 MB on one core). Thread-safe.
ScheduleResult plan_optimal(const Trajectory& curve, std::size_t warmup_index,
                            const PublishCosts& costs);

// plan_optimal for a curve known in full (a logged run, scored in hindsight), whatever constant
// its loss holds. plan_optimal counts schedules within 1e-9 of the CIL as tied, which protects a
// forecast's plan from its own rounding (falls of about 1e-10 of the level) but also swallows
// real gains where a constant dwarfs the loss's fall (a loss of 1000 falling by 1e-5: every
// schedule tied, and the "optimum" lost to a plain schedule, a regret of -60 %). A constant adds
// the same to every schedule's CIL, so here the loss is measured from its lowest point after
// the warm-up; the CIL returned is evaluate_cil of the curve as given. Thread-safe.
ScheduleResult plan_in_hindsight(const Trajectory& curve, std::size_t warmup_index, const PublishCosts& costs);

// Mid-run planning for the online scheduler: the last published (or warm-up) version has
// origin_loss and becomes/became servable at origin_servable_s; publishes_done publishes have
// already stalled training; the window ends at window_end_s. future holds the candidate steps
// (the first may be "now") with times on the same clock, already including past stalls.
ScheduleResult plan_from(double origin_loss, double origin_servable_s, int publishes_done,
                         double window_end_s, const Trajectory& future, const PublishCosts& costs);

// --- baselines (return publish steps) ---
std::vector<std::int64_t> every_candidate_schedule(const Trajectory& curve, std::size_t warmup_index);
// First logged step at or after each multiple of every_steps that lies after W.
std::vector<std::int64_t> every_n_steps_schedule(const Trajectory& curve, std::size_t warmup_index,
                                                 std::int64_t every_steps);
// Viper's fixed-interval rule (viper_fixed_interval in predictor_viper.h: its steps only).
std::vector<std::int64_t> fixed_interval_schedule(const Trajectory& predicted, std::size_t warmup_index,
                                                  const PublishCosts& costs);
// Viper's greedy loss-drop rule, its threshold from the warm-up (viper_greedy in
// predictor_viper.h: its steps only).
std::vector<std::int64_t> threshold_schedule(const Trajectory& predicted, std::size_t warmup_index,
                                             const PublishCosts& costs);

// Maps planned steps (e.g. on a forecast grid) to the first logged step after W at or after
// each of them; drops steps past the end and duplicates. Throws Error(kInvalidArgument) for a
// malformed curve, planned steps out of order, or a warm-up index past its end.
std::vector<std::int64_t> snap_to_candidates(std::span<const std::int64_t> planned,
                                             const Trajectory& curve, std::size_t warmup_index);

}  // namespace modelcast::predictor
