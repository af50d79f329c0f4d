#include "schedule_plot.h"

#include <algorithm>
#include <cmath>

namespace modelcast::tune {
namespace {

namespace mp = modelcast::predictor;

// Served loss over time for a schedule on a curve (for the plot).
Series staircase(const mp::Trajectory& curve, std::size_t w, const mp::PublishCosts& c, const std::vector<std::int64_t>& steps) {
  Series s;
  const double end = curve.time_s[w] + (std::isfinite(c.window_s) ? c.window_s : curve.time_s.back() - curve.time_s[w]);
  double loss = curve.loss[w];
  s.x.push_back(curve.time_s[w]);
  s.y.push_back(loss);
  for (std::size_t j = 0; j < steps.size(); ++j) {
    const auto i = static_cast<std::size_t>(std::lower_bound(curve.steps.begin(), curve.steps.end(), steps[j]) - curve.steps.begin());
    const double at = curve.time_s[i] + static_cast<double>(j + 1) * c.stall_s + c.delivery_s;
    if (at >= end) break;
    s.x.push_back(at);
    s.y.push_back(loss);
    loss = curve.loss[i];
    s.x.push_back(at);
    s.y.push_back(loss);
  }
  s.x.push_back(end);
  s.y.push_back(loss);
  return s;
}

std::vector<double> publish_times(const mp::Trajectory& curve, const mp::PublishCosts& c, const std::vector<std::int64_t>& steps) {
  std::vector<double> out;
  for (std::size_t j = 0; j < steps.size(); ++j) {
    const auto i = static_cast<std::size_t>(std::lower_bound(curve.steps.begin(), curve.steps.end(), steps[j]) - curve.steps.begin());
    out.push_back(curve.time_s[i] + static_cast<double>(j) * c.stall_s);
  }
  return out;
}

}  // namespace

// Completes `d` with the observed points, the served-loss staircase and the publish markers of
// `steps` on `curve` and writes it to `path`.
void write_schedule_plot(PlotData d, const std::vector<mp::CurvePoint>& observed, const mp::Trajectory& curve,
                         std::size_t w, const mp::PublishCosts& costs, const std::vector<std::int64_t>& steps,
                         const std::string& path) {
  for (const auto& p : observed) d.observed.x.push_back(p.time_s), d.observed.y.push_back(p.loss);
  d.served = staircase(curve, w, costs, steps);
  d.publish_times = publish_times(curve, costs, steps);
  write_svg(path, d);
}

}  // namespace modelcast::tune
