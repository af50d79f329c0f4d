// The benchmark's bootstrap intervals for its target figures (bench/predictor/bootstrap_interval.h).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>

#include "bootstrap_interval.h"

namespace modelcast::bench {
namespace {

std::vector<ScoredRun> runs_of(const std::string& family, const std::vector<double>& regrets) {
  std::vector<ScoredRun> out;
  for (double r : regrets) out.push_back({family, true, r, false});
  return out;
}

TEST(BootstrapInterval, ResamplesWithinEachFamilySoTheMixOfFamiliesStays) {
  // Ten runs of a family that loses 1 % and ten of one that loses 9 %: every sample of these
  // kinds of runs has ten of each, so its median is 5 % whatever runs are drawn. Resampling the
  // pooled runs would give medians from 1 to 9 %.
  auto runs = runs_of("easy", std::vector<double>(10, 1.0));
  const auto hard = runs_of("hard", std::vector<double>(10, 9.0));
  runs.insert(runs.end(), hard.begin(), hard.end());
  const auto ci = bootstrap_target_intervals(runs);
  EXPECT_DOUBLE_EQ(ci.median_regret_pct.low, 5.0);
  EXPECT_DOUBLE_EQ(ci.median_regret_pct.high, 5.0);
  EXPECT_DOUBLE_EQ(ci.p90_regret_pct.low, 9.0);
  EXPECT_DOUBLE_EQ(ci.p90_regret_pct.high, 9.0);
}

TEST(BootstrapInterval, CoversTheMedianOfTheRunsItStandsForAboutAsOftenAsItSays) {
  // Samples of 40 runs whose regrets follow an exponential law (median 10 ln 2): the 90 %
  // interval of the sample's median should hold the law's median in about 90 % of samples.
  std::mt19937_64 rng(7);
  std::exponential_distribution<double> regret(0.1);
  const double true_median = 10.0 * std::log(2.0);
  int covered = 0;
  const int samples = 300;
  for (int s = 0; s < samples; ++s) {
    std::vector<double> r(40);
    for (auto& x : r) x = regret(rng);
    const auto ci = bootstrap_target_intervals(runs_of("f", r), {.resamples = 400, .seed = static_cast<std::uint64_t>(s)});
    covered += ci.median_regret_pct.low <= true_median && true_median <= ci.median_regret_pct.high;
  }
  const double coverage = static_cast<double>(covered) / samples;
  EXPECT_GT(coverage, 0.80);
  EXPECT_LT(coverage, 0.97);
}

TEST(BootstrapInterval, NarrowsAsTheRunsGrowInNumber) {
  std::mt19937_64 rng(11);
  std::exponential_distribution<double> regret(0.1);
  const auto width = [&](std::size_t n) {
    std::vector<double> r(n);
    for (auto& x : r) x = regret(rng);
    const auto ci = bootstrap_target_intervals(runs_of("f", r), {.resamples = 400});
    EXPECT_LE(ci.median_regret_pct.low, quantile(r, 0.5));
    EXPECT_GE(ci.median_regret_pct.high, quantile(r, 0.5));
    return ci.median_regret_pct.high - ci.median_regret_pct.low;
  };
  const double few = width(10), many = width(640);
  EXPECT_GT(many, 0.0);
  EXPECT_LT(many, few / 4.0);  // the width goes as 1/sqrt(n): 8x narrower in expectation
}

TEST(BootstrapInterval, RunsWithoutAGainCountInTheEveryTenthShareButNotInTheRegret) {
  // Two runs without an achievable gain (their regret is meaningless) that tie every tenth, and
  // two with a gain that lose 5 % and do not.
  std::vector<ScoredRun> runs = {{"f", false, 1000.0, true}, {"f", false, 1000.0, true}, {"f", true, 5.0, false}, {"f", true, 5.0, false}};
  const auto ci = bootstrap_target_intervals(runs);
  EXPECT_DOUBLE_EQ(ci.median_regret_pct.low, 5.0);
  EXPECT_DOUBLE_EQ(ci.median_regret_pct.high, 5.0);
  EXPECT_DOUBLE_EQ(ci.p90_regret_pct.high, 5.0);
  EXPECT_LT(ci.ties_or_beats_every_e.low, 0.5);
  EXPECT_GT(ci.ties_or_beats_every_e.high, 0.5);
  EXPECT_GE(ci.ties_or_beats_every_e.low, 0.0);
  EXPECT_LE(ci.ties_or_beats_every_e.high, 1.0);
}

TEST(BootstrapInterval, NoRunWithAGainGivesNoRegretInterval) {
  const std::vector<ScoredRun> runs = {{"f", false, 0.0, true}, {"g", false, 0.0, false}};
  const auto ci = bootstrap_target_intervals(runs);
  EXPECT_TRUE(std::isnan(ci.median_regret_pct.low));
  EXPECT_TRUE(std::isnan(ci.p90_regret_pct.high));
  EXPECT_DOUBLE_EQ(ci.ties_or_beats_every_e.low, 0.5);  // one of each family in every resample
  EXPECT_DOUBLE_EQ(ci.ties_or_beats_every_e.high, 0.5);
}

TEST(BootstrapInterval, TheSameRunsGiveTheSameIntervalAndBadOptionsAreRefused) {
  std::vector<double> r;
  for (int i = 0; i < 30; ++i) r.push_back(static_cast<double>((i * 37) % 23));
  const auto a = bootstrap_target_intervals(runs_of("f", r));
  const auto b = bootstrap_target_intervals(runs_of("f", r));
  EXPECT_EQ(a.median_regret_pct.low, b.median_regret_pct.low);
  EXPECT_EQ(a.p90_regret_pct.high, b.p90_regret_pct.high);
  EXPECT_THROW(bootstrap_target_intervals(runs_of("f", r), {.resamples = 0}), std::invalid_argument);
  EXPECT_THROW(bootstrap_target_intervals(runs_of("f", r), {.level = 1.0}), std::invalid_argument);
}

}  // namespace
}  // namespace modelcast::bench
