// forecast_curve: fit every family, weight by back-testing on the tail of the observed prefix,
// combine, and guard against NaN or exploding extrapolations. forecast_viper: the baseline's
// least-squares choice of one of Viper's four functions, as its paper states it.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>

#include "curve_families.h"
#include "loss_floor.h"
#include "modelcast/error.h"
#include "modelcast/predictor_forecast.h"
#include "isolated_outliers.h"
#include "progress_axis.h"
#include "robust_fit.h"
#include "time_forecast.h"

namespace modelcast::predictor {
namespace {

using detail::CurveFamily;
using detail::ProgressAxis;

void validate_observed(std::span<const CurvePoint> observed, const ForecastOptions& options) {
  if (observed.empty()) throw Error(ErrorCode::kInvalidArgument, "forecast: no observed points");
  for (std::size_t i = 0; i < observed.size(); ++i) {
    if (!std::isfinite(observed[i].loss))
      throw Error(ErrorCode::kInvalidArgument, "forecast: loss at step " + std::to_string(observed[i].step) + " is not finite");
    if (observed[i].step > kMaxCurveStep || observed[i].step < -kMaxCurveStep)
      throw Error(ErrorCode::kInvalidArgument, "forecast: step " + std::to_string(observed[i].step) +
                                                   " is beyond 2^53, the largest step the predictor takes");
    if (i > 0 && observed[i].step <= observed[i - 1].step)
      throw Error(ErrorCode::kInvalidArgument, "forecast: steps must be strictly increasing (step " +
                                  std::to_string(observed[i].step) + ")");
    // NaN is "not logged"; a clock that runs backwards made the rest of the run take no time.
    if (std::isinf(observed[i].time_s))
      throw Error(ErrorCode::kInvalidArgument, "forecast: time at step " + std::to_string(observed[i].step) + " is not finite");
    if (i > 0 && observed[i].time_s < observed[i - 1].time_s)
      throw Error(ErrorCode::kInvalidArgument, "forecast: time at step " + std::to_string(observed[i].step) + " (" +
                                                   std::to_string(observed[i].time_s) + " s) is before the previous point's (" +
                                                   std::to_string(observed[i - 1].time_s) + " s)");
  }
  check_forecast_options(options);
  if (options.total_steps <= observed.back().step)
    throw Error(ErrorCode::kInvalidArgument, "forecast: total_steps (" + std::to_string(options.total_steps) +
                                ") must exceed the last observed step (" +
                                std::to_string(observed.back().step) + ")");
}

// Future logged steps: given, or the recent cadence continued to total_steps.
std::vector<std::int64_t> future_grid(std::span<const CurvePoint> observed, const ForecastOptions& options) {
  const std::int64_t last = observed.back().step;
  std::vector<std::int64_t> steps;
  if (!options.future_steps.empty()) {
    for (auto s : options.future_steps)
      if (s > last && s <= options.total_steps && (steps.empty() || s > steps.back())) steps.push_back(s);
    if (steps.empty() || steps.back() != options.total_steps) steps.push_back(options.total_steps);
    return steps;
  }
  std::int64_t gap = options.total_steps - last;
  if (observed.size() >= 2) {
    std::vector<std::int64_t> gaps;
    for (std::size_t i = observed.size() - std::min<std::size_t>(observed.size() - 1, 5); i < observed.size(); ++i)
      gaps.push_back(observed[i].step - observed[i - 1].step);
    std::nth_element(gaps.begin(), gaps.begin() + static_cast<std::ptrdiff_t>(gaps.size() / 2), gaps.end());
    gap = std::max<std::int64_t>(1, gaps[gaps.size() / 2]);
  }
  gap = std::max(gap, (options.total_steps - last + options.max_future_points - 1) / options.max_future_points);
  for (std::int64_t s = last + gap; s < options.total_steps; s += gap) steps.push_back(s);
  steps.push_back(options.total_steps);
  return steps;
}

struct MemberFit {
  std::string name;
  double backtest_rmse = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> prediction;  // at the future steps, annealing included
  bool reference = false;
};

struct FitSet {
  std::vector<double> x, y, w;
  std::vector<std::size_t> source_index;  // index into observed
};

// Sane region for a forecast: it may go below the observed minimum by the observed drop (and not
// below the floor), and above the last value by the same amount.
struct Bounds {
  double lo, hi;
};
Bounds sane_bounds(std::span<const CurvePoint> observed, const detail::LossOrigin& origin) {
  // Generous on purpose: it only has to catch NaN and runaway extrapolations. A forecast may go
  // below the observed minimum by the whole observed range (never below the floor) and above the
  // last value by the same amount.
  double y_min = observed.back().loss;
  for (const auto& p : observed) y_min = std::min(y_min, p.loss);
  const double span = std::max(origin.range, 0.05 * origin.above(observed.back().loss) + 1e-9);
  return {std::max(y_min - span, origin.floor), observed.back().loss + span};
}

bool prediction_is_sane(const std::vector<double>& p, const Bounds& b) {
  return std::all_of(p.begin(), p.end(), [&](double v) { return std::isfinite(v) && v >= b.lo && v <= b.hi; });
}

double rmse_on(const CurveFamily& f, const std::vector<double>& theta, std::span<const double> x,
               std::span<const double> y) {
  double sse = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double r = f.eval(x[i], theta.data()) - y[i];
    sse += r * r;
  }
  const double v = std::sqrt(sse / static_cast<double>(std::max<std::size_t>(1, x.size())));
  return std::isfinite(v) ? v : std::numeric_limits<double>::infinity();
}

// Fits one family on the whole set (and on its head, to back-test on its tail). Families with
// more than one parameter need strictly more points than parameters.
std::optional<MemberFit> fit_member(const CurveFamily& family, const FitSet& set, std::size_t tail,
                                    std::span<const double> future_x, std::span<const double> future_anneal,
                                    double anneal_drop, const ForecastOptions& options, const Bounds& bounds) {
  const auto n = set.x.size();
  const std::size_t needed = static_cast<std::size_t>(family.num_params) + (family.num_params > 1 ? 1 : 0);
  if (n < needed) return std::nullopt;
  detail::RobustFitOptions fit_options;
  fit_options.max_starts = options.starts_per_family;
  const auto full = detail::robust_fit(family, set.x, set.y, set.w, fit_options);
  if (!full.ok) return std::nullopt;
  MemberFit m;
  m.name = family.name;
  m.prediction.resize(future_x.size());
  for (std::size_t i = 0; i < future_x.size(); ++i)
    m.prediction[i] = family.eval(future_x[i], full.theta.data()) - anneal_drop * future_anneal[i];
  if (!prediction_is_sane(m.prediction, bounds)) return std::nullopt;
  const std::size_t head = n - tail;
  if (tail > 0 && head >= needed) {
    const std::span<const double> hx(set.x.data(), head), hy(set.y.data(), head), hw(set.w.data(), head);
    const auto partial = detail::robust_fit(family, hx, hy, hw, fit_options);
    if (partial.ok)
      m.backtest_rmse = rmse_on(family, partial.theta, std::span<const double>(set.x).subspan(head),
                                std::span<const double>(set.y).subspan(head));
  }
  return m;
}

// Standard deviation of a sequence's point-to-point noise: the median distance of each point
// from its neighbours' midpoint, scaled to a Gaussian sd (for i.i.d. noise that distance has sd
// sqrt(1.5) sigma). The curve's own curvature adds a little; NaN with fewer than three points.
// noise_sd: that of the prefix's points after step 0.
double noise_sd_of(std::span<const double> y) {
  if (y.size() < 3) return std::numeric_limits<double>::quiet_NaN();
  std::vector<double> d;
  for (std::size_t i = 1; i + 1 < y.size(); ++i) d.push_back(std::abs(y[i] - 0.5 * (y[i - 1] + y[i + 1])));
  std::nth_element(d.begin(), d.begin() + static_cast<std::ptrdiff_t>(d.size() / 2), d.end());
  return 1.4826 * d[d.size() / 2] / std::sqrt(1.5);
}
double noise_sd(std::span<const CurvePoint> observed) {
  std::vector<double> y;
  for (const auto& p : observed)
    if (p.step > 0) y.push_back(p.loss);
  return noise_sd_of(y);
}

// Whether the loss is rising over the newest half of the prefix (at least 6 points after step
// 0): the median of pairwise slopes (Theil-Sen, robust to a few outliers) carried over that
// half's steps lifts the loss by more than 3 noise sds about its line. Every family of the
// ensemble falls or levels off, so on such a prefix the fits miss the newest points, and a
// forecast that starts far below where the run is promises a gain at once (a loss that rose from
// 2 to 5 was forecast at 4 from the next step). Returns the sentence for the note, or nothing.
std::optional<std::string> rising_prefix(std::span<const CurvePoint> observed) {
  std::vector<const CurvePoint*> pts;
  for (const auto& p : observed)
    if (p.step > 0) pts.push_back(&p);
  if (pts.size() < 12) return std::nullopt;
  // At most 64 points of that half, evenly chosen: a per-step log has 10^5 (and the pairs grow
  // as their square); the median slope needs no more.
  std::vector<const CurvePoint*> half;
  const std::size_t from = pts.size() / 2, count = pts.size() - from, kept = std::min<std::size_t>(64, count);
  for (std::size_t k = 0; k < kept; ++k) half.push_back(pts[from + k * (count - 1) / std::max<std::size_t>(1, kept - 1)]);
  std::vector<double> slopes;
  for (std::size_t i = 0; i < half.size(); ++i)
    for (std::size_t j = i + 1; j < half.size(); ++j)
      slopes.push_back((half[j]->loss - half[i]->loss) / static_cast<double>(half[j]->step - half[i]->step));
  std::nth_element(slopes.begin(), slopes.begin() + static_cast<std::ptrdiff_t>(slopes.size() / 2), slopes.end());
  const double slope = slopes[slopes.size() / 2];
  if (!(slope > 0)) return std::nullopt;
  std::vector<double> offsets, residuals;
  for (const auto* p : half) offsets.push_back(p->loss - slope * static_cast<double>(p->step));
  std::nth_element(offsets.begin(), offsets.begin() + static_cast<std::ptrdiff_t>(offsets.size() / 2), offsets.end());
  const double offset = offsets[offsets.size() / 2];
  for (const auto* p : half) residuals.push_back(std::abs(p->loss - offset - slope * static_cast<double>(p->step)));
  std::nth_element(residuals.begin(), residuals.begin() + static_cast<std::ptrdiff_t>(residuals.size() / 2), residuals.end());
  const double sd = 1.4826 * residuals[residuals.size() / 2];
  const double rise = slope * static_cast<double>(half.back()->step - half.front()->step);
  if (!(rise > 3.0 * sd) || !(rise > 1e-12 * std::max(1.0, std::abs(half.back()->loss)))) return std::nullopt;
  std::ostringstream why;
  why << "the loss is rising: by " << rise << " over its newest " << half.size() << " points (steps " << half.front()->step
      << " to " << half.back()->step << "), more than 3 times its noise about that trend; flat forecast at the last observed loss; ";
  return why.str();
}

struct AnnealEstimate {
  double drop = 0.0;  // > 0 when measured
  double se = std::numeric_limits<double>::infinity();
};

// Estimates the annealing drop when the prefix already shows decay: fit pow3 to the points
// before decay, attribute the shortfall of the decayed points to annealing (the median of
// shortfall / anneal level). Its standard error is the larger of the noise's (sigma over the
// root sum of squared levels: a little decay says little) and the ratios' own scatter (which
// also carries the pow3 extrapolation's error).
AnnealEstimate estimate_anneal_drop(std::span<const CurvePoint> observed, const ProgressAxis& axis, double sigma) {
  FitSet before;
  std::vector<std::pair<double, double>> decayed;  // (x, y) with anneal level
  std::vector<double> decayed_level;
  for (const auto& p : observed) {
    if (p.step <= 0) continue;
    const double a = axis.anneal_level(p.step);
    if (a < 0.02) {
      before.x.push_back(axis.progress(p.step));
      before.y.push_back(p.loss);
      before.w.push_back(1.0);
    } else {
      decayed.emplace_back(axis.progress(p.step), p.loss);
      decayed_level.push_back(a);
    }
  }
  // A drop measured at anneal level a is extrapolated by 1 / a to the end of the decay, and at
  // small levels the shortfall is mostly the pow3 fit's own extrapolation error (whose sign is
  // anyone's guess), not annealing: measure only once a quarter of the anneal has been seen
  // (the drop is then extrapolated at most 4x).
  const double seen = decayed_level.empty() ? 0.0 : *std::max_element(decayed_level.begin(), decayed_level.end());
  if (decayed.empty() || before.x.size() < 4 || seen < 0.25) return {};
  const auto& pow3 = detail::standard_families().front();
  const auto fit = detail::robust_fit(pow3, before.x, before.y, before.w, {});
  if (!fit.ok) return {};
  std::vector<double> ratios;
  double sum_a2 = 0;
  for (std::size_t i = 0; i < decayed.size(); ++i) {
    ratios.push_back((pow3.eval(decayed[i].first, fit.theta.data()) - decayed[i].second) / decayed_level[i]);
    sum_a2 += decayed_level[i] * decayed_level[i];
  }
  std::vector<double> sorted = ratios;
  std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(sorted.size() / 2), sorted.end());
  const double b = sorted[sorted.size() / 2];
  if (!(std::isfinite(b) && b > 0)) return {};
  AnnealEstimate out;
  out.drop = b;
  out.se = std::isfinite(sigma) ? sigma / std::sqrt(sum_a2) : 0.0;
  if (ratios.size() >= 3) {
    std::vector<double> dev;
    for (double r : ratios) dev.push_back(std::abs(r - b));
    std::nth_element(dev.begin(), dev.begin() + static_cast<std::ptrdiff_t>(dev.size() / 2), dev.end());
    out.se = std::max(out.se, 1.2533 * 1.4826 * dev[dev.size() / 2] / std::sqrt(static_cast<double>(ratios.size())));
  }
  return out;
}

