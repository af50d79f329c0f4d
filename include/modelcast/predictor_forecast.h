// Loss-curve forecasting: an ensemble of parametric learning-curve families fitted
// by robust non-linear least squares, weighted by back-testing on the observed tail.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "modelcast/error.h"

namespace modelcast::predictor {

// The largest step, and total_steps, the predictor takes (and the most negative step): steps
// are fitted as doubles, which count integers exactly only up to 2^53, and plans add spans of
// steps, which must not overflow. Beyond it, calls throw Error(kInvalidArgument).
inline constexpr std::int64_t kMaxCurveStep = std::int64_t{1} << 53;

// The largest loss magnitude, and time in seconds, the predictor takes: fits square losses, and
// plans multiply times by rates and add them up, which overflow beyond it (a loss of 1.7e308
// drew a plot at NaN). The log readers refuse losses and times beyond it, the online scheduler
// losses (its times are its own clock's).
inline constexpr double kMaxCurveValue = 1e100;

// One logged point of a training run. time_s is the wall-clock training time at which
// the step completed (NaN when unknown).
struct CurvePoint {
  std::int64_t step = 0;
  double loss = 0.0;
  double time_s = std::numeric_limits<double>::quiet_NaN();
};

// Learning-rate schedule known to the caller, piecewise linear between (step, lr) knots
// (constant before the first and after the last knot). Any positive scale.
struct LrSchedule {
  std::vector<std::int64_t> steps;
  std::vector<double> lr;
};

// A curve of a comparable earlier run ("the same job, other seed/record"), as a function of
// progress = step / total_steps in [0, 1]. time_fraction (optional, same length) is the
// training time at that progress divided by the run's total training time.
struct ReferenceCurve {
  std::vector<double> progress;
  std::vector<double> loss;
  std::vector<double> time_fraction;
};

struct ForecastOptions {
  // Planned length of the run (the last step that will be logged). Required, > last observed step.
  std::int64_t total_steps = 0;
  // Future steps at which the loss will be logged, strictly increasing (those not after the last
  // observed step or past total_steps are skipped). Empty: continue the observed cadence (median
  // of the recent step gaps) up to total_steps, which is always included.
  std::vector<std::int64_t> future_steps;
  // When the continued cadence would give more future points than this, the cadence is
  // coarsened (bounds the planner's cost on logs with a point per step). >= 1.
  int max_future_points = 400;
  // Longer prefixes are averaged into this many consecutive bins before fitting (speed; the
  // bin means also damp per-step noise). <= 0: every point is fitted.
  int max_fit_points = 120;
  // When set, the families are fitted against the cumulative learning rate (progress made)
  // instead of the step, and a learning-rate "noise floor" term lets the loss drop when the
  // rate decays (see anneal_drop).
  std::optional<LrSchedule> lr_schedule;
  // Loss drop expected when the rate anneals from its peak to zero (loss units), e.g. measured
  // on an earlier run with the same schedule. NaN: estimated from the prefix when it already
  // contains enough decay to measure it (a quarter of the anneal seen, and the estimate above
  // twice its standard error); otherwise the noise prior below, when set; when it stays unknown
  // the schedule is not used (progress by cumulative rate alone would predict a slowdown during decay) and the
  // forecast's note says so.
  double anneal_drop = std::numeric_limits<double>::quiet_NaN();
  // Prior for an anneal drop the prefix cannot measure, in units of the prefix's point-to-point
  // loss noise (its standard deviation). Rationale: at a constant rate the iterate fluctuates
  // about the minimum, and the loss's excess over the minimum caused by that fluctuation is, for
  // a quadratic basin with a Gaussian iterate in d effective dimensions, sqrt(d / 2) times its
  // standard deviation across evaluations, i.e. at least that deviation (d >= 2); annealing the
  // rate to zero removes the excess. So 1 says "the drop is at least the noise" (a lower bound,
  // not a fit). 0 (default): no prior; the schedule is then set aside while the prefix shows too
  // little decay to measure the drop. Off by default because on the development curves of
  // bench/data it made plans worse (bench/RESULTS.md as of commit 4f57f34, predictor section,
  // 2026-11-24).
  double anneal_noise_prior = 0.0;
  // Prior reliability of the ensemble's curve families (by family name, e.g. "pow3"), e.g.
  // learned from how well each family's extrapolation did on earlier runs: each member's
  // back-test weight is multiplied by it and members are ranked by the product (0 drops a
  // family). Families not named get 1; empty (default): back-test weights alone. Values must be
  // finite and >= 0. Off by default: learned leave-one-family-out on the benchmark's curves it
  // improved the plans' median regret but worsened their p90 (bench/RESULTS.md as of commit
  // 4f57f34, predictor section, 2026-11-24, later: "a prior learned across families").
  std::map<std::string, double> member_prior;
  // Optional prior from a comparable run; joins the ensemble as two extra members.
  std::optional<ReferenceCurve> reference;
  // Fit settings.
  int starts_per_family = 3;         // multi-start initial guesses per family
  double backtest_fraction = 0.25;   // share of the (usable) prefix held out to weight members
  // The ensemble keeps at most this many of the best-back-tested members. The default keeps every
  // family that fits sanely (there are 11): chosen on a back-test of a few noisy points, the best
  // five were most often one shape that levels off early, in several parameterisations.
  int max_members = 16;
  double band_z = 1.0;               // half-width of the uncertainty band in standard deviations
  // The lowest loss the run can reach, when known (0 for cross-entropy, minus the best return for
  // a negated return, an MSE's noise floor). The families that fall towards 0 are fitted to the
  // loss above it, and bands and drops are sized on that height. NaN (default): 0 when every
  // observed loss is positive, none otherwise. -infinity: none, for a loss that sits far above 0
  // (a loss logged with a large constant added): without a floor the forecast is the same
  // whatever constant every loss is shifted by. Every observed loss must be >= a finite floor.
  double loss_floor = std::numeric_limits<double>::quiet_NaN();
};

struct ForecastMember {
  std::string family;
  double weight = 0.0;
  double backtest_rmse = 0.0;  // NaN when the prefix was too short to back-test
  std::vector<double> loss;    // this member's own forecast at Forecast::steps
};

// Forecast at the future logged steps (strictly after the last observed step).
struct Forecast {
  std::vector<std::int64_t> steps;
  std::vector<double> loss;     // ensemble mean
  std::vector<double> lower;    // uncertainty band; not below loss_floor
  std::vector<double> upper;
  std::vector<double> time_s;   // predicted training time (no publish stalls)
  std::vector<ForecastMember> members;
  bool fallback = false;        // true when no family could be trusted; see note
  std::string note;             // human-readable explanation of any fallback
  // The floor the forecast assumed (ForecastOptions::loss_floor, or the one the observed points
  // gave): -infinity for none; NaN for a forecast made elsewhere, whose users take it from the
  // observed points.
  double loss_floor = std::numeric_limits<double>::quiet_NaN();
};

// Throws Error(kInvalidArgument), naming the field and its value, unless forecast_curve takes
// `options` (all but how total_steps relates to the points observed). Thread-safe.
void check_forecast_options(const ForecastOptions& options);

// Forecasts the rest of the curve from the observed prefix (steps strictly increasing, finite
// values, at least one point). Never returns NaN/inf; when no family fits sanely it falls back
// to a conservative curve and sets fallback/note. Throws Error(kInvalidArgument) on bad input.
// Pure function: thread-safe, no shared state.
Forecast forecast_curve(std::span<const CurvePoint> observed, const ForecastOptions& options);

// Viper's (Ye et al., ICPP 2024, section 4.3) training-loss predictor, kept for baselines: fits
// its four functions Exp2 a·e^(-bx), Exp3 a·e^(-bx)+c, Lin2 ax+b and Expd3 c-(c-a)e^(-bx) to the
// observed losses (after step 0) by ordinary least squares, every point weighted alike, and keeps
// the one with the lowest mean squared error, however it extrapolates (a falling Lin2 goes on
// falling). note lists the four MSEs and the function kept; members holds that one. Same contract
// as forecast_curve; ignores reference, lr_schedule, member_prior and loss_floor. When no function can be
// fitted (too few points) it returns a flat curve flagged as fallback, as Viper would have no
// prediction of further improvement.
Forecast forecast_viper(std::span<const CurvePoint> observed, const ForecastOptions& options);

}  // namespace modelcast::predictor
