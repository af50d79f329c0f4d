#include "forecast_quality.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "known_curve.h"

namespace mp = modelcast::predictor;

namespace modelcast::bench {
namespace {

double at_step(const mp::Forecast& f, std::int64_t step) {
  if (step <= f.steps.front()) return f.loss.front();
  if (step >= f.steps.back()) return f.loss.back();
  const auto i = static_cast<std::size_t>(std::upper_bound(f.steps.begin(), f.steps.end(), step) - f.steps.begin());
  const double w = static_cast<double>(step - f.steps[i - 1]) / static_cast<double>(f.steps[i] - f.steps[i - 1]);
  return f.loss[i - 1] + w * (f.loss[i] - f.loss[i - 1]);
}

}  // namespace

std::vector<ForecastCut> forecast_cuts(const mp::LossLog& run, const mp::ForecastOptions& options,
                                       const CutForecaster& forecaster, std::span<const double> fractions) {
  std::vector<ForecastCut> cuts;
  const std::size_t n = run.points.size();
  if (n < 6) return cuts;
  const auto trend = running_median(mp::trajectory_of(run.points), 2).loss;
  // The range leaves out the first point, whose loss (an untrained model's) would make every
  // later error look small.
  const double range = *std::max_element(trend.begin() + 1, trend.end()) - *std::min_element(trend.begin(), trend.end());
  if (!(range > 0)) return cuts;
  for (const double fraction : fractions) {
    const std::size_t c = std::max<std::size_t>(4, static_cast<std::size_t>(fraction * static_cast<double>(n)));
    if (c + 2 > n) continue;
    mp::ForecastOptions o = options;
    o.future_steps.clear();
    for (std::size_t i = c; i < n; ++i) o.future_steps.push_back(run.points[i].step);
    const auto forecast = forecaster(std::span(run.points.data(), c), o);
    if (forecast.steps.empty()) continue;
    ForecastCut cut;
    cut.cut_fraction = fraction;
    const double level = trend[c - 1];
    const double fall = level - trend[n - 1];
    const double end = at_step(forecast, run.points[n - 1].step);
    cut.fall_ratio = fall > 0.03 * range ? (level - end) / fall : std::numeric_limits<double>::quiet_NaN();
    cut.end_error = (end - trend[n - 1]) / range;
    double error = 0.0;
    for (std::size_t i = c; i < n; ++i) error += std::abs(at_step(forecast, run.points[i].step) - trend[i]);
    cut.path_error = error / (static_cast<double>(n - c) * range);
    cuts.push_back(cut);
  }
  return cuts;
}

}  // namespace modelcast::bench
