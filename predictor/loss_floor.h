// loss_floor: the lowest loss a forecast or a scenario may take, from what the run has shown.
#pragma once

#include <algorithm>
#include <limits>
#include <span>
#include <vector>

#include "modelcast/predictor_forecast.h"

namespace modelcast::predictor::detail {

// A run whose every observed loss is positive measures a loss that cannot go below 0 (cross-
// entropy, squared error): 0. Any other run (a negated return, a log-likelihood) has no floor.
inline double loss_floor(std::span<const CurvePoint> observed) {
  const bool positive = !observed.empty() && std::all_of(observed.begin(), observed.end(), [](const CurvePoint& p) { return p.loss > 0; });
  return positive ? 0.0 : -std::numeric_limits<double>::infinity();
}

// Raises every value below the floor to it; extrapolations, band edges and drops added to a path
// are not bounded by their own construction.
inline void raise_to_floor(std::vector<double>& values, double floor) {
  for (double& v : values) v = std::max(v, floor);
}

}  // namespace modelcast::predictor::detail
