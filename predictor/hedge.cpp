// hedge_forecast / regret_spread: scenarios around a forecast and how a plan fares in each.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>

#include "cil_ties.h"
#include "loss_floor.h"
#include "modelcast/predictor_hedge.h"
#include "progress_axis.h"

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
  if (!prob(o.change_probability) || !prob(o.band_probability) || !prob(o.early_saturation_probability) ||
      o.change_probability + o.band_probability + o.early_saturation_probability > 1 + 1e-12)
    throw Error(ErrorCode::kInvalidArgument,
                "hedge: change_probability, band_probability and early_saturation_probability must lie in [0, 1] and sum to at most 1 (got " +
                    std::to_string(o.change_probability) + ", " + std::to_string(o.band_probability) + ", " +
                    std::to_string(o.early_saturation_probability) + ")");
  if (!prob(o.time_stretch_probability) || !std::isfinite(o.time_stretch) || o.time_stretch < 1)
    throw Error(ErrorCode::kInvalidArgument, "hedge: time_stretch_probability must lie in [0, 1] and time_stretch be >= 1 (got " +
                                                 std::to_string(o.time_stretch_probability) + ", " + std::to_string(o.time_stretch) + ")");
  if (!prob(o.depart_confidence))
    throw Error(ErrorCode::kInvalidArgument, "hedge: depart_confidence must lie in [0, 1], got " + std::to_string(o.depart_confidence));
  if (!std::isfinite(o.change_depth) || o.change_depth < 0)
    throw Error(ErrorCode::kInvalidArgument, "hedge: change_depth must be finite and >= 0, got " + std::to_string(o.change_depth));
  // Each change time is a scenario every plan is scored in: 200000 took a minute a decision.
  if (o.change_times < 1 || o.change_times > 1000)
    throw Error(ErrorCode::kInvalidArgument, "hedge: change_times must be in [1, 1000], got " + std::to_string(o.change_times));
  // Its knots, here rather than at the first forecast the schedule is read against (its last
  // knot as the run's end cannot make the rate zero over the run: constant after it).
  if (o.lr_schedule) {
    try {
      detail::ProgressAxis(std::max<std::int64_t>(1, o.lr_schedule->steps.empty() ? 1 : o.lr_schedule->steps.back()),
                           o.lr_schedule);
    } catch (const Error& e) {
      throw Error(ErrorCode::kInvalidArgument, std::string("hedge: ") + e.what());
    }
  }
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

// Intervals of the prefix from which a change of the step time can be measured: those that do
// not start at step 0 (start-up costs such as compilation) and have finite times.
std::size_t timing_intervals(std::span<const CurvePoint> observed) {
  std::size_t n = 0;
  for (std::size_t i = 1; i < observed.size(); ++i)
    if (observed[i - 1].step > 0 && std::isfinite(observed[i].time_s) && std::isfinite(observed[i - 1].time_s)) ++n;
  return n;
}

// The forecast's times with the remaining duration multiplied by factor, the step time growing
// linearly with the elapsed time: tau -> tau + (factor - 1) tau^2 / tau_end.
std::vector<double> stretched_times(double t_last, const std::vector<double>& times, double factor) {
  std::vector<double> out(times);
  if (times.empty()) return out;
  const double end = times.back() - t_last;
  if (!(end > 0)) return out;
  for (auto& t : out) {
    const double tau = std::max(0.0, t - t_last);
    t = t_last + tau + (factor - 1.0) * tau * tau / end;
  }
  return out;
}

std::vector<std::int64_t> evenly_spread(const std::vector<std::int64_t>& steps, std::size_t k) {
  std::vector<std::int64_t> out;
  const std::size_t m = steps.size();
  for (std::size_t j = 1; j <= k; ++j) {
    const auto i = std::min(m - 1, (j * m) / (k + 1));
    if (out.empty() || steps[i] > out.back()) out.push_back(steps[i]);
  }
  return out;
}

// How many publishes the evenly spaced candidates go up to: 24 (past that, a schedule is as good
// as every forecast step), no more than the forecast has steps, and no more than the cap on
// training slowdown allows (costs.max_slowdown_s), which binds the simple rule as it binds plans.
std::size_t most_evenly_spaced(std::size_t forecast_steps, const PublishCosts& costs) {
  return publishes_allowed(costs, std::min<std::size_t>(24, forecast_steps));
}

}  // namespace

