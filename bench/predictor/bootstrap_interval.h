// How far a target's figures could move with another sample of runs of the same kinds: the
// percentile bootstrap of the median regret, the p90 regret and the share of runs that tie or
// beat publishing every tenth of the run, resampling runs within each family.
//
// Why within each family: a group's runs come in families of 4 to 24 whose regrets differ by
// tens of points; resampling the pooled runs would also draw groups made mostly of one family,
// which no sample of the same kinds looks like. What the interval does not cover is a family
// the group lacks: it says how sure the figure is for these kinds of runs, not for new kinds.
// Hand-written (a few lines) because none of the libraries the project builds with offers a
// bootstrap (Boost.Math and Eigen have none).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace modelcast::bench {

// The quantile the harness reports everywhere: linear interpolation between order statistics
// (NaN for no values), so that an interval and its figure are made the same way.
inline double quantile(std::vector<double> v, double q) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const auto hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

// One run at one publish cost, as a target counts it: its regret enters the quantiles only
// when the run has an achievable gain; every run enters the every-tenth share.
struct ScoredRun {
  std::string family;
  bool has_gain = false;
  double regret_pct = 0.0;
  bool ties_or_beats_every_e = false;
};

struct Interval {
  double low = std::nan("");
  double high = std::nan("");
};

struct TargetIntervals {
  Interval median_regret_pct;
  Interval p90_regret_pct;
  Interval ties_or_beats_every_e;
};

struct BootstrapOptions {
  int resamples = 2000;
  double level = 0.9;         // central share of the resampled figures the interval holds
  // Fixed: the same runs give the same interval on every machine with the same C++ standard
  // library (std::uniform_int_distribution's mapping is the library's own).
  std::uint64_t seed = 2024;
};

// Intervals for the figures of `runs`. A resample whose runs have no gain leaves the regret
// quantiles of that resample out; an interval is NaN when every resample did. Pure function;
// throws std::invalid_argument for resamples < 1 or a level outside (0, 1).
inline TargetIntervals bootstrap_target_intervals(std::span<const ScoredRun> runs, const BootstrapOptions& options = {}) {
  if (options.resamples < 1 || !(options.level > 0.0 && options.level < 1.0))
    throw std::invalid_argument("bootstrap: resamples must be >= 1 and level in (0, 1)");
  std::map<std::string, std::vector<const ScoredRun*>> by_family;
  for (const auto& r : runs) by_family[r.family].push_back(&r);
  std::mt19937_64 rng(options.seed);
  std::vector<double> medians, p90s, shares;
  std::vector<double> regrets;
  for (int b = 0; b < options.resamples; ++b) {
    regrets.clear();
    std::size_t ties = 0, drawn = 0;
    for (const auto& [family, members] : by_family) {
      std::uniform_int_distribution<std::size_t> pick(0, members.size() - 1);
      for (std::size_t i = 0; i < members.size(); ++i) {
        const ScoredRun& r = *members[pick(rng)];
        if (r.has_gain) regrets.push_back(r.regret_pct);
        ties += r.ties_or_beats_every_e;
        ++drawn;
      }
    }
    if (!regrets.empty()) {
      medians.push_back(quantile(regrets, 0.5));
      p90s.push_back(quantile(regrets, 0.9));
    }
    if (drawn > 0) shares.push_back(static_cast<double>(ties) / static_cast<double>(drawn));
  }
  const double tail = (1.0 - options.level) / 2.0;
  const auto interval = [tail](const std::vector<double>& figures) {
    return Interval{quantile(figures, tail), quantile(figures, 1.0 - tail)};
  };
  return {interval(medians), interval(p90s), interval(shares)};
}

}  // namespace modelcast::bench
