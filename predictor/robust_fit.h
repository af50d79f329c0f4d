// Robust non-linear least squares for one curve family: Eigen's Levenberg-Marquardt inside
// iteratively re-weighted least squares with Huber weights, from several starting points.
#pragma once

#include <span>

#include "curve_families.h"

namespace modelcast::predictor::detail {

struct RobustFitOptions {
  int max_starts = 3;        // best-scoring initial guesses to refine
  int irls_rounds = 2;       // re-weighting rounds (1 = plain weighted LS)
  double huber_k = 1.345;    // in units of the robust residual scale
};

struct FitResult {
  bool ok = false;
  ParameterVector theta;
  double weighted_rmse = 0.0;  // with the base weights, not the Huber ones
};

// Fits family to (x, y) with base weights w (all same length, needs more points than
// parameters). Returns ok=false when no start converges to finite parameters.
FitResult robust_fit(const CurveFamily& family, std::span<const double> x, std::span<const double> y,
                     std::span<const double> w, const RobustFitOptions& options);

}  // namespace modelcast::predictor::detail