HedgedForecast hedge_forecast(std::span<const CurvePoint> observed, const Forecast& forecast, const HedgeOptions& options) {
  validate(forecast, options);
  if (observed.empty()) throw Error(ErrorCode::kInvalidArgument, "hedge: no observed points");
  for (const auto& point : observed)  // a NaN made every change scenario NaN
    if (!std::isfinite(point.loss)) throw Error(ErrorCode::kInvalidArgument, "hedge: loss at step " + std::to_string(point.step) + " is not finite");
  HedgedForecast out;
  out.forecast = forecast;
  out.plan_choice = options.plan_choice;
  out.depart_confidence = options.depart_confidence;
  const std::size_t n = forecast.steps.size();
  out.time_scenarios.push_back({"forecast", 1.0, forecast.time_s});
  if (n == 0 || declared_certain(forecast)) {
    out.scenarios.push_back({"forecast", 1.0, forecast.loss});
    return out;
  }
  out.hedged = true;
  // The forecast's own floor (a stated one), else what the observed points give.
  const auto origin = detail::LossOrigin::of(
      observed, std::isnan(forecast.loss_floor) ? detail::loss_floor(observed) : forecast.loss_floor);
  if (options.time_stretch_probability > 0 && options.time_stretch > 1 && timing_intervals(observed) < 3 &&
      std::isfinite(observed.back().time_s)) {
    const double p = options.time_stretch_probability;
    out.time_scenarios.front().weight = 1.0 - p;
    for (double factor : {0.5 * (1.0 + options.time_stretch), options.time_stretch}) {
      char kind[48];
      std::snprintf(kind, sizeof kind, "stretch x%.2f", factor);
      out.time_scenarios.push_back({kind, p / 2, stretched_times(observed.back().time_s, forecast.time_s, factor)});
    }
  }
  const double fit_mass = 1.0 - options.change_probability - options.band_probability - options.early_saturation_probability;
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
    // The drop is relative to how far the run is above its floor now: the only scale a flat
    // prefix offers (the observed range for a loss without a floor, LossOrigin).
    const double drop = options.change_depth * std::max(origin.above(observed.back().loss), 1e-9);
    // A known schedule says when the rate anneals: the drop follows the anneal from now on.
    std::vector<double> anneal_share;  // per forecast step, in [0, 1]; empty: no anneal ahead
    if (options.lr_schedule && forecast.steps.back() > 0) {
      const detail::ProgressAxis axis(forecast.steps.back(), options.lr_schedule);
      const double now = axis.anneal_level(observed.back().step);
      double end = now;
      for (auto s : forecast.steps) end = std::max(end, axis.anneal_level(s));
      if (end > now + 1e-9)
        for (auto s : forecast.steps) anneal_share.push_back(std::clamp((axis.anneal_level(s) - now) / (end - now), 0.0, 1.0));
    }
    const auto k_total = anneal_share.empty() ? static_cast<std::size_t>(options.change_times) : 0;
    if (!anneal_share.empty()) {
      std::vector<double> path = forecast.loss;
      for (std::size_t i = 0; i < n; ++i) path[i] -= drop * anneal_share[i];
      out.scenarios.push_back({"anneal", options.change_probability, std::move(path)});
    }
    // Each change takes a few points to complete (an annealing phase is not a single step).
    const double ramp = std::max(1.0, static_cast<double>(n) / static_cast<double>(2 * std::max<std::size_t>(1, k_total)));
    for (std::size_t k = 0; k < k_total; ++k) {
      const double at = (static_cast<double>(k) + 0.5) / static_cast<double>(k_total) * static_cast<double>(n) - 0.5;
      std::vector<double> path = forecast.loss;
      for (std::size_t i = 0; i < n; ++i) path[i] -= drop * std::clamp((static_cast<double>(i) - at + 1.0) / ramp, 0.0, 1.0);
      const auto start = static_cast<std::size_t>(std::clamp(at, 0.0, static_cast<double>(n - 1)));
      out.scenarios.push_back({"change@" + std::to_string(forecast.steps[start]), options.change_probability / static_cast<double>(k_total), std::move(path)});
    }
  }
  if (options.early_saturation_probability > 0) {
    // The forecast's path run at twice the speed from the last observed step, then held.
    const double from = static_cast<double>(observed.back().step);
    std::vector<double> xs(n);
    for (std::size_t i = 0; i < n; ++i) xs[i] = static_cast<double>(forecast.steps[i]);
    std::vector<double> path(n);
    for (std::size_t i = 0; i < n; ++i) {
      const double x = from + 2.0 * (xs[i] - from);
      if (x >= xs.back()) {
        path[i] = forecast.loss.back();
      } else {
        const auto it = std::upper_bound(xs.begin(), xs.end(), x);
        const auto j = static_cast<std::size_t>(it - xs.begin());
        if (j == 0) path[i] = forecast.loss.front();
        else path[i] = forecast.loss[j - 1] + (x - xs[j - 1]) / (xs[j] - xs[j - 1]) * (forecast.loss[j] - forecast.loss[j - 1]);
      }
    }
    out.scenarios.push_back({"early_saturation", options.early_saturation_probability, std::move(path)});
  }
  // A change scenario's drop and the band's lower edge are sized on the run's level, not on how
  // far the forecast is from the floor: near it they would plan for a loss below 0.
  for (auto& sc : out.scenarios) detail::raise_to_floor(sc.loss, origin.floor);
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

