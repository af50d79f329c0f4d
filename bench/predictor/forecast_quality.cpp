#include "forecast_quality.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "known_curve.h"

namespace mp = modelcast::predictor;

namespace modelcast::bench {

std::vector<ForecastCut> forecast_cuts(const mp::LossLog& run, const mp::ForecastOptions& options,
                                       const CutForecaster& forecaster, std::span<const double> fractions) {
  std::vector<ForecastCut> cuts;
  const std::size_t n = run.points.size();
  if (n < 6) return cuts;  // no cut leaves 4 points before it and 2 after
  const auto trend = running_median(mp::trajectory_of(run.points), 2).loss;
  const auto [lowest, highest] = std::minmax_element(trend.begin(), trend.end());
  const double range = *highest - *lowest;
  if (!(range > 0)) return cuts;
  for (const double fraction : fractions) {
    // 1e-9: a fraction such as 0.7 times 90 points is 62.999... in floating point, not 63.
    const std::size_t c = std::max<std::size_t>(4, static_cast<std::size_t>(fraction * static_cast<double>(n) + 1e-9));
    if (c + 2 > n) continue;
    mp::ForecastOptions o = options;
    o.future_steps.clear();
    for (std::size_t i = c; i < n; ++i) o.future_steps.push_back(run.points[i].step);
    const auto forecast = forecaster(std::span(run.points.data(), c), o);
    if (forecast.steps.empty() || forecast.loss.size() != forecast.steps.size())
      throw std::runtime_error("forecast_cuts: run '" + run.run + "': the forecast from " + std::to_string(c) + " points has " +
                               std::to_string(forecast.steps.size()) + " steps and " + std::to_string(forecast.loss.size()) +
                               " losses for " + std::to_string(n - c) + " steps asked");
    ForecastCut cut;
    cut.cut_fraction = fraction;
    const double level = trend[c - 1];
    const double fall = level - trend[n - 1];
    const auto at_step = [&](std::int64_t step) { return interpolate_at(forecast.steps, forecast.loss, step); };
    const double end = at_step(run.points[n - 1].step);
    cut.fall_ratio = fall > 0.03 * range ? (level - end) / fall : std::numeric_limits<double>::quiet_NaN();
    cut.end_error = (end - trend[n - 1]) / range;
    double error = 0.0;
    for (std::size_t i = c; i < n; ++i) error += std::abs(at_step(run.points[i].step) - trend[i]);
    cut.path_error = error / (static_cast<double>(n - c) * range);
    // A forecast that is not finite is the forecaster's failure: name it rather than let it
    // through into the quantiles (where it would not even sort).
    if (!std::isfinite(end) || !std::isfinite(cut.path_error))
      throw std::runtime_error("forecast_cuts: run '" + run.run + "': the forecast from " + std::to_string(c) +
                               " points is not finite");
    cuts.push_back(cut);
  }
  return cuts;
}

}  // namespace modelcast::bench
