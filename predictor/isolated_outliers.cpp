#include "isolated_outliers.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace modelcast::predictor::detail {
namespace {

constexpr std::size_t kSide = 4;
constexpr double kIsolation = 20.0;
constexpr double kLeastNoise = 0.005;  // of the median |loss|: the most the resolution is taken to be
constexpr double kRoundOff = 1e-6;     // of the median |loss|: differences no larger are round-off
constexpr double kPervasive = 1e-10;   // of the median |loss|: a median difference above it is noise

double median_of(std::vector<double>& v) {
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  if (v.size() % 2 == 1) return *mid;
  return 0.5 * (*mid + *std::max_element(v.begin(), mid));
}

double median_of(std::array<double, kSide> v) {
  std::sort(v.begin(), v.end());
  return 0.5 * (v[kSide / 2 - 1] + v[kSide / 2]);
}

}  // namespace

std::vector<CurvePoint> without_isolated_outliers(std::span<const CurvePoint> observed, std::vector<std::int64_t>& left_out) {
  left_out.clear();
  const std::size_t n = observed.size();
  if (n < 2 * kSide + 1) return {observed.begin(), observed.end()};
  if (!std::all_of(observed.begin(), observed.end(), [](const CurvePoint& p) { return std::isfinite(p.loss); }))
    return {observed.begin(), observed.end()};
  // The noise: a difference of two points has sqrt(2) times a point's; 1.4826 x the median
  // absolute value is the standard deviation of normal noise, and an outlier moves it little.
  std::vector<double> steps(n - 1);
  for (std::size_t i = 1; i < n; ++i) steps[i - 1] = std::abs(observed[i].loss - observed[i - 1].loss);
  // The differences' median is the noise where it is pervasive: any size above 1e-10 of the
  // loss's typical size, far below a float's resolution, counts (noise of 1e-7 of a loss of 1000
  // is noise; a floor of 1/200 of the loss under it, as before, hid every glitch under 10 % of
  // the loss, so on a loss of 1000.x any glitch at all). Below that, most differences are 0 or
  // round-off (a log rounded to a few digits, bf16, "0.50", perhaps with a double's jitter), the
  // median says no noise, and every one-tick dip on a plateau was an outlier: the noise is then
  // the log's resolution, its smallest difference above round-off (a millionth of that size: one
  // value of 0.50000001 must not make every tick an outlier), and never more than 1/200 of it
  // (on a plateau whose one departure is a glitch, the glitch's two differences are the only
  // ones there are).
  std::vector<double> sizes(n);
  for (std::size_t i = 0; i < n; ++i) sizes[i] = std::abs(observed[i].loss);
  const double typical = median_of(sizes);
  double noise = 1.4826 * median_of(steps) / std::sqrt(2.0);
  if (!(noise > kPervasive * typical)) {
    noise = kLeastNoise * typical;
    for (double d : steps) {
      if (d > kRoundOff * typical) noise = std::min(noise, d);
    }
  }
  const double beyond = kIsolation * noise;
  std::vector<CurvePoint> kept;
  kept.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (i >= kSide && i + kSide < n) {
      std::array<double, kSide> before{}, after{};
      for (std::size_t k = 0; k < kSide; ++k) {
        before[k] = observed[i - kSide + k].loss;
        after[k] = observed[i + 1 + k].loss;
      }
      const double x = observed[i].loss, from_before = x - median_of(before), from_after = x - median_of(after);
      if ((from_before > beyond && from_after > beyond) || (from_before < -beyond && from_after < -beyond)) {
        left_out.push_back(observed[i].step);
        continue;
      }
    }
    kept.push_back(observed[i]);
  }
  return kept;
}

}  // namespace modelcast::predictor::detail