// fit_noise: the noise sd of the points the members were fitted and back-tested on (NaN when
// unknown).
Forecast assemble(std::vector<MemberFit> members, std::span<const std::int64_t> future_steps,
                  const ForecastOptions& options, std::string note, double fit_noise, const detail::LossOrigin& origin) {
  Forecast out;
  out.steps.assign(future_steps.begin(), future_steps.end());
  // Prefer back-tested members; weight by inverse squared tail error, with the fitted points'
  // noise as its floor. The tail is a quarter of the prefix, often a handful of points, and even
  // the true curve would score about the noise sd there: errors within a few noise sds of each other do
  // not rank the members, and weighting them by it anyway let whichever family matched the
  // tail's noise (a flat stretch, most often, matched by a family that levels off) decide the
  // forecast alone. Three sds: on the development runs 1 sd still let it decide, and 3 and 10
  // did alike (bench/RESULTS.md, predictor section, "An ensemble that does not level off"). The
  // noise is estimated from second differences, which a short, steep prefix's own bend inflates
  // (a clean power law sampled 6 times: 3 sds above its last drop): the weights are then nearly
  // equal, as they should be where a back-test of one or two points says little.
  constexpr double kNoiseFloorSds = 3.0;
  std::vector<MemberFit> tested, untested;
  for (auto& m : members) (std::isfinite(m.backtest_rmse) ? tested : untested).push_back(std::move(m));
  std::sort(tested.begin(), tested.end(), [](const MemberFit& a, const MemberFit& b) { return a.backtest_rmse < b.backtest_rmse; });
  // Prior reliability of each family's extrapolation (learned on other runs): multiplies the
  // back-test weight, and members are ranked by the product. Families it does not name get 1.
  const auto prior_of = [&](const MemberFit& m) {
    if (m.reference) return 1.0;
    const auto it = options.member_prior.find(m.name);
    return it == options.member_prior.end() ? 1.0 : it->second;
  };
  std::vector<MemberFit> chosen;
  std::vector<double> weights;
  if (!tested.empty()) {
    double floor = std::max(1e-9, 0.1 * tested.front().backtest_rmse);
    if (std::isfinite(fit_noise)) floor = std::max(floor, kNoiseFloorSds * fit_noise);
    const auto weight_of = [&](const MemberFit& m) { return prior_of(m) / (m.backtest_rmse * m.backtest_rmse + floor * floor); };
    if (!options.member_prior.empty())
      std::stable_sort(tested.begin(), tested.end(), [&](const MemberFit& a, const MemberFit& b) { return weight_of(a) > weight_of(b); });
    for (std::size_t i = 0; i < tested.size() && static_cast<int>(i) < options.max_members; ++i) {
      if (!(weight_of(tested[i]) > 0)) break;
      weights.push_back(weight_of(tested[i]));
      chosen.push_back(std::move(tested[i]));
    }
  } else {
    // Too few points to back-test: trust the reference prior alone when there is one.
    const bool any_reference = std::any_of(untested.begin(), untested.end(), [](const MemberFit& m) { return m.reference; });
    for (auto& m : untested) {
      if (any_reference && !m.reference) continue;
      if (!(prior_of(m) > 0)) continue;
      weights.push_back(prior_of(m));
      chosen.push_back(std::move(m));
    }
    if (!chosen.empty())
      note += options.member_prior.empty() ? "prefix too short to back-test: members weighted equally; "
                                           : "prefix too short to back-test: members weighted by member_prior; ";
  }
  const double total_w = std::accumulate(weights.begin(), weights.end(), 0.0);
  const std::size_t n = future_steps.size();
  out.loss.assign(n, 0.0);
  std::vector<double> var(n, 0.0);
  for (std::size_t k = 0; k < chosen.size(); ++k)
    for (std::size_t i = 0; i < n; ++i) out.loss[i] += weights[k] / total_w * chosen[k].prediction[i];
  for (std::size_t k = 0; k < chosen.size(); ++k)
    for (std::size_t i = 0; i < n; ++i) {
      const double dlt = chosen[k].prediction[i] - out.loss[i];
      var[i] += weights[k] / total_w * dlt * dlt;
    }
  const double tail_err = chosen.empty() || !std::isfinite(chosen.front().backtest_rmse) ? 0.0 : chosen.front().backtest_rmse;
  out.lower.resize(n);
  out.upper.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    // Back-test error grows with the horizon (in future points, relative to the held-out tail).
    const double grow = std::sqrt(static_cast<double>(i + 1));
    // A forecast fitted to data is never certain, even when every member agrees and the prefix
    // fits exactly (a flat plateau): at least 1 % of the level by the end of the horizon.
    const double floor = 0.01 * origin.above(out.loss[i]) * std::sqrt(static_cast<double>(i + 1) / static_cast<double>(n));
    const double sd = std::max(floor, std::sqrt(var[i] + tail_err * tail_err * grow));
    out.lower[i] = out.loss[i] - options.band_z * sd;
    out.upper[i] = out.loss[i] + options.band_z * sd;
  }
  for (std::size_t k = 0; k < chosen.size(); ++k)
    out.members.push_back({chosen[k].name, weights[k] / total_w, chosen[k].backtest_rmse, chosen[k].prediction});
  out.note = std::move(note);
  return out;
}

