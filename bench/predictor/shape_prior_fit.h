// Priors learned across curve families for the benchmark's --cross-family-prior: a shape
// correction (ShapePrior, evaluate_run.h) chosen on a fixed grid of (fall_scale, speed), or
// a reliability per ensemble member (ForecastOptions::member_prior), each from the error of the
// plan-time forecasts of every run against what the run then did. The prior for a held-out
// family uses the OTHER families only; nothing of the held-out family (and no regret) enters it.
#pragma once

#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "evaluate_run.h"

namespace modelcast::bench {

// The forecast with a shape correction applied (ShapePrior, evaluate_run.h); observed: its prefix.
predictor::Forecast apply_shape_prior(std::span<const predictor::CurvePoint> observed, const predictor::Forecast& forecast,
                                      const ShapePrior& prior);

struct ShapePriorFit {
  std::vector<ShapePrior> grid;  // grid[0] is the identity {1, 1}
  // family -> per grid cell, the family's mean relative error (see fit_shape_prior)
  std::map<std::string, std::vector<double>> family_error;
  std::map<std::string, int> family_runs;
  // Per scored run: its family and the grid cell with its own lowest error (in-sample for that
  // run; a run of another family is all a held-out family's mixture ever sees).
  std::vector<std::pair<std::string, std::size_t>> run_best;

  // The other families' runs' own best corrections as an equal-weight mixture per family (each
  // family's runs share 1 / (families - 1)): cell -> weight, summing to 1.
  std::map<std::size_t, double> mixture(const std::string& held_out) const;

  // The cell with the lowest mean over families other than held_out ("" = every family) of the
  // families' mean relative errors (each family counts once, whatever its number of runs);
  // ties go to the earlier cell (the identity first).
  std::size_t best(const std::string& held_out) const;
  // That cell's objective for the same families.
  double objective(std::size_t cell, const std::string& held_out) const;
};

// runs: (run, family). Each run's plan-time forecast (prefix of warmup_points(n), options
// plan_forecast_options) is corrected by every grid cell and scored by the mean absolute error
// on the rest of the logged run divided by that of a flat forecast at the current level (the
// median of the newest three prefix points): 1 = no better than flat, 0 = exact. Runs where the
// flat forecast's error is 0 are skipped.
ShapePriorFit fit_shape_prior(const std::vector<std::pair<const predictor::LossLog*, std::string>>& runs,
                              const EvalSettings& settings, int threads);

// Reliability of each curve family of the ensemble, learned across runs: every run's plan-time
// forecast is made with all sane members kept, and each member's own path is scored like
// fit_shape_prior's cells (mean absolute error on the rest of the run over a flat forecast's).
struct MemberPriorFit {
  // family -> member name -> that member's mean relative error over the family's runs where it
  // was fitted
  std::map<std::string, std::map<std::string, double>> error;
  // Prior for a held-out family: per member, 1 / E^2 with E the mean over the other families of
  // their mean relative errors (the back-test weights' inverse-square form, on errors measured
  // past the prefix on other runs), scaled so that the members' mean prior is 1.
  // power: the exponent of 1 / E (2 by default; other values only as a sensitivity check).
  std::map<std::string, double> prior(const std::string& held_out, double power = 2.0) const;
};

MemberPriorFit fit_member_prior(const std::vector<std::pair<const predictor::LossLog*, std::string>>& runs,
                                const EvalSettings& settings, int threads);

}  // namespace modelcast::bench
