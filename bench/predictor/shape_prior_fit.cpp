#include "shape_prior_fit.h"

#include "parallel_for.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace mp = modelcast::predictor;

namespace modelcast::bench {
namespace {

double interp(const std::vector<std::int64_t>& xs, const std::vector<double>& ys, std::int64_t x) {
  if (x <= xs.front()) return ys.front();
  if (x >= xs.back()) return ys.back();
  const auto i = static_cast<std::size_t>(std::upper_bound(xs.begin(), xs.end(), x) - xs.begin());
  const double f = static_cast<double>(x - xs[i - 1]) / static_cast<double>(xs[i] - xs[i - 1]);
  return ys[i - 1] + f * (ys[i] - ys[i - 1]);
}

// A run's forecast from its warm-up prefix, and the scale its errors are measured on: the
// mean absolute deviation of the rest of the run from the prefix's level (the error of a flat
// forecast), so errors compare across runs and families.
struct Scored {
  const mp::LossLog& run;
  std::size_t k;  // points in the prefix
  std::vector<mp::CurvePoint> prefix;
  mp::Forecast forecast;
  double flat;

  // The error of `forecast` (from this prefix) on the rest of the run, relative to a flat one.
  double relative_error(const mp::Forecast& f) const {
    const auto path = mp::extend_with_forecast(prefix, f);
    double err = 0;
    for (std::size_t i = k; i < run.points.size(); ++i) {
      err += std::abs(interp(path.steps, path.loss, run.points[i].step) - run.points[i].loss);
    }
    return err / flat;
  }
};

// Forecasts every run from its prefix (`adjust` edits the plan's forecast options) on `threads`
// threads and calls score(index, scored) for each run long enough and not flat after the prefix.
// score runs on the worker threads and writes only its own run's entries.
template <typename Adjust, typename Score>
void for_each_forecast(const std::vector<std::pair<const mp::LossLog*, std::string>>& runs,
                       const EvalSettings& settings, int threads, Adjust adjust, Score score) {
  parallel_for(runs.size(), threads, [&](std::size_t r) {
    const auto& run = *runs[r].first;
    const std::size_t n = run.points.size();
    const std::size_t k = warmup_points(n, settings.warmup_fraction);
    if (k + 2 > n) return;
    std::vector<mp::CurvePoint> prefix(run.points.begin(), run.points.begin() + static_cast<std::ptrdiff_t>(k));
    mp::ForecastOptions fo = plan_forecast_options(run, settings);
    adjust(fo);
    auto forecast = mp::forecast_curve(prefix, fo);
    std::vector<double> recent;
    for (std::size_t i = k - std::min<std::size_t>(3, k); i < k; ++i) recent.push_back(prefix[i].loss);
    std::sort(recent.begin(), recent.end());
    const double level = recent[recent.size() / 2];
    double flat = 0;
    for (std::size_t i = k; i < n; ++i) flat += std::abs(run.points[i].loss - level);
    if (!(flat > 0)) return;
    score(r, Scored{run, k, std::move(prefix), std::move(forecast), flat});
  });
}

// The grid, fixed before any figure was seen: fall scaled from a quarter to twice the
// forecast's, reached from twice as slowly to four times as fast.
std::vector<ShapePrior> make_grid() {
  std::vector<ShapePrior> g = {{1.0, 1.0}};
  for (double a : {0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0})
    for (double s : {0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0})
      if (!(a == 1.0 && s == 1.0)) g.push_back({a, s});
  return g;
}

// One path of a forecast under a shape prior, around level l0 at step `last`.
std::vector<double> reshape(const std::vector<double>& path, const std::vector<double>& xs, double last, double l0,
                            const ShapePrior& prior) {
  std::vector<double> out(path.size());
  for (std::size_t i = 0; i < path.size(); ++i) {
    const double x = last + prior.speed * (xs[i] - last);
    double v;
    if (x >= xs.back()) {
      v = path.back();
    } else {
      const auto j = static_cast<std::size_t>(std::upper_bound(xs.begin(), xs.end(), x) - xs.begin());
      // Before the first forecast step: between the current level and the first forecast point.
      const double x0 = j == 0 ? last : xs[j - 1], y0 = j == 0 ? l0 : path[j - 1];
      v = y0 + (x - x0) / (xs[j] - x0) * (path[j] - y0);
    }
    out[i] = l0 + prior.fall_scale * (v - l0);
  }
  return out;
}

}  // namespace

mp::Forecast apply_shape_prior(std::span<const mp::CurvePoint> observed, const mp::Forecast& forecast, const ShapePrior& prior) {
  if (!std::isfinite(prior.fall_scale) || prior.fall_scale < 0 || !std::isfinite(prior.speed) || prior.speed <= 0 ||
      observed.empty())
    throw std::invalid_argument("shape prior: fall_scale must be >= 0, speed > 0, and the prefix not empty");
  mp::Forecast out = forecast;
  if (forecast.steps.empty() || (prior.fall_scale == 1.0 && prior.speed == 1.0)) return out;
  std::vector<double> recent;
  for (std::size_t i = observed.size() - std::min<std::size_t>(3, observed.size()); i < observed.size(); ++i)
    recent.push_back(observed[i].loss);
  std::sort(recent.begin(), recent.end());
  const double l0 = recent[recent.size() / 2];
  const double last = static_cast<double>(observed.back().step);
  std::vector<double> xs;
  for (auto s : forecast.steps) xs.push_back(static_cast<double>(s));
  const auto apply = [&](std::vector<double>& p) {
    if (p.size() == xs.size()) p = reshape(p, xs, last, l0, prior);
  };
  apply(out.loss);
  apply(out.lower);
  apply(out.upper);
  for (auto& m : out.members) apply(m.loss);
  return out;
}

double ShapePriorFit::objective(std::size_t cell, const std::string& held_out) const {
  double sum = 0;
  int n = 0;
  for (const auto& [fam, err] : family_error)
    if (fam != held_out && std::isfinite(err[cell])) sum += err[cell], ++n;
  return n ? sum / n : std::numeric_limits<double>::infinity();
}

std::size_t ShapePriorFit::best(const std::string& held_out) const {
  std::size_t b = 0;
  double best_v = objective(0, held_out);
  for (std::size_t c = 1; c < grid.size(); ++c) {
    const double v = objective(c, held_out);
    if (v < best_v - 1e-12) best_v = v, b = c;
  }
  return b;
}

std::map<std::size_t, double> ShapePriorFit::mixture(const std::string& held_out) const {
  std::map<std::size_t, double> out;
  int families = 0;
  for (const auto& [fam, n] : family_runs) families += fam != held_out && n > 0;
  for (const auto& [fam, cell] : run_best)
    if (fam != held_out) out[cell] += 1.0 / (families * family_runs.at(fam));
  return out;
}

ShapePriorFit fit_shape_prior(const std::vector<std::pair<const mp::LossLog*, std::string>>& runs,
                              const EvalSettings& settings, int threads) {
  ShapePriorFit fit;
  fit.grid = make_grid();
  const std::size_t cells = fit.grid.size();
  // Per run, per cell: relative error (NaN: skipped).
  std::vector<std::vector<double>> rel(runs.size(), std::vector<double>(cells, std::nan("")));
  for_each_forecast(runs, settings, threads, [](mp::ForecastOptions&) {},
                    [&](std::size_t r, const Scored& run) {
                      for (std::size_t c = 0; c < cells; ++c) {
                        rel[r][c] = run.relative_error(apply_shape_prior(run.prefix, run.forecast, fit.grid[c]));
                      }
                    });
  std::map<std::string, std::vector<double>> sum;
  for (std::size_t r = 0; r < runs.size(); ++r) {
    if (std::isnan(rel[r][0])) continue;
    auto& s = sum[runs[r].second];
    s.resize(cells, 0.0);
    for (std::size_t c = 0; c < cells; ++c) s[c] += rel[r][c];
    ++fit.family_runs[runs[r].second];
    fit.run_best.emplace_back(runs[r].second,
                              static_cast<std::size_t>(std::min_element(rel[r].begin(), rel[r].end()) - rel[r].begin()));
  }
  for (auto& [fam, s] : sum) {
    for (auto& v : s) v /= fit.family_runs[fam];
    fit.family_error[fam] = s;
  }
  return fit;
}

std::map<std::string, double> MemberPriorFit::prior(const std::string& held_out, double power) const {
  std::map<std::string, std::pair<double, int>> acc;
  for (const auto& [fam, members] : error)
    if (fam != held_out)
      for (const auto& [m, e] : members) acc[m].first += e, ++acc[m].second;
  std::map<std::string, double> out;
  double sum = 0;
  for (const auto& [m, a] : acc) {
    const double e = a.first / a.second;
    out[m] = std::pow(std::max(1e-3, e), -power);
    sum += out[m];
  }
  for (auto& [m, p] : out) p *= static_cast<double>(out.size()) / sum;
  return out;
}

MemberPriorFit fit_member_prior(const std::vector<std::pair<const mp::LossLog*, std::string>>& runs,
                                const EvalSettings& settings, int threads) {
  std::vector<std::map<std::string, double>> rel(runs.size());
  for_each_forecast(runs, settings, threads, [](mp::ForecastOptions& fo) { fo.max_members = 1000; },
                    [&](std::size_t r, const Scored& run) {
                      if (run.forecast.fallback) return;
                      for (const auto& m : run.forecast.members) {
                        mp::Forecast one = run.forecast;
                        one.loss = m.loss;
                        rel[r][m.family] = run.relative_error(one);
                      }
                    });
  MemberPriorFit fit;
  std::map<std::string, std::map<std::string, int>> count;
  for (std::size_t r = 0; r < runs.size(); ++r)
    for (const auto& [m, e] : rel[r]) fit.error[runs[r].second][m] += e, ++count[runs[r].second][m];
  for (auto& [fam, members] : fit.error)
    for (auto& [m, e] : members) e /= count[fam][m];
  return fit;
}

}  // namespace modelcast::bench