// Last resort: a gentle power-law decay through the last point (or flat), flagged.
Forecast fallback_forecast(std::span<const CurvePoint> observed, std::span<const std::int64_t> future_steps,
                           const ProgressAxis& axis, const ForecastOptions& options, std::string note,
                           const detail::LossOrigin& origin) {
  Forecast out;
  out.fallback = true;
  out.steps.assign(future_steps.begin(), future_steps.end());
  const auto& last = observed.back();
  // Slope of loss vs x^-0.5 from the last two usable points; flat when it is not a decrease.
  double a = 0.0;
  std::vector<const CurvePoint*> usable;
  for (const auto& p : observed)
    if (p.step > 0) usable.push_back(&p);
  if (usable.size() >= 2) {
    const auto& p0 = *usable[usable.size() - 2];
    const auto& p1 = *usable.back();
    const double g0 = std::pow(axis.progress(p0.step), -0.5), g1 = std::pow(axis.progress(p1.step), -0.5);
    if (g0 != g1) a = (p0.loss - p1.loss) / (g0 - g1);
  }
  // With at most one informative point there is no shape at all: assume the loss keeps falling
  // gently (loss ~ x^-0.05, about 9 % over a 6x longer run) rather than a flat curve, which
  // would make the planner never publish. With two or more points that do not fall, stay flat.
  double exponent = 0.5;
  if (!(a > 0) || !std::isfinite(a)) {
    a = 0.0;
    if (usable.size() <= 1 && origin.has_floor() && last.loss > origin.floor) {
      exponent = 0.05;
      note += "fallback: no curve shape observed yet, assuming a gentle decay (loss ~ x^-0.05); ";
    } else {
      note += "fallback: flat forecast at the last observed loss; ";
    }
  } else {
    note += "fallback: x^-0.5 decay through the last two points, at most halfway to the loss floor; ";
  }
  const double g_last = std::pow(axis.progress(last.step), -0.5);
  const Bounds bounds = sane_bounds(observed, origin);
  // The line through two early points, carried to the end of the run, falls through any floor
  // (5, 4, 1 at steps 0, 10, 20 of 2,000 gave 0 at once): a fallback is the forecast of last
  // resort, so it falls at most halfway from the last loss to the lowest the bounds allow.
  const double lowest = bounds.lo + 0.5 * (last.loss - bounds.lo);
  for (auto s : future_steps) {
    double v = std::max(lowest, last.loss + a * (std::pow(axis.progress(s), -0.5) - g_last));
    if (exponent != 0.5) v = origin.floor + (last.loss - origin.floor) * std::pow(axis.progress(s) / axis.progress(last.step), -exponent);
    out.loss.push_back(std::clamp(v, bounds.lo, bounds.hi));
  }
  const double band = 0.1 * std::max(1e-9, origin.above(last.loss));
  for (double v : out.loss) {
    out.lower.push_back(v - options.band_z * band);
    out.upper.push_back(v + options.band_z * band);
  }
  out.members.push_back({a > 0 ? "fallback_power" : exponent != 0.5 ? "fallback_gentle_decay" : "fallback_flat", 1.0,
                         std::numeric_limits<double>::quiet_NaN(), out.loss});
  out.note = std::move(note);
  return out;
}