namespace {

ScheduleResult plan_expected_cil(std::span<const CurvePoint> prefix, std::size_t warmup_index, const HedgedForecast& hedged,
                                 const PublishCosts& costs);

// One (loss, time) scenario pair: the prefix followed by the loss scenario on that time axis, its
// weight (the product of both), and its CIL without a publish and under its own exact plan.
struct ScenarioPair {
  Trajectory curve;
  double weight = 0.0, none = 0.0;
  ScheduleResult best;
};

// Every pair, time scenarios outer (the forecast's own loss and times when it has no scenarios).
std::vector<ScenarioPair> scenario_pairs(std::span<const CurvePoint> prefix, std::size_t warmup_index,
                                         const HedgedForecast& hedged, const PublishCosts& costs) {
  std::vector<TimeScenario> times = hedged.time_scenarios;
  if (times.empty()) times.push_back({"forecast", 1.0, hedged.forecast.time_s});
  std::vector<Scenario> losses = hedged.scenarios;
  if (losses.empty()) losses.push_back({"forecast", 1.0, hedged.forecast.loss});
  std::vector<ScenarioPair> pairs;
  Forecast f = hedged.forecast;
  for (const auto& t : times)
    for (const auto& s : losses) {
      f.loss = s.loss;
      f.time_s = t.time_s;
      ScenarioPair p{extend_with_forecast(prefix, f), s.weight * t.weight, 0.0, {}};
      p.none = evaluate_cil(p.curve, warmup_index, costs, {});
      p.best = plan_optimal(p.curve, warmup_index, costs);
      pairs.push_back(std::move(p));
    }
  return pairs;
}

// kExpectedRegret / kMinimaxRegret: score a finite candidate set on every (loss, time) pair.
ScheduleResult plan_by_regret(std::span<const CurvePoint> prefix, std::size_t warmup_index, const HedgedForecast& hedged,
                              const PublishCosts& costs) {
  std::vector<TimeScenario> times = hedged.time_scenarios;
  if (times.empty()) times.push_back({"forecast", 1.0, hedged.forecast.time_s});
  std::vector<std::vector<std::int64_t>> candidates = {{}};
  Forecast f = hedged.forecast;
  for (const auto& t : times) {
    f.time_s = t.time_s;
    candidates.push_back(plan_optimal(extend_with_forecast(prefix, f), warmup_index, costs).publish_steps);
  }
  const auto pairs = scenario_pairs(prefix, warmup_index, hedged, costs);
  for (const auto& p : pairs) candidates.push_back(p.best.publish_steps);
  const std::size_t most = most_evenly_spaced(hedged.forecast.steps.size(), costs);
  for (std::size_t k = 1; k <= most; ++k) candidates.push_back(evenly_spread(hedged.forecast.steps, k));
  std::sort(candidates.begin(), candidates.end());
  candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
  bool any_gain = false;
  for (const auto& p : pairs) any_gain = any_gain || (p.weight > 0 && p.none - p.best.cil > 1e-9 * std::abs(p.none));
  if (!any_gain) return plan_expected_cil(prefix, warmup_index, hedged, costs);
  const bool minimax = hedged.plan_choice == PlanChoice::kMinimaxRegret;
  ScheduleResult best;
  double best_score = std::numeric_limits<double>::infinity();
  for (const auto& cand : candidates) {
    double expected_cil = 0.0, total_w = 0.0, score = 0.0;
    for (const auto& p : pairs) {
      const double cil = evaluate_cil(p.curve, warmup_index, costs, cand);
      expected_cil += p.weight * cil;
      total_w += p.weight;
      if (!(p.weight > 0) || p.none - p.best.cil <= 1e-9 * std::abs(p.none)) continue;
      const double regret = (cil - p.best.cil) / (p.none - p.best.cil);
      score = minimax ? std::max(score, regret) : score + p.weight * regret;
    }
    expected_cil /= total_w;
    const double tol = 1e-9;
    const bool better = best_score == std::numeric_limits<double>::infinity() || score < best_score - tol ||
                        (score <= best_score + tol &&
                         (detail::cil_below(expected_cil, best.cil) ||
                          (!detail::cil_below(best.cil, expected_cil) && cand.size() < best.publish_steps.size())));
    if (better) {
      best_score = score;
      best = {cand, expected_cil, costs.stall_s * static_cast<double>(cand.size())};
    }
  }
  return best;
}

ScheduleResult plan_expected_cil(std::span<const CurvePoint> prefix, std::size_t warmup_index, const HedgedForecast& hedged,
                                 const PublishCosts& costs) {
  const auto& times = hedged.time_scenarios;
  Forecast f = hedged.forecast;
  if (times.size() <= 1) return plan_optimal(extend_with_forecast(prefix, f), warmup_index, costs);
  std::vector<Trajectory> curves;
  for (const auto& t : times) {
    f.time_s = t.time_s;
    curves.push_back(extend_with_forecast(prefix, f));
  }
  std::vector<std::vector<std::int64_t>> candidates;
  for (const auto& c : curves) candidates.push_back(plan_optimal(c, warmup_index, costs).publish_steps);
  const std::size_t most = most_evenly_spaced(f.steps.size(), costs);
  for (std::size_t k = 1; k <= most; ++k) candidates.push_back(evenly_spread(f.steps, k));
  ScheduleResult best;
  bool have = false;
  for (const auto& cand : candidates) {
    double expected = 0.0;
    for (std::size_t t = 0; t < times.size(); ++t) expected += times[t].weight * evaluate_cil(curves[t], warmup_index, costs, cand);
    const bool better = !have || detail::cil_below(expected, best.cil) ||
                        (!detail::cil_below(best.cil, expected) && cand.size() < best.publish_steps.size());
    have = true;
    if (better) best = {cand, expected, costs.stall_s * static_cast<double>(cand.size())};
  }
  return best;
}

// What hedged.plan_choice picks among its candidates, before it is held to even spacing.
ScheduleResult plan_candidate(std::span<const CurvePoint> prefix, std::size_t warmup_index, const HedgedForecast& hedged,
                              const PublishCosts& costs) {
  if (hedged.plan_choice != PlanChoice::kExpectedCil && hedged.hedged) return plan_by_regret(prefix, warmup_index, hedged, costs);
  return plan_expected_cil(prefix, warmup_index, hedged, costs);
}

void check_warmup(std::span<const CurvePoint> prefix, std::size_t warmup_index) {
  if (warmup_index >= prefix.size())
    throw Error(ErrorCode::kInvalidArgument, "hedged plan: warm-up index " + std::to_string(warmup_index) + " is past the prefix");
}

// plan_hedged's plan and why it is that one.
std::pair<ScheduleResult, PlanChoiceReport> decide(std::span<const CurvePoint> prefix, std::size_t warmup_index,
                                                   const HedgedForecast& hedged, const PublishCosts& costs) {
  check_warmup(prefix, warmup_index);
  const auto candidate = plan_candidate(prefix, warmup_index, hedged, costs);
  auto choice = explain_plan(prefix, warmup_index, hedged, costs, candidate.publish_steps);
  const bool kept = choice.publish_steps == candidate.publish_steps;
  ScheduleResult plan{choice.publish_steps, kept ? choice.candidate_cil : choice.best_evenly_spaced_cil,
                      costs.stall_s * static_cast<double>(choice.publish_steps.size())};
  return {std::move(plan), std::move(choice)};
}

}  // namespace

