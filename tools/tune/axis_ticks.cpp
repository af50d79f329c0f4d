#include "axis_ticks.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace modelcast::tune {
namespace {

// The smallest of 1, 2, 5 times a power of ten that is >= raw.
double nice_step(double raw) {
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * magnitude >= raw * (1 - 1e-9)) return m * magnitude;
  }
  return 10.0 * magnitude;
}

}  // namespace

AxisTicks nice_ticks(double lo, double hi, int target) {
  AxisTicks t;
  if (!(hi > lo) || !std::isfinite(lo) || !std::isfinite(hi)) return t;
  t.step = nice_step((hi - lo) / std::max(1, target));
  const int decimals = std::max(0, -static_cast<int>(std::floor(std::log10(t.step) + 1e-9)));
  // Multiples of step by index, so that 0.1 + 0.2 style drift never reaches a label. A range
  // within the last bits of its values (a loss stuck at ln 10) gives indices past 2^53, where
  // k + 1 == k: the loop never ended and filled the memory. No ticks then, and never thousands.
  const double first = std::ceil(lo / t.step - 1e-9), last = std::floor(hi / t.step + 1e-9);
  if (!(std::abs(first) < 0x1p52 && std::abs(last) < 0x1p52 && last - first < 1000)) return AxisTicks{};
  for (double k = first; k * t.step <= hi + 1e-9 * t.step; k += 1) {
    const double v = k * t.step;
    char text[64];
    std::snprintf(text, sizeof text, "%.*f", decimals, v == 0 ? 0.0 : v);  // no "-0"
    t.values.push_back(v);
    t.labels.emplace_back(text);
  }
  return t;
}

}  // namespace modelcast::tune