Forecast flat_forecast(std::span<const CurvePoint> observed, std::span<const std::int64_t> future_steps,
                       const ForecastOptions& options, std::string note, const detail::LossOrigin& origin) {
  Forecast out;
  out.fallback = true;
  out.steps.assign(future_steps.begin(), future_steps.end());
  const double level = observed.back().loss;
  const double band = options.band_z * 0.1 * std::max(1e-9, origin.above(level));
  out.loss.assign(future_steps.size(), level);
  out.lower.assign(future_steps.size(), level - band);
  out.upper.assign(future_steps.size(), level + band);
  out.members.push_back({"flat", 1.0, std::numeric_limits<double>::quiet_NaN(), out.loss});
  out.note = std::move(note);
  return out;
}

// Viper's training-loss predictor as its paper states it (Ye et al., ICPP 2024, section 4.3):
// fit Exp2 a·e^(-bx), Exp3 a·e^(-bx)+c, Lin2 a·x+b and Expd3 c-(c-a)·e^(-bx) to the warm-up
// losses by least squares and keep the one with the lowest mean squared error. So every point
// weighs the same, none is binned, no outlier is down-weighted and no extrapolation is rejected
// as implausible (a falling Lin2 may go below zero): each of those would be ours, not Viper's.
// x is the step over total_steps (the paper uses the iteration number: the same functions with
// b and a rescaled); step 0, before any training, is not a training loss and is left out.
Forecast viper_forecast(std::span<const CurvePoint> observed, std::span<const std::int64_t> future_steps,
                        const ForecastOptions& options, const detail::LossOrigin& origin) {
  std::vector<double> x, y;
  for (const auto& p : observed) {
    if (p.step <= 0) continue;
    x.push_back(static_cast<double>(p.step) / static_cast<double>(options.total_steps));
    y.push_back(p.loss);
  }
  const std::vector<double> w(x.size(), 1.0);
  const auto& families = detail::viper_families();
  const char* const paper_name[] = {"Exp2", "Exp3", "Lin2", "Expd3"};  // viper_families() order
  detail::RobustFitOptions plain;
  plain.irls_rounds = 1;  // ordinary least squares
  plain.max_starts = options.starts_per_family;
  std::string note = "viper: MSE on the warm-up:";
  std::optional<std::size_t> best;
  double best_mse = std::numeric_limits<double>::infinity();
  std::vector<detail::ParameterVector> thetas(families.size());
  for (std::size_t k = 0; k < families.size(); ++k) {
    const auto& family = families[k];
    const std::size_t needed = static_cast<std::size_t>(family.num_params) + (family.num_params > 1 ? 1 : 0);
    detail::FitResult fit;
    if (x.size() >= needed) fit = detail::robust_fit(family, x, y, w, plain);
    const double mse = fit.ok ? fit.weighted_rmse * fit.weighted_rmse : std::numeric_limits<double>::quiet_NaN();
    note += std::string(" ") + paper_name[k] + " " + (fit.ok ? std::to_string(mse) : std::string("not fitted"));
    if (fit.ok && std::isfinite(mse) && mse < best_mse) {
      best_mse = mse;
      best = k;
      thetas[k] = fit.theta;
    }
  }
  if (!best) return flat_forecast(observed, future_steps, options, "viper: no function could be fitted, flat forecast; ", origin);
  MemberFit chosen;
  chosen.name = families[*best].name;
  for (auto s : future_steps)
    chosen.prediction.push_back(families[*best].eval(static_cast<double>(s) / static_cast<double>(options.total_steps),
                                                     thetas[*best].data()));
  if (!std::all_of(chosen.prediction.begin(), chosen.prediction.end(), [](double v) { return std::isfinite(v); }))
    return flat_forecast(observed, future_steps, options, note + "; " + paper_name[*best] + " overflows, flat forecast; ", origin);
  ForecastOptions alone = options;  // Viper keeps its one function whatever the priors say
  alone.member_prior.clear();
  return assemble({chosen}, future_steps, alone, note + "; kept " + paper_name[*best] + "; ",
                  std::numeric_limits<double>::quiet_NaN(), origin);
}