ScheduleResult plan_hedged(std::span<const CurvePoint> prefix, std::size_t warmup_index, const HedgedForecast& hedged,
                           const PublishCosts& costs) {
  return decide(prefix, warmup_index, hedged, costs).first;
}

PrefixPlan plan_prefix(std::span<const CurvePoint> prefix, const ForecastOptions& options, const PublishCosts& costs) {
  if (prefix.empty()) throw Error(ErrorCode::kInvalidArgument, "plan: no points up to the warm-up step");
  // The run's time is forecast from the prefix: a clock that stood still there forecast the rest
  // of the run to take microseconds, and the plan published nothing.
  if (!(prefix.back().time_s > prefix.front().time_s)) {
    std::ostringstream why;
    why << "time_s does not advance before the warm-up step (" << prefix.front().time_s << " s at step "
        << prefix.front().step << ", " << prefix.back().time_s << " s at step " << prefix.back().step
        << "): a plan forecasts the run's time from it";
    throw Error(ErrorCode::kInvalidArgument, why.str());
  }
  PrefixPlan out;
  out.point_forecast = forecast_curve(prefix, options);
  // Plan on the expected loss over the forecast's scenarios, not on the point forecast alone.
  out.hedged = hedge_forecast(prefix, out.point_forecast, {});
  // Lowest expected CIL over the loss and time scenarios (the exact plan on the expected path
  // when the time axis is not in doubt), unless the best even spacing does at least as well in
  // most of them.
  std::tie(out.plan, out.choice) = decide(prefix, prefix.size() - 1, out.hedged, costs);
  return out;
}

