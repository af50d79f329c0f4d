// Evaluations that lie far from the curve on both sides of them: a NaN-free but broken batch, a
// logging glitch, one evaluation of a diverging step that recovered. One such point (a loss a
// million times the curve's) bent every fitted family towards it: the forecast said 0.00025 where
// the curve was at 0.127, and the online scheduler published at 273 steps in a row.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "modelcast/predictor_forecast.h"

namespace modelcast::predictor::detail {

// The points of `observed` but those that are isolated outliers: farther than 20 times the
// series' noise (from its step-to-step differences, robustly; where their median is 0 or
// round-off, the log's resolution: its smallest difference above a millionth of the median
// |loss|, at most 1/200 of it) from the median of the 4 points
// before it and from the median of the 4 after it, on the same side of both. A change of level
// (a drop, a rise, a collapse) has one side that agrees with it and is kept; the first and last
// 4 points are never left out. `left_out` gets the steps left out. Finite losses expected
// (others are kept, for the forecast's own checks to name).
std::vector<CurvePoint> without_isolated_outliers(std::span<const CurvePoint> observed, std::vector<std::int64_t>& left_out);

}  // namespace modelcast::predictor::detail
