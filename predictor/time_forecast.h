// Predicts when future steps will complete from the observed (step, time) prefix, optionally
// shaped like a reference run's time profile (runs whose step time changes, e.g. with a
// batch-size or sequence-length schedule).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "modelcast/predictor_forecast.h"

namespace modelcast::predictor::detail {

// Returns strictly increasing times for future_steps (all after the last observed step).
// Appends to note when it had to assume something (no times logged).
std::vector<double> forecast_times(std::span<const CurvePoint> observed,
                                   std::span<const std::int64_t> future_steps, std::int64_t total_steps,
                                   const ReferenceCurve* reference, std::string& note);

// Linear interpolation of ys over increasing xs, clamped at both ends.
double interpolate(std::span<const double> xs, std::span<const double> ys, double x);

}  // namespace modelcast::predictor::detail