// `floor`: the loss floor in force for `observed` (loss_floor.h).
Forecast forecast_impl(std::span<const CurvePoint> observed, const ForecastOptions& options, bool viper, double floor) {
  validate_observed(observed, options);
  const auto origin = detail::LossOrigin::of(observed, floor);
  const auto future_steps = future_grid(observed, options);
  if (viper) {
    Forecast out = viper_forecast(observed, future_steps, options, origin);
    out.time_s = detail::forecast_times(observed, future_steps, options.total_steps, nullptr, out.note);
    out.loss_floor = floor;
    return out;
  }
  if (auto rising = rising_prefix(observed)) {
    Forecast out = flat_forecast(observed, future_steps, options, std::move(*rising), origin);
    out.loss_floor = floor;
    out.time_s = detail::forecast_times(observed, future_steps, options.total_steps, nullptr, out.note);
    return out;
  }
  std::string note;
  const ProgressAxis scheduled(options.total_steps, options.lr_schedule);
  const ReferenceCurve* reference = options.reference ? &*options.reference : nullptr;

  double anneal_drop = 0.0;
  bool use_schedule = scheduled.schedule_aware();
  if (use_schedule) {
    if (std::isfinite(options.anneal_drop)) {
      anneal_drop = std::max(0.0, options.anneal_drop);
    } else {
      const double sigma = noise_sd(observed);
      const auto measured = estimate_anneal_drop(observed, scheduled, sigma);
      const double prior = options.anneal_noise_prior > 0 && std::isfinite(sigma) ? options.anneal_noise_prior * sigma : 0.0;
      if (measured.drop > 2.0 * measured.se) {
        anneal_drop = measured.drop;
        note += "anneal drop " + std::to_string(anneal_drop) + " measured on the prefix's decay; ";
      } else if (prior > 0 && scheduled.anneals_after(observed.back().step)) {
        anneal_drop = prior;
        note += "anneal drop " + std::to_string(anneal_drop) + " from the noise prior (" +
                std::to_string(options.anneal_noise_prior) + " x the prefix's noise sd); ";
      }
    }
    // Cumulative-rate progress alone predicts a slowdown while the rate decays, the opposite of
    // what real runs do; without a known annealing drop the step axis is the safer choice.
    if (!std::isfinite(options.anneal_drop) && !(anneal_drop > 0)) {
      use_schedule = false;
      note += "lr_schedule not used: annealing drop unknown (set anneal_drop or observe some decay); ";
    }
  }
  const ProgressAxis axis = use_schedule ? scheduled : ProgressAxis(options.total_steps, std::nullopt);

  // Parametric families: skip the initialisation point (step 0 is not on the power law).
  FitSet param;
  for (std::size_t i = 0; i < observed.size(); ++i) {
    if (observed[i].step <= 0) continue;
    param.x.push_back(axis.progress(observed[i].step));
    param.y.push_back(observed[i].loss + anneal_drop * axis.anneal_level(observed[i].step));
    param.source_index.push_back(i);
  }
  if (options.max_fit_points > 0 && param.x.size() > static_cast<std::size_t>(options.max_fit_points)) {
    // Consecutive bins, last bin ending at the last point so the most recent level is kept.
    FitSet binned;
    const std::size_t n = param.x.size(), bins = static_cast<std::size_t>(options.max_fit_points);
    for (std::size_t b = 0; b < bins; ++b) {
      const std::size_t lo = b * n / bins, hi = (b + 1) * n / bins;
      double sx = 0, sy = 0;
      for (std::size_t i = lo; i < hi; ++i) sx += param.x[i], sy += param.y[i];
      binned.x.push_back(sx / static_cast<double>(hi - lo));
      binned.y.push_back(sy / static_cast<double>(hi - lo));
      binned.source_index.push_back(param.source_index[hi - 1]);
    }
    param = std::move(binned);
  }
  // Later points matter more for extrapolation.
  for (double x : param.x) param.w.push_back(param.x.empty() ? 1.0 : x / param.x.back());
  const auto tail_of = [&](std::size_t n) {
    return n < 3 ? std::size_t{0} : std::max<std::size_t>(1, static_cast<std::size_t>(std::lround(options.backtest_fraction * static_cast<double>(n))));
  };

  std::vector<double> future_x, future_anneal, zero_anneal(future_steps.size(), 0.0);
  for (auto s : future_steps) {
    future_x.push_back(axis.progress(s));
    future_anneal.push_back(axis.anneal_level(s));
  }
  const Bounds bounds = sane_bounds(observed, origin);
  std::vector<MemberFit> members;
  for (const auto* family : detail::ensemble_families()) {
    if (family->falls_to_zero && !(origin.floor == 0.0)) continue;
    if (auto m = fit_member(*family, param, tail_of(param.x.size()), future_x, future_anneal, anneal_drop, options, bounds))
      members.push_back(std::move(*m));
  }
  if (reference) {
    // Reference prior, in step progress (it already contains its own schedule's shape).
    const auto shape = [reference](double u) { return detail::interpolate(reference->progress, reference->loss, u); };
    FitSet ref;
    for (const auto& p : observed) {
      ref.x.push_back(static_cast<double>(p.step) / static_cast<double>(options.total_steps));
      ref.y.push_back(p.loss);
      ref.w.push_back(1.0);
    }
    // Weight later points more here as well, but keep step 0 in play for very short prefixes.
    for (std::size_t i = 0; i < ref.w.size(); ++i) ref.w[i] = 0.1 + ref.x[i] / std::max(ref.x.back(), 1e-12);
    std::vector<double> ref_future_x;
    for (auto s : future_steps) ref_future_x.push_back(static_cast<double>(s) / static_cast<double>(options.total_steps));
    const std::size_t tail = tail_of(param.x.size());
    bool fitted = false;
    for (const auto& family : {detail::affine_shape_family("reference_affine", shape),
                               detail::shifted_shape_family("reference_shift", shape)}) {
      if (auto m = fit_member(family, ref, tail, ref_future_x, zero_anneal, 0.0, options, bounds)) {
        m->reference = true;
        members.push_back(std::move(*m));
        fitted = true;
      }
    }
    // Said, as a schedule set aside is: the forecast was the one without it, without a word.
    if (!fitted) note += "reference not used: no reference family could be fitted sanely to the observed points; ";
  }

  Forecast out;
  if (members.empty()) {
    out = fallback_forecast(observed, future_steps, axis, options, "no family could be fitted sanely; " + note, origin);
  } else {
    out = assemble(std::move(members), future_steps, options, note, noise_sd_of(param.y), origin);
    if (out.members.empty()) out = fallback_forecast(observed, future_steps, axis, options, note, origin);
  }
  // The band is the ensemble's spread and back-test error around its mean, which a loss near its
  // floor would take below it; the members and the mean are within bounds already.
  detail::raise_to_floor(out.lower, floor);
  out.loss_floor = floor;
  out.time_s = detail::forecast_times(observed, future_steps, options.total_steps, reference, out.note);
  return out;
}

}  // namespace

