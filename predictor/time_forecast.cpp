#include "time_forecast.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

namespace modelcast::predictor::detail {

double interpolate(std::span<const double> xs, std::span<const double> ys, double x) {
  if (xs.empty()) return 0.0;
  if (x <= xs.front()) return ys.front();
  if (x >= xs.back()) return ys.back();
  const auto it = std::upper_bound(xs.begin(), xs.end(), x);
  const auto i = static_cast<std::size_t>(it - xs.begin());
  const double f = (x - xs[i - 1]) / (xs[i] - xs[i - 1]);
  return ys[i - 1] + f * (ys[i] - ys[i - 1]);
}

namespace {

// Slope of the seconds-per-step of consecutive intervals against the step (s/step^2) when it
// clearly rises: over two intervals a rise of more than 30 %, over three or more a least-squares
// slope above twice its standard error. Else 0. The interval from step 0 is left out (it holds
// start-up costs such as compilation).
double rate_growth(std::span<const CurvePoint> observed) {
  std::vector<double> x, y;
  for (std::size_t i = 1; i < observed.size(); ++i) {
    const double ds = static_cast<double>(observed[i].step - observed[i - 1].step);
    if (ds <= 0 || observed[i - 1].step <= 0) continue;
    x.push_back(0.5 * static_cast<double>(observed[i].step + observed[i - 1].step));
    y.push_back((observed[i].time_s - observed[i - 1].time_s) / ds);
  }
  const std::size_t n = x.size();
  if (n < 2) return 0.0;
  if (n == 2) {
    const double slope = (y[1] - y[0]) / (x[1] - x[0]);
    return y[0] > 0 && y[1] > 1.3 * y[0] && std::isfinite(slope) ? slope : 0.0;
  }
  double mx = 0, my = 0;
  for (std::size_t i = 0; i < n; ++i) mx += x[i] / static_cast<double>(n), my += y[i] / static_cast<double>(n);
  double sxx = 0, sxy = 0;
  for (std::size_t i = 0; i < n; ++i) sxx += (x[i] - mx) * (x[i] - mx), sxy += (x[i] - mx) * (y[i] - my);
  if (!(sxx > 0)) return 0.0;
  const double slope = sxy / sxx;
  double sse = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double r = y[i] - my - slope * (x[i] - mx);
    sse += r * r;
  }
  const double se = std::sqrt(sse / static_cast<double>(n - 2) / sxx);
  return slope > 0 && slope > 2.0 * se && std::isfinite(slope) ? slope : 0.0;
}

}  // namespace

std::vector<double> forecast_times(std::span<const CurvePoint> observed,
                                   std::span<const std::int64_t> future_steps, std::int64_t total_steps,
                                   const ReferenceCurve* reference, std::string& note) {
  std::vector<double> times(future_steps.size());
  // A point without a time (NaN: unknown) says nothing of the clock, and only it: the times are
  // forecast from the points that have one (a single NaN made every logged time count for nothing).
  const auto timed = [](const CurvePoint& p) { return std::isfinite(p.time_s); };
  std::vector<CurvePoint> with_times;
  const auto untimed = static_cast<std::size_t>(std::count_if(observed.begin(), observed.end(), std::not_fn(timed)));
  const bool have_times = untimed < observed.size();
  if (untimed > 0 && have_times) {
    std::copy_if(observed.begin(), observed.end(), std::back_inserter(with_times), timed);
    note += std::to_string(untimed) + " of " + std::to_string(observed.size()) +
            " points have no training time: times forecast from the others; ";
    observed = with_times;
  }
  const auto& last = observed.back();
  if (!have_times || observed.size() < 2) {
    if (!have_times) note += "no training times logged: assuming 1 s per step; ";
    const double rate = 1.0;
    const double t0 = have_times ? last.time_s : static_cast<double>(last.step);
    for (std::size_t i = 0; i < future_steps.size(); ++i)
      times[i] = t0 + rate * static_cast<double>(future_steps[i] - last.step);
    return times;
  }
  // Seconds per step over the recent third of the prefix (at least the last gap).
  const std::size_t from = std::min(observed.size() - 2, observed.size() - 1 - std::max<std::size_t>(1, observed.size() / 3));
  double rate = (last.time_s - observed[from].time_s) / static_cast<double>(last.step - observed[from].step);
  if (!(rate > 0) || !std::isfinite(rate)) {
    // A clock that stood still over the recent third (a pause logged as no time, training time
    // with its stalls taken back): the whole log's rate, or a second per step if that did not
    // advance either. A rate of nearly 0 made the forecast hang on the step's unit: the same
    // log planned nothing counted in steps and 58 publishes counted in tokens.
    const auto& first = observed.front();
    rate = (last.time_s - first.time_s) / static_cast<double>(last.step - first.step);
    if (rate > 0 && std::isfinite(rate)) {
      note += "training time did not advance over the newest third of the log: its rate over the whole log is used; ";
    } else {
      rate = 1.0;
      note += "training time did not advance over the log: assuming 1 s per step; ";
    }
  }

  bool used_reference = false;
  if (reference && reference->time_fraction.size() == reference->progress.size() &&
      reference->progress.size() >= 2) {
    // t(step) - t_last = k * (T_ref(u) - T_ref(u_last)), k fitted on the prefix.
    const double total = static_cast<double>(total_steps);
    const double ref_last = interpolate(reference->progress, reference->time_fraction,
                                        static_cast<double>(last.step) / total);
    double num = 0, den = 0;
    for (const auto& p : observed) {
      const double dref = interpolate(reference->progress, reference->time_fraction,
                                      static_cast<double>(p.step) / total) - ref_last;
      num += dref * (p.time_s - last.time_s);
      den += dref * dref;
    }
    const double k = den > 0 ? num / den : 0.0;
    if (k > 0 && std::isfinite(k)) {
      for (std::size_t i = 0; i < future_steps.size(); ++i) {
        const double dref = interpolate(reference->progress, reference->time_fraction,
                                        static_cast<double>(future_steps[i]) / total) - ref_last;
        times[i] = last.time_s + k * dref;
      }
      used_reference = true;
    }
  }
  if (!used_reference) {
    // Steps that keep getting slower (a sequence-length or batch-size ramp, a growing model)
    // make a constant rate end the run too early, and with it the window that publishes must
    // land in. When the per-interval rates clearly rise with the step, the rate keeps rising
    // at that slope; otherwise it stays constant.
    const double growth = rate_growth(observed);
    // The recent rate was measured at the middle of the recent window; carry it to the last step.
    const double rate_now = rate + growth * 0.5 * static_cast<double>(last.step - observed[from].step);
    for (std::size_t i = 0; i < future_steps.size(); ++i) {
      const double ds = static_cast<double>(future_steps[i] - last.step);
      times[i] = last.time_s + rate_now * ds + 0.5 * growth * ds * ds;
    }
  }
  // Keep time strictly increasing whatever the reference says.
  double prev = last.time_s;
  for (std::size_t i = 0; i < times.size(); ++i) {
    const double min_gap = 1e-6 * rate * static_cast<double>(future_steps[i] - (i ? future_steps[i - 1] : last.step));
    if (!std::isfinite(times[i]) || times[i] <= prev + min_gap) times[i] = prev + std::max(min_gap, 1e-9);
    prev = times[i];
  }
  return times;
}

}  // namespace modelcast::predictor::detail
