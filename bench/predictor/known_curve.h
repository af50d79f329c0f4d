// A run's own curve as what a forecaster would return: the benchmark's oracles. The exact plan
// on the denoised curve (the noise floor of plans made in advance) and the online scheduler fed
// the denoised curve as its forecast (the floor of the replay: what its decisions lose with the
// run's trend known, to the evaluation noise of the points as they come) both read it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "modelcast/predictor.h"

namespace modelcast::bench {

// The curve with each loss replaced by the median of the 2 * half_width + 1 logged losses
// around it (fewer at the ends): the run's trend as a smoother that keeps drops and plateaus
// sees it, without the point-to-point noise of its evaluations.
inline predictor::Trajectory running_median(const predictor::Trajectory& curve, std::size_t half_width) {
  predictor::Trajectory smooth = curve;
  const std::size_t n = curve.loss.size();
  std::vector<double> window;
  for (std::size_t i = 0; i < n; ++i) {
    window.assign(curve.loss.begin() + static_cast<std::ptrdiff_t>(i >= half_width ? i - half_width : 0),
                  curve.loss.begin() + static_cast<std::ptrdiff_t>(std::min(n - 1, i + half_width) + 1));
    std::nth_element(window.begin(), window.begin() + static_cast<std::ptrdiff_t>(window.size() / 2), window.end());
    smooth.loss[i] = window[window.size() / 2];
  }
  return smooth;
}

// The value at `x` of the piecewise-linear curve through (xs, ys), xs increasing, held flat
// beyond its ends.
inline double interpolate_at(const std::vector<std::int64_t>& xs, const std::vector<double>& ys, std::int64_t x) {
  if (x <= xs.front()) return ys.front();
  if (x >= xs.back()) return ys.back();
  const auto i = static_cast<std::size_t>(std::upper_bound(xs.begin(), xs.end(), x) - xs.begin());
  const double f = static_cast<double>(x - xs[i - 1]) / static_cast<double>(xs[i] - xs[i - 1]);
  return ys[i - 1] + f * (ys[i] - ys[i - 1]);
}

// The curve's points after `after_step` as a forecast that is certain: a band of zero width and
// one member holding the whole weight. Its times are the curve's (the stall-free clock).
inline predictor::Forecast forecast_from_curve(const predictor::Trajectory& curve, std::int64_t after_step) {
  predictor::Forecast f;
  for (std::size_t i = 0; i < curve.steps.size(); ++i) {
    if (curve.steps[i] <= after_step) continue;
    f.steps.push_back(curve.steps[i]);
    f.loss.push_back(curve.loss[i]);
    f.time_s.push_back(curve.time_s[i]);
  }
  f.lower = f.loss;
  f.upper = f.loss;
  f.members.push_back({.family = "known", .weight = 1.0, .backtest_rmse = 0.0, .loss = f.loss});
  return f;
}

}  // namespace modelcast::bench
