// The forecast itself, apart from the decisions made on it: at cuts through a run, how far the
// forecast made from the points before the cut falls to the run's end, and how closely it follows
// the run's trend, against that trend (the 5-point running median of known_curve.h). The plan and
// replay figures see the forecast only through schedules, whose selection among hedge variants
// moves them by points between neighbouring forecasters; these figures move only with the forecast.
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "modelcast/predictor.h"

namespace modelcast::bench {

struct ForecastCut {
  double cut_fraction = 0.0;  // share of the run's points the forecast was made from
  // The forecast's fall from the trend's level at the cut (its value at the newest point seen) to
  // its value at the run's end, over the trend's own fall; NaN where the trend falls by less than
  // 3 % of its range, where a ratio says nothing. 1: the right fall; 0: none foreseen.
  double fall_ratio = 0.0;
  // Mean |forecast - trend| over the rest of the run's logged steps, in units of the trend's range.
  double path_error = 0.0;
  // (forecast - trend) at the run's end over the range: above 0 the fall was under-predicted.
  double end_error = 0.0;
};

using CutForecaster = std::function<predictor::Forecast(std::span<const predictor::CurvePoint>, const predictor::ForecastOptions&)>;

// The cuts the harness reports: 20, 30, ..., 80 % of a run's points.
inline const std::vector<double> kForecastCutFractions = {0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8};

// One ForecastCut per fraction whose cut leaves at least 4 points before it and 2 after (fewer
// cuts on a short run; none on a run whose trend is constant). `options` is what a forecast made
// in advance gets (total_steps, a schedule); the cut's future steps are added to it. A forecaster
// that throws, returns no steps (or fewer losses than steps) or a loss that is not finite fails
// the call: the harness does not hide a forecast it could not make.
std::vector<ForecastCut> forecast_cuts(const predictor::LossLog& run, const predictor::ForecastOptions& options,
                                       const CutForecaster& forecaster,
                                       std::span<const double> fractions = kForecastCutFractions);

}  // namespace modelcast::bench