void check_forecast_options(const ForecastOptions& options) {
  auto refuse = [](const std::string& why) { throw Error(ErrorCode::kInvalidArgument, "forecast: " + why); };
  if (options.total_steps <= 0) refuse("total_steps must be positive, got " + std::to_string(options.total_steps));
  if (options.total_steps > kMaxCurveStep)
    refuse("total_steps (" + std::to_string(options.total_steps) + ") is beyond 2^53, the largest step the predictor takes");
  // Without a bound a log with a point per step and a long run grew a future point per step
  // (2^40 of them ran out of memory).
  if (options.max_future_points < 1) refuse("max_future_points must be >= 1, got " + std::to_string(options.max_future_points));
  // The grid keeps only steps after the previous one: an unsorted list lost steps without a word
  // ([1500, 400, 900] planned on 1500 and the end only).
  for (std::size_t i = 1; i < options.future_steps.size(); ++i) {
    if (!(options.future_steps[i] > options.future_steps[i - 1]))
      refuse("future_steps must be strictly increasing: " + std::to_string(options.future_steps[i]) + " at index " +
             std::to_string(i) + " follows " + std::to_string(options.future_steps[i - 1]));
  }
  // A relative reliability (families not named have 1); past 1e6 a weight divided by a small
  // back-test error overflowed, and the forecast came out NaN.
  for (const auto& [family, prior] : options.member_prior)
    if (!std::isfinite(prior) || prior < 0 || prior > 1e6)
      refuse("member_prior for '" + family + "' must be in [0, 1e6], got " + std::to_string(prior));
  if (!(options.backtest_fraction > 0 && options.backtest_fraction < 1))
    refuse("backtest_fraction must be in (0, 1), got " + std::to_string(options.backtest_fraction));
  // NaN made every band NaN, and a negative one put lower above upper.
  if (!(std::isfinite(options.band_z) && options.band_z >= 0))
    refuse("band_z must be finite and >= 0, got " + std::to_string(options.band_z));
  // +infinity would put every loss below the floor; -infinity (none) and NaN (from the data) are
  // settings of their own.
  if (options.loss_floor == std::numeric_limits<double>::infinity()) refuse("loss_floor must not be +infinity");
  // As losses beyond it are refused: the losses less such a floor keep none of their digits (-1e300
  // turned every loss into 1e300 and the forecast into noise, with a note that it was flat).
  if (std::isfinite(options.loss_floor) && std::abs(options.loss_floor) > 1e100) {
    std::ostringstream why;
    why << "loss_floor must be within +-1e100, got " << options.loss_floor;
    refuse(why.str());
  }
  // Fewer would leave nothing to forecast with but the fallback, whatever fits.
  if (options.max_members < 1) refuse("max_members must be >= 1, got " + std::to_string(options.max_members));
  if (options.starts_per_family < 1) refuse("starts_per_family must be >= 1, got " + std::to_string(options.starts_per_family));
  if (options.lr_schedule) detail::ProgressAxis(options.total_steps, options.lr_schedule);  // throws naming what is wrong
  if (const auto& r = options.reference) {
    // Interpolated by binary search: a NaN or unsorted progress read past the curve's end.
    if (r->progress.size() < 2 || r->progress.size() != r->loss.size())
      refuse("reference curve needs >= 2 points and as many losses as progress values");
    if (!r->time_fraction.empty() && r->time_fraction.size() != r->progress.size())
      refuse("reference curve's time_fraction must be empty or as long as its progress");
    for (std::size_t i = 0; i < r->progress.size(); ++i) {
      const std::string at = " at reference point " + std::to_string(i);
      if (!std::isfinite(r->progress[i]) || (i > 0 && !(r->progress[i] > r->progress[i - 1])))
        refuse("reference progress must be finite and strictly increasing" + at);
      // Progress is step / total_steps: past 1 (steps given as progress, say) the reference was
      // read as a run several times longer than this one, without a word.
      if (r->progress[i] < 0 || r->progress[i] > 1)
        refuse("reference progress must be in [0, 1] (step / total_steps), got " + std::to_string(r->progress[i]) + at);
      if (!std::isfinite(r->loss[i])) refuse("reference loss is not finite" + at);
      if (!r->time_fraction.empty() && !std::isfinite(r->time_fraction[i])) refuse("reference time_fraction is not finite" + at);
    }
  }
}