PlanChoiceReport explain_plan(std::span<const CurvePoint> prefix, std::size_t warmup_index, const HedgedForecast& hedged,
                              const PublishCosts& costs, std::span<const std::int64_t> candidate) {
  check_warmup(prefix, warmup_index);
  const auto pairs = scenario_pairs(prefix, warmup_index, hedged, costs);
  double total_w = 0.0, gain = 0.0;
  for (const auto& p : pairs) total_w += p.weight, gain += p.weight * (p.none - p.best.cil);
  const auto cils = [&](std::span<const std::int64_t> steps) {
    std::vector<double> out;
    for (const auto& p : pairs) out.push_back(evaluate_cil(p.curve, warmup_index, costs, steps));
    return out;
  };
  const auto expected = [&](const std::vector<double>& c) {
    double e = 0.0;
    for (std::size_t i = 0; i < pairs.size(); ++i) e += pairs[i].weight * c[i];
    return total_w > 0 ? e / total_w : 0.0;
  };
  PlanChoiceReport out;
  out.candidate.assign(candidate.begin(), candidate.end());
  out.required_confidence = hedged.depart_confidence;
  const auto ours = cils(candidate);
  out.candidate_cil = expected(ours);
  std::vector<double> even_cils;
  bool is_even = false;
  const std::size_t most = most_evenly_spaced(hedged.forecast.steps.size(), costs);
  for (std::size_t k = 1; k <= most; ++k) {
    const auto even = evenly_spread(hedged.forecast.steps, k);
    is_even = is_even || std::equal(even.begin(), even.end(), candidate.begin(), candidate.end());
    auto c = cils(even);
    const double e = expected(c);
    if (k == 1 || detail::cil_below(e, out.best_evenly_spaced_cil)) {
      out.best_evenly_spaced = even;
      out.best_evenly_spaced_cil = e;
      even_cils = std::move(c);
    }
  }
  // No forecast step to spread a publish over, or a slowdown cap that allows none: the simple
  // rule publishes nothing, and so does every plan.
  const bool none_allowed = most == 0;
  if (none_allowed) {
    is_even = candidate.empty();
    even_cils = cils({});
    out.best_evenly_spaced_cil = expected(even_cils);
  }
  const double tol = 1e-9 * std::abs(out.candidate_cil);
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    if (ours[i] <= even_cils[i] + tol) out.win_probability += pairs[i].weight / total_w;
  }
  const bool some_gain = gain > 1e-9 * std::abs(out.candidate_cil) * total_w;
  out.expected_margin_pct = some_gain ? 100.0 * (out.best_evenly_spaced_cil - out.candidate_cil) * total_w / gain : 0.0;
  // The weight check is a share with rounding in it: 0.5 must admit a win in half the weight.
  const bool departs = !is_even && out.win_probability >= hedged.depart_confidence - 1e-12;
  out.picked = none_allowed ? "no_publish" : is_even || !departs ? "evenly_spaced" : (candidate.empty() ? "no_publish" : "forecast");
  out.publish_steps = is_even || departs ? out.candidate : out.best_evenly_spaced;

  const auto pct = [](double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.2f %%", v);
    return std::string(b);
  };
  const auto share = [](double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.0f %%", 100.0 * v);
    return std::string(b);
  };
  const auto publishes = [](std::size_t n) { return std::to_string(n) + " publish" + (n == 1 ? "" : "es"); };
  const std::string even = "the best even spacing (" + publishes(out.best_evenly_spaced.size()) + ")";
  const std::string margin = pct(std::abs(out.expected_margin_pct)) + " of the expected achievable gain";
  const std::string scenarios = std::to_string(pairs.size()) + " scenario" + (pairs.size() == 1 ? "" : "s");
  const std::string what = candidate.empty() ? "publishing nothing" : "the forecast's plan (" + publishes(candidate.size()) + ")";
  if (none_allowed) {
    const auto seconds = [](double v) {
      char b[32];
      std::snprintf(b, sizeof b, "%g s", v);
      return std::string(b);
    };
    out.reason = hedged.forecast.steps.empty() ? "the forecast has no step left to publish at"
                                               : "the cap on training slowdown (" + seconds(costs.max_slowdown_s) +
                                                     ") leaves no room for a publish's stall of " + seconds(costs.stall_s);
  } else if (!some_gain && departs) {
    out.reason = "the forecast expects no gain worth a publish's cost in any of its " + scenarios;
  } else if (is_even) {
    out.reason = "the plan is the schedule of " + publishes(candidate.size()) + " evenly spaced" +
                 (out.expected_margin_pct >= -1e-9 ? ", the best such schedule over the forecast's " + scenarios
                                                   : "; " + even + " is expected to do better by " + margin);
  } else if (departs) {
    out.reason = what + (out.expected_margin_pct >= 0 ? " is expected to do better than " + even + " by " + margin
                                                      : " was chosen by regret, though " + even + " is expected to do better by " + margin) +
                 ", and at least as well in scenarios holding " + share(out.win_probability) + " of the forecast's weight (" +
                 share(hedged.depart_confidence) + " needed)";
  } else {
    out.reason = even + ": " + what + (out.expected_margin_pct >= 0 ? " is expected to do better by " + margin + ", but" : "") +
                 " does at least as well only in scenarios holding " + share(out.win_probability) +
                 " of the forecast's weight, below the " + share(hedged.depart_confidence) + " needed to depart from even spacing";
  }
  return out;
}

