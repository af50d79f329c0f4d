// Hedged planning: a forecast is one guess, and a plan that trusts it blindly captures nothing
// when the guess is "flat" and the run later drops (a learning-rate decay, new data arriving).
// The forecast is turned into weighted scenarios (the ensemble's members, the edges of its band,
// and regime changes: further drops of the loss at several points of the rest of the run), and
// the plan minimises the EXPECTED cumulative inference loss over them.
//
// Under the planner's workflow model the CIL of a fixed schedule is linear in the loss values
// (times do not depend on the scenario), so the expected CIL of every schedule equals its CIL on
// the scenarios' weighted mean path, and the exact planner on that path is the exact
// expected-CIL optimum. The scenarios are kept for reporting how the plan would fare in each
// (expected regret and its spread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "modelcast/error.h"
#include "modelcast/predictor_forecast.h"
#include "modelcast/predictor_planner.h"

namespace modelcast::predictor {

// How plan_hedged picks among candidate schedules.
enum class PlanChoice {
  // Lowest expected CIL over the scenarios: the exact plan on the expected path (one time axis).
  kExpectedCil,
  // Lowest expected regret, each scenario's regret as a share of that scenario's own achievable
  // gain. Expected CIL lets the scenarios with the most CIL at stake decide; this counts every
  // scenario's shortfall relative to what it offered, which is how a plan is judged afterwards.
  kExpectedRegret,
  // Lowest worst-case regret (as a share of the gain) over the scenarios with any weight: a plan
  // that is never far from what the scenario turned out to allow, at some cost in expectation.
  kMinimaxRegret,
};

struct HedgeOptions {
  // Total probability of a regime change in the rest of the run: the loss falls by
  // change_depth x (its current height above the floor, Forecast::loss_floor; the observed
  // range without one) at one of change_times evenly spread points. This is
  // the mass that keeps a plan from betting everything on a flat forecast. The defaults (with
  // early_saturation_probability) are for plans made in advance: the candidates of the benchmark
  // best on the development curves of bench/data, all families together (the benchmark's
  // per-family figures choose leave-one-family-out); the online scheduler, which sees the run as
  // it goes, assumes neither a regime change nor early saturation (OnlineOptions::hedge_options).
  double change_probability = 0.15;
  double change_depth = 0.15;
  int change_times = 4;  // 1 to 1000
  // The learning-rate schedule the run was configured with, when known (total steps: the
  // forecast's last step). When the rate anneals after the last observed step, the regime
  // change is placed where it anneals instead of at change_times evenly spread points: one
  // scenario (probability change_probability) whose loss falls by change_depth x the current
  // height in proportion to how far the rate has annealed since now (a step decay drops at the
  // step, a cosine one gradually, a warmup-stable-decay run over its decay). A forecast made
  // with ForecastOptions::lr_schedule and a measured anneal_drop already contains the drop; this
  // scenario is for the drop a forecast from a prefix without decay cannot know.
  std::optional<LrSchedule> lr_schedule = std::nullopt;
  // Probability given to the two edges of the forecast's band (lower and upper path); they
  // leave the mean unchanged and widen the regret spread.
  double band_probability = 0.2;
  // Cap every scenario at the run's current level (median of the newest three observed losses):
  // a forecast that rises makes "publish now, before it gets worse" look urgent, and a stall
  // spent on that small gain is missing when the loss really drops.
  bool cap_at_current_level = true;
  // Probability that the run saturates sooner than forecast: the forecast's remaining fall
  // completes in half the remaining steps. Curve fits from a short prefix tend to stretch the
  // fall too far into the future, which makes a plan publish late; this scenario pulls
  // publishes earlier.
  double early_saturation_probability = 0.3;
  // Uncertainty of the time axis. When the prefix holds fewer than three intervals after step 0
  // (too few to tell whether steps are getting slower), the rest of the run may take longer
  // than a constant-rate extrapolation says; a plan that trusts the short estimate can conclude
  // that no publish lands inside the window and publish nothing. With this probability the
  // remaining time grows, as steps that slow down at a steady rate would make it, to between 1
  // and time_stretch times the estimate (two scenarios, (1 + time_stretch) / 2 and
  // time_stretch); plan_hedged then picks the schedule with the lowest expected CIL over these
  // time scenarios. A stated prior, not fitted: "the rest may take up to twice as long".
  double time_stretch_probability = 0.5;
  double time_stretch = 2.0;
  // How plan_hedged chooses its schedule (see PlanChoice). The regret-based rules pick among a
  // finite set of candidates (the exact plan on the expected path and on every scenario, evenly
  // spread schedules, no publish), so they are not exact optima of their criteria.
  PlanChoice plan_choice = PlanChoice::kExpectedCil;
  // The simple rule a plan must beat before it is trusted: the best evenly spaced schedule of 1
  // to 24 publishes over the forecast's steps (lowest expected CIL; no more publishes than
  // costs.max_slowdown_s allows, none when it allows none). The plan plan_choice picks
  // departs from it only when it does at least as well in scenarios holding this share of the
  // weight; otherwise the evenly spaced schedule is the plan. A plan that wins in expectation
  // through a minority of scenarios is a bet on the forecast that even spacing does not make.
  // 0: the plan_choice plan whenever it differs. In [0, 1].
  double depart_confidence = 0.5;
};

struct Scenario {
  std::string kind;          // "member:<family>", "band_lower", "band_upper", "change@<step>", "anneal"
  double weight = 0.0;       // weights sum to 1
  std::vector<double> loss;  // at Forecast::steps
};

// A possible time axis for the forecast's steps, with its probability.
struct TimeScenario {
  std::string kind;            // "forecast", "stretch x<factor>"
  double weight = 0.0;         // weights sum to 1
  std::vector<double> time_s;  // at Forecast::steps
};

struct HedgedForecast {
  Forecast forecast;  // loss = expected path over the scenarios; band, times, members unchanged
  std::vector<Scenario> scenarios;
  // At least one; the first is the forecast's own times. Loss and time scenarios are independent.
  std::vector<TimeScenario> time_scenarios;
  bool hedged = false;  // false when the forecast was declared certain (a zero-width band)
  PlanChoice plan_choice = PlanChoice::kExpectedCil;  // HedgeOptions::plan_choice, for plan_hedged
  double depart_confidence = 0.5;                     // HedgeOptions::depart_confidence, likewise
};

// Scenarios of the rest of the run around forecast (made from observed). A forecast whose band
// has zero width everywhere is a caller's statement of certainty (e.g. a known curve) and is
// returned unchanged as the only scenario. When every observed loss is positive, no scenario goes
// below 0. Throws Error(kInvalidArgument) on a malformed forecast
// (lengths differ), a non-finite observed loss or options out of range (probabilities outside
// [0, 1] or summing above 1, negative depth, change_times outside [1, 1000], time_stretch < 1,
// a malformed lr_schedule).
HedgedForecast hedge_forecast(std::span<const CurvePoint> observed, const Forecast& forecast,
                              const HedgeOptions& options);

// The plan chosen by hedged.plan_choice. kExpectedCil: the plan with the lowest expected CIL
// over the hedged forecast's loss and time scenarios. With one time scenario this is the exact plan on the expected loss path (CIL is linear in the
// loss for fixed times). With several, CIL is no longer linear in them, so the candidates are the
// exact plan for each time scenario and evenly spread schedules of 1 to 24 publishes (up to the
// slowdown cap) over the forecast's steps, and the one with the lowest expected CIL wins (ties: fewer publishes).
// kExpectedRegret / kMinimaxRegret: among the exact plans on the expected path and on every
// (loss, time) scenario, evenly spread schedules of 1 to 24 publishes and no publish, the one with
// the lowest expected / worst regret over the scenario pairs with an achievable gain (ties: lower
// expected CIL, then fewer publishes); without such a pair, the kExpectedCil plan.
// That plan is then held to the best evenly spaced schedule (hedged.depart_confidence; see
// explain_plan). publish_steps are forecast steps; cil is the expected CIL over the (loss, time)
// scenario pairs. warmup_index indexes prefix.
ScheduleResult plan_hedged(std::span<const CurvePoint> prefix, std::size_t warmup_index,
                           const HedgedForecast& hedged, const PublishCosts& costs);

// A plan set against the simple rule it may depart from: the best evenly spaced schedule (1 to
// 24 publishes spread over the forecast's steps, as many as the slowdown cap allows; lowest
// expected CIL, ties: fewer; no publish when the cap or the forecast leaves no room), both valued
// over the hedged forecast's (loss, time) scenario pairs. Says which plan_hedged keeps, and why.
struct PlanChoiceReport {
  // "evenly_spaced": the plan is that schedule (because the candidate is itself evenly spaced, or
  // because it does at least as well in too little of the weight); "forecast": the candidate, an
  // exact plan on the forecast's expected path or on a scenario; "no_publish": the candidate,
  // publishing nothing.
  std::string picked;
  std::vector<std::int64_t> publish_steps;  // what plan_hedged returns
  std::vector<std::int64_t> candidate;      // what hedged.plan_choice picked among its candidates
  double candidate_cil = 0.0;               // its expected CIL over the scenario pairs
  std::vector<std::int64_t> best_evenly_spaced;
  double best_evenly_spaced_cil = 0.0;
  // What departing to the candidate is expected to win, as a share of the expected achievable
  // gain sum w (none - best) in %: (even's CIL - the candidate's) / gain. 0 without a gain.
  double expected_margin_pct = 0.0;
  // Total weight of the scenario pairs in which the candidate does at least as well as the best
  // evenly spaced schedule, against the share hedged.depart_confidence requires to depart.
  double win_probability = 0.0;
  double required_confidence = 0.0;
  std::string reason;  // one sentence, for people
};

// The decision plan_hedged makes once its criterion has picked `candidate`. Throws
// Error(kInvalidArgument) for a warm-up index past the prefix or steps evaluate_cil refuses. Pure.
PlanChoiceReport explain_plan(std::span<const CurvePoint> prefix, std::size_t warmup_index,
                              const HedgedForecast& hedged, const PublishCosts& costs,
                              std::span<const std::int64_t> candidate);

// What modelcast-tune plan computes, and Python's modelcast.predictor.plan: the point forecast of
// the rest of the run from the prefix (forecast_curve with options), hedged with the default
// HedgeOptions, and plan_hedged on it from the prefix's last point (the warm-up step).
struct PrefixPlan {
  Forecast point_forecast;
  HedgedForecast hedged;  // hedged.forecast.loss: the expected path the plan is made on
  ScheduleResult plan;    // cil: the expected CIL over the loss and time scenarios
  PlanChoiceReport choice;  // why plan is what it is (choice.publish_steps == plan.publish_steps)
};
PrefixPlan plan_prefix(std::span<const CurvePoint> prefix, const ForecastOptions& options, const PublishCosts& costs);

// How a schedule fares in each scenario, against that scenario's own optimum.
// A scenario here is a pair of a loss scenario and a time scenario, weighted by the product of
// their weights.
struct RegretSpread {
  // Expected regret: the expected shortfall of the schedule behind each scenario's optimum over
  // the expected achievable gain, sum w (cil - best) / sum w (none - best), over the scenarios
  // with an achievable gain (in %). A scenario with almost nothing to gain cannot dominate it, as
  // it would a mean of the per-scenario ratios.
  double expected_pct = 0.0;
  double p10_pct = 0.0, p50_pct = 0.0, p90_pct = 0.0;  // weighted quantiles of the per-scenario regret %
  std::size_t scenarios = 0;         // scenarios with an achievable gain
  std::size_t pairs = 0;             // scenarios weighed: loss scenarios x time scenarios
  double gain_probability = 0.0;     // total weight of those with a gain
};

// Regret of publish_steps (steps of the forecast grid or the prefix after the warm-up) in every
// pair of loss and time scenario: prefix + scenario path on that time axis. warmup_index indexes prefix.
RegretSpread regret_spread(std::span<const CurvePoint> prefix, std::size_t warmup_index,
                           const HedgedForecast& hedged, const PublishCosts& costs,
                           std::span<const std::int64_t> publish_steps);

}  // namespace modelcast::predictor
