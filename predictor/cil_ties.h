// When two schedules' CILs count as a tie (which then goes to the one with fewer publishes).
#pragma once

#include <cmath>

namespace modelcast::predictor::detail {

// A relative tolerance, not exact equality: a forecast is a weighted sum of fitted functions,
// and on a flat prefix their rounding leaves falls of about 1e-10 of the level. On a flat curve
// a stall delays nothing, so such a fall made publishing "pay" (seven publishes on a flat
// forecast, at a 1e-12 tolerance). No plan is worth choosing for a gain of 1e-9 of the CIL.
inline constexpr double kCilTieTolerance = 1e-9;

// a is lower than b by more than a tie.
inline bool cil_below(double a, double b) { return a < b - kCilTieTolerance * std::abs(b); }

}  // namespace modelcast::predictor::detail