RegretSpread regret_spread(std::span<const CurvePoint> prefix, std::size_t warmup_index, const HedgedForecast& hedged,
                           const PublishCosts& costs, std::span<const std::int64_t> publish_steps) {
  if (warmup_index >= prefix.size())
    throw Error(ErrorCode::kInvalidArgument, "regret spread: warm-up index " + std::to_string(warmup_index) + " is past the prefix");
  RegretSpread out;
  std::vector<std::pair<double, double>> regrets;  // (regret %, weight)
  double shortfall = 0.0, gain = 0.0;              // weighted sums of (ours - best) and (none - best)
  for (const auto& p : scenario_pairs(prefix, warmup_index, hedged, costs)) {
    const double none = p.none, best = p.best.cil;
    const double ours = evaluate_cil(p.curve, warmup_index, costs, publish_steps);
    ++out.pairs;
    if (none - best <= 1e-9 * std::abs(none)) continue;
    // Below 0 only by rounding (the best is the exact plan on that scenario): a tie.
    const double regret = 100.0 * (ours - best) / (none - best);
    regrets.emplace_back(regret < 0 && regret > -1e-6 ? 0.0 : regret, p.weight);
    shortfall += p.weight * (ours - best);
    gain += p.weight * (none - best);
  }
  out.scenarios = regrets.size();
  for (const auto& [r, w] : regrets) out.gain_probability += w;
  if (regrets.empty()) return out;
  // Not the mean of the ratios: a scenario with almost nothing to gain has a huge ratio for a
  // tiny shortfall, and would outweigh every scenario where CIL is really at stake.
  out.expected_pct = 100.0 * shortfall / gain;
  out.p10_pct = weighted_quantile(regrets, 0.1);
  out.p50_pct = weighted_quantile(regrets, 0.5);
  out.p90_pct = weighted_quantile(regrets, 0.9);
  return out;
}

}  // namespace modelcast::predictor
