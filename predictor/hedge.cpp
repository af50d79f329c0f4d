// hedge_forecast / regret_spread: scenarios around a forecast and how a plan fares in each.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "modelcast/predictor_hedge.h"

namespace modelcast::predictor {
namespace {

void validate(const Forecast& f, const HedgeOptions& o) {
  const auto n = f.steps.size();
  if (f.loss.size() != n || f.time_s.size() != n || (!f.lower.empty() && f.lower.size() != n) ||
      (!f.upper.empty() && f.upper.size() != n))
    throw Error(ErrorCode::kInvalidArgument, "hedge: forecast steps, loss, band and time_s must have the same length");
  for (const auto& m : f.members)
    if (!m.loss.empty() && m.loss.size() != n)
      throw Error(ErrorCode::kInvalidArgument, "hedge: member '" + m.family + "' has " + std::to_string(m.loss.size()) +
                                                   " forecast points, the forecast " + std::to_string(n));
  const auto prob = [](double p) { return std::isfinite(p) && p >= 0 && p <= 1; };
  if (!prob(o.change_probability) || !prob(o.band_probability) || o.change_probability + o.band_probability > 1)
    throw Error(ErrorCode::kInvalidArgument, "hedge: change_probability and band_probability must lie in [0, 1] and sum to at most 1 (got " +
                                                 std::to_string(o.change_probability) + ", " + std::to_string(o.band_probability) + ")");
  if (!std::isfinite(o.change_depth) || o.change_depth < 0)
    throw Error(ErrorCode::kInvalidArgument, "hedge: change_depth must be finite and >= 0, got " + std::to_string(o.change_depth));
  if (o.change_times < 1)
    throw Error(ErrorCode::kInvalidArgument, "hedge: change_times must be >= 1, got " + std::to_string(o.change_times));
}

bool declared_certain(const Forecast& f) {
  if (f.lower.empty() || f.upper.empty()) return false;
  for (std::size_t i = 0; i < f.loss.size(); ++i)
    if (f.upper[i] - f.lower[i] > 1e-12 * std::max(1.0, std::abs(f.loss[i]))) return false;
  return true;
}

// Weighted quantile of values (weights need not sum to 1).
double weighted_quantile(std::vector<std::pair<double, double>> vw, double q) {
  if (vw.empty()) return std::nan("");
  std::sort(vw.begin(), vw.end());
  const double total = std::accumulate(vw.begin(), vw.end(), 0.0, [](double s, const auto& p) { return s + p.second; });
  double acc = 0.0;
  for (const auto& [v, w] : vw) {
    acc += w;
    if (acc >= q * total - 1e-12) return v;
  }
  return vw.back().first;
}

}  // namespace

HedgedForecast hedge_forecast(std::span<const CurvePoint> observed, const Forecast& forecast, const HedgeOptions& options) {
  validate(forecast, options);
  if (observed.empty()) throw Error(ErrorCode::kInvalidArgument, "hedge: no observed points");
  HedgedForecast out;
  out.forecast = forecast;
  const std::size_t n = forecast.steps.size();
  if (n == 0 || declared_certain(forecast)) {
    out.scenarios.push_back({"forecast", 1.0, forecast.loss});
    return out;
  }
  out.hedged = true;
  const double fit_mass = 1.0 - options.change_probability - options.band_probability;
  // The ensemble's own spread: each member with its share of the fit mass.
  double member_weight = 0.0;
  for (const auto& m : forecast.members)
    if (!m.loss.empty() && m.weight > 0) member_weight += m.weight;
  if (member_weight > 0) {
    for (const auto& m : forecast.members)
      if (!m.loss.empty() && m.weight > 0) out.scenarios.push_back({"member:" + m.family, fit_mass * m.weight / member_weight, m.loss});
  } else {
    out.scenarios.push_back({"forecast", fit_mass, forecast.loss});
  }
  if (options.band_probability > 0 && !forecast.lower.empty()) {
    out.scenarios.push_back({"band_lower", options.band_probability / 2, forecast.lower});
    out.scenarios.push_back({"band_upper", options.band_probability / 2, forecast.upper});
  }
  if (options.change_probability > 0 && options.change_depth > 0) {
    // The drop is relative to where the run is now: the only scale a flat prefix offers.
    const double last = observed.back().loss;
    double lo = last, hi = last;
    for (const auto& p : observed) lo = std::min(lo, p.loss), hi = std::max(hi, p.loss);
    const double level = std::abs(last) > 0 ? std::abs(last) : std::max(hi - lo, 1e-9);
    const double drop = options.change_depth * level;
    const auto k_total = static_cast<std::size_t>(options.change_times);
    // Each change takes a few points to complete (an annealing phase is not a single step).
    const double ramp = std::max(1.0, static_cast<double>(n) / static_cast<double>(2 * k_total));
    for (std::size_t k = 0; k < k_total; ++k) {
      const double at = (static_cast<double>(k) + 0.5) / static_cast<double>(k_total) * static_cast<double>(n) - 0.5;
      std::vector<double> path = forecast.loss;
      for (std::size_t i = 0; i < n; ++i) path[i] -= drop * std::clamp((static_cast<double>(i) - at + 1.0) / ramp, 0.0, 1.0);
      const auto start = static_cast<std::size_t>(std::clamp(at, 0.0, static_cast<double>(n - 1)));
      out.scenarios.push_back({"change@" + std::to_string(forecast.steps[start]), options.change_probability / static_cast<double>(k_total), std::move(path)});
    }
  }
  if (options.cap_at_current_level) {
    std::vector<double> recent;
    for (std::size_t i = observed.size() - std::min<std::size_t>(3, observed.size()); i < observed.size(); ++i)
      recent.push_back(observed[i].loss);
    std::sort(recent.begin(), recent.end());
    const double level = recent[recent.size() / 2];
    for (auto& sc : out.scenarios)
      for (double& v : sc.loss) v = std::min(v, level);
  }
  // Renormalise (a missing band gives its mass to the rest).
  double total = 0.0;
  for (const auto& s : out.scenarios) total += s.weight;
  for (auto& s : out.scenarios) s.weight /= total;
  std::vector<double> mean(n, 0.0);
  for (const auto& s : out.scenarios)
    for (std::size_t i = 0; i < n; ++i) mean[i] += s.weight * s.loss[i];
  out.forecast.loss = std::move(mean);
  return out;
}

RegretSpread regret_spread(std::span<const CurvePoint> prefix, std::size_t warmup_index, const HedgedForecast& hedged,
                           const PublishCosts& costs, std::span<const std::int64_t> publish_steps) {
  if (warmup_index >= prefix.size())
    throw Error(ErrorCode::kInvalidArgument, "regret spread: warm-up index " + std::to_string(warmup_index) + " is past the prefix");
  RegretSpread out;
  std::vector<std::pair<double, double>> regrets;  // (regret %, weight)
  Forecast f = hedged.forecast;
  for (const auto& s : hedged.scenarios) {
    f.loss = s.loss;
    const auto curve = extend_with_forecast(prefix, f);
    const double none = evaluate_cil(curve, warmup_index, costs, {});
    const double best = plan_optimal(curve, warmup_index, costs).cil;
    const double ours = evaluate_cil(curve, warmup_index, costs, publish_steps);
    if (none - best <= 1e-9 * std::abs(none)) continue;
    regrets.emplace_back(100.0 * (ours - best) / (none - best), s.weight);
  }
  out.scenarios = regrets.size();
  for (const auto& [r, w] : regrets) out.gain_probability += w;
  if (regrets.empty()) return out;
  for (const auto& [r, w] : regrets) out.expected_pct += r * w / out.gain_probability;
  out.p10_pct = weighted_quantile(regrets, 0.1);
  out.p50_pct = weighted_quantile(regrets, 0.5);
  out.p90_pct = weighted_quantile(regrets, 0.9);
  return out;
}

}  // namespace modelcast::predictor
