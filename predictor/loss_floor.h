// loss_floor: the lowest loss a forecast or a scenario may take, from what the run has shown or
// the caller stated, and the scale that bands and drops "relative to the loss" are measured on.
#pragma once

#include <algorithm>
#include <cmath>
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

// Where a run's losses are measured from. A band "of 1 % of the loss" or a drop "of 15 % of the
// loss" means of the loss above its floor; without a floor the loss has no origin, and the
// observed range is the one scale that does not move when every loss is shifted by a constant
// (a log-likelihood of -50 or of -5000 is the same run).
struct LossOrigin {
  double floor = -std::numeric_limits<double>::infinity();  // -inf: none
  double range = 0.0;                                       // observed max - min

  // `floor`: the floor in force (loss_floor(observed) unless the caller stated one).
  static LossOrigin of(std::span<const CurvePoint> observed, double floor) {
    LossOrigin o;
    o.floor = floor;
    if (!observed.empty()) {
      const auto [lo, hi] = std::minmax_element(observed.begin(), observed.end(),
                                                [](const CurvePoint& a, const CurvePoint& b) { return a.loss < b.loss; });
      o.range = hi->loss - lo->loss;
    }
    return o;
  }
  bool has_floor() const { return std::isfinite(floor); }
  // How far `value` lies from the floor (above it, but for a forecast that does not keep to the
  // floor, as Viper's may not); the observed range without one.
  double above(double value) const { return has_floor() ? std::abs(value - floor) : range; }
};

// Raises every value below the floor to it; extrapolations, band edges and drops added to a path
// are not bounded by their own construction.
inline void raise_to_floor(std::vector<double>& values, double floor) {
  for (double& v : values) v = std::max(v, floor);
}

}  // namespace modelcast::predictor::detail
