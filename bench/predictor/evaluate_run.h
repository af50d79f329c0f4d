// One run of the predictor benchmark: plan (forecast from the warm-up prefix, hedged plan,
// snapped to the logged steps) and replay (the online scheduler fed one logged point at a
// time), for every publish cost and every hedging variant, scored on the true curve.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <map>
#include <string>
#include <vector>

#include "forecast_quality.h"
#include "modelcast/predictor.h"
#include "reference_prior.h"

namespace modelcast::bench {

// A correction of a forecast's shape (tried as a prior learned across families; it did not
// help, so it lives in the benchmark, not the library). Every path of a forecast (mean,
// members, band) is mapped, around the run's current level L0 (median of the newest three
// observed losses), to
//   L0 + fall_scale * (path(last + speed * (t - last)) - L0),
// held at the path's end once last + speed * (t - last) passes it: fall_scale scales how much of
// the forecast's remaining fall happens, speed how soon (2: in half the steps). {1, 1}: identity.
struct ShapePrior {
  double fall_scale = 1.0;
  double speed = 1.0;
};


// A way of running the predictor. The benchmark scores several so that the hedging strength is
// chosen leave-one-family-out (on the other families) rather than on the family scored.
struct Variant {
  std::string name;
  bool hedge = true;                 // plan and replay on the expected path over scenarios
  predictor::HedgeOptions hedge_options;
  int refit_band_points = 5;         // online regime-change trigger (0: off)
  bool hindsight_check = true;       // online: defer a publish when waiting pays in expectation
  double band_trigger_width = 2.0;   // online: band widening for the regime-change trigger
  // The library's defaults (HedgeOptions{} for plans, OnlineOptions{} online) instead of the
  // fields above; never chosen leave-one-family-out (they were chosen on every family).
  bool library_defaults = false;
  // Chosen for plans only: the online scheduler refits as the run goes, and its hedging
  // candidates stay those it was chosen from before plans had an early-saturation scenario.
  bool plan_only = false;
  // Plans only: instead of one hedge, the equal-weight mixture of every hedge in mixture_of
  // (uncertainty about the hedge's own prior, averaged rather than chosen).
  std::vector<predictor::HedgeOptions> mixture_of = {};
};

struct EvalSettings {
  double warmup_fraction = 0.2;
  std::vector<double> cost_multipliers = {0.5, 2.0, 8.0};
  std::vector<Variant> variants;
  const ReferencePrior* prior = nullptr;  // analogue reference from comparable runs (optional)
  // Learning-rate schedules the runs were configured with, by run id (optional): a run that has
  // one gets it as ForecastOptions::lr_schedule in its plan and in its online replay.
  const std::map<std::string, predictor::LrSchedule>* lr_schedules = nullptr;
  // ForecastOptions::anneal_noise_prior for runs with a schedule; NaN: the library's default.
  double anneal_noise_prior = std::numeric_limits<double>::quiet_NaN();
  // Give the schedule to the hedge too (HedgeOptions::lr_schedule: regime changes placed where
  // the rate anneals), plan and replay; false (default): to the forecaster only.
  bool hedge_schedule = false;
  // Shape correction (shape_prior_fit.h) of the plan's forecast only, fitted on other families;
  // unset: none. The online scheduler's forecasts never get it.
  std::optional<ShapePrior> shape_prior;
  // Alternatively, a mixture of shape corrections (weights summing to 1): the plan's forecast is
  // the weighted mean of the forecast under each (paths, members and band alike).
  std::vector<std::pair<ShapePrior, double>> shape_mixture;
  // ForecastOptions::member_prior for the plan's forecast (fitted on other families); empty: none.
  std::map<std::string, double> member_prior;
  // Give member_prior to the online scheduler's forecasts too (every refit); false: plans only.
  bool member_prior_replay = false;
  // Plans only: replay outcomes are left empty (the caller copies them from a run without a
  // shape prior, which they do not depend on).
  bool skip_replay = false;
  // OnlineOptions::work_mode of the replays; they wait for the workers after every decision, as
  // a trainer whose workers keep up sees them.
  predictor::OnlineOptions::WorkMode work_mode = predictor::OnlineOptions::WorkMode::kInline;
};

// The warm-up used for a run of n logged points (the first k points form the prefix), and the
// forecast options a plan made from it gets (total steps, the run's schedule when given).
std::size_t warmup_points(std::size_t n, double warmup_fraction);
predictor::ForecastOptions plan_forecast_options(const predictor::LossLog& run, const EvalSettings& settings);

inline const std::vector<std::string> kBaselines = {"every_candidate", "every_e_steps", "viper_fixed_interval",
                                                    "viper_threshold"};

struct Outcome {
  bool has_gain = false;
  double regret = 0.0;            // % of the achievable gain lost
  // The same schedule scored on the denoised true curve (5-point running median) against the
  // optimum on that curve: what is lost to the curve's shape, not to evaluation noise that the
  // optimum in hindsight exploits and no schedule decided before seeing a point can. A second
  // figure next to regret, never a replacement for it.
  bool has_gain_denoised = false;
  double regret_denoised = 0.0;
  std::map<std::string, int> vs;  // +1 better, 0 tie, -1 worse than the baseline
  // How the schedule differs from the optimum in hindsight (where a loss comes from): more or
  // fewer publishes, the first one earlier or later, publishes at consecutive logged points
  // (a stall spent on one evaluation's progress), or none at all while the optimum publishes.
  int publishes = 0, optimal_publishes = 0, consecutive = 0;
  // The schedule scored and the optimum's, so that a loss can be traced to its publishes.
  std::vector<std::int64_t> publish_steps, optimal_publish_steps;
  bool first_earlier = false, first_later = false;
};

// How a plan came to be (predictor::explain_plan, over the plan's own scenarios), with the
// candidate its criterion picked and the best evenly spaced schedule both scored on the true curve
// as the plan is: did departing from even spacing, or keeping to it, pay?
struct PlanChoiceEval {
  std::string picked;  // forecast, evenly_spaced, no_publish
  bool candidate_is_even = false;  // nothing to decide: the candidate is an evenly spaced schedule
  double win_probability = 0.0;
  double expected_margin_pct = 0.0;
  Outcome candidate, evenly_spaced;
};

struct RunEval {
  std::string run, family;
  bool evaluated = false;
  // outcome[cost][mode][variant], mode 0 = plan, 1 = replay
  std::vector<std::vector<std::vector<Outcome>>> outcome;
  std::vector<std::vector<PlanChoiceEval>> plan_choice;  // [cost][variant]
  // Publishing every tenth of the run (the simple rule plans are held against), per cost: its
  // steps and regret, so that a plan's tie or loss against it can be traced.
  std::vector<Outcome> every_e;
  double replay_seconds = 0.0;  // slowest replay of this run (one cost, one variant)
  double mae = 0.0;             // plan-time point forecast, mean abs error on the true rest
  // Noise floor of any plan made in advance: regret of the exact plan on the true curve
  // smoothed (5-point running median), scored on the true curve; per cost, NaN: no gain.
  std::vector<double> smooth_oracle_regret;
  // That plan against publishing every tenth of the run, per cost: +1 better, 0 tie, -1 worse.
  std::vector<int> smooth_oracle_vs_every_e;
  // Floor of the online replay: regret of the scheduler (library defaults) whose forecaster
  // returns that smoothed true curve, fed the logged points one at a time; per cost, NaN: no
  // gain. What its decisions lose with the trend known; the rest of the replay's regret is the
  // forecast's.
  std::vector<double> trend_known_replay_regret;
  std::vector<int> trend_known_replay_vs_every_e;
  // The default forecaster (a plan's options, no analogue reference) at cuts through the run,
  // against the run's trend: the forecast's own error, apart from any schedule made on it.
  std::vector<ForecastCut> forecast_cuts;
};

RunEval evaluate_run(const predictor::LossLog& run, const std::string& family, const EvalSettings& settings);

}  // namespace modelcast::bench