namespace {

Forecast forecast_of_kept(std::span<const CurvePoint> observed, const ForecastOptions& options) {
  const double floor = options.loss_floor;
  if (std::isnan(floor) || std::isinf(floor)) {
    return forecast_impl(observed, options, false, std::isnan(floor) ? detail::loss_floor(observed) : floor);
  }
  // A stated floor: the forecast is made on the loss above it, where the families that level off
  // at 0 level off at the floor, and shifted back. A loss of 1000.4 falling to 1000.3 above a
  // floor of 1000 is then forecast as 0.4 falling to 0.3 is above 0.
  std::vector<CurvePoint> above(observed.begin(), observed.end());
  for (auto& p : above) {
    if (!(p.loss >= floor))  // NaN is refused by validate_observed with its own message
      if (std::isfinite(p.loss))
      {
        // %g: std::to_string printed 1e-8 as 0.000000, and 1e300 as 301 digits.
        std::ostringstream why;
        why << "forecast: the loss at step " << p.step << " (" << p.loss << ") is below loss_floor (" << floor << ")";
        throw Error(ErrorCode::kInvalidArgument, why.str());
      }
    p.loss -= floor;
  }
  Forecast out = forecast_impl(above, options, false, 0.0);
  // Subtracting a floor far below the losses rounds them by |floor| x 2^-52: said where that is
  // more than a millionth of how far the losses range (the forecast then reads rounding).
  const auto [lowest, highest] = std::minmax_element(observed.begin(), observed.end(),
                                                      [](const CurvePoint& a, const CurvePoint& b) { return a.loss < b.loss; });
  if (const double spread = highest->loss - lowest->loss;
      spread > 0 && std::abs(floor) * std::numeric_limits<double>::epsilon() > 1e-6 * spread) {
    std::ostringstream note;
    note << "loss_floor " << floor << " lies so far from the losses (which range over " << spread
         << ") that less than a millionth of that range survives subtracting it: state a floor near the losses; ";
    out.note = note.str() + out.note;
  }
  const auto shift = [floor](std::vector<double>& values) {
    for (double& v : values) v += floor;
  };
  shift(out.loss);
  shift(out.lower);
  shift(out.upper);
  for (auto& m : out.members) shift(m.loss);
  out.loss_floor = floor;
  return out;
}

}  // namespace

Forecast forecast_curve(std::span<const CurvePoint> observed, const ForecastOptions& options) {
  std::vector<std::int64_t> left_out;
  const std::vector<CurvePoint> kept = detail::without_isolated_outliers(observed, left_out);
  if (left_out.empty()) return forecast_of_kept(observed, options);
  Forecast out = forecast_of_kept(kept, options);
  std::ostringstream note;
  note << "left out " << left_out.size() << " isolated outlier" << (left_out.size() == 1 ? "" : "s") << " (step";
  for (std::size_t i = 0; i < std::min<std::size_t>(left_out.size(), 5); ++i) note << (i ? ", " : " ") << left_out[i];
  note << (left_out.size() > 5 ? ", ...); " : "); ");
  out.note = note.str() + out.note;
  return out;
}

Forecast forecast_viper(std::span<const CurvePoint> observed, const ForecastOptions& options) {
  return forecast_impl(observed, options, true, detail::loss_floor(observed));
}

}  // namespace modelcast::predictor
