// The benchmark's oracles (bench/predictor/known_curve.h): the running median that stands for a
// run's trend, and a curve handed to the online scheduler as a certain forecast.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "known_curve.h"
#include "modelcast/predictor_online.h"

namespace modelcast::bench {
namespace {

namespace mp = modelcast::predictor;

mp::Trajectory curve_of(const std::vector<double>& losses) {
  mp::Trajectory c;
  for (std::size_t i = 0; i < losses.size(); ++i) {
    c.steps.push_back(static_cast<std::int64_t>(10 * i));
    c.loss.push_back(losses[i]);
    c.time_s.push_back(3.0 * static_cast<double>(i) + 1.0);
  }
  return c;
}

TEST(RunningMedian, RemovesSinglePointSpikesAndDipsAndKeepsALevelChange) {
  const auto curve = curve_of({5, 5, 9, 5, 5, 5, 1, 5, 5, 2, 2, 2, 2});
  const auto smooth = running_median(curve, 2);
  EXPECT_EQ(smooth.steps, curve.steps);
  EXPECT_EQ(smooth.time_s, curve.time_s);
  EXPECT_EQ(smooth.loss, (std::vector<double>{5, 5, 5, 5, 5, 5, 5, 5, 2, 2, 2, 2, 2}));
  // At the ends the window holds the points there are: (5, 5, 9) has median 5, (2, 2, 2) 2.
  const auto spike_first = running_median(curve_of({9, 1, 1, 1}), 2);
  EXPECT_EQ(spike_first.loss, (std::vector<double>{1, 1, 1, 1}));
}

TEST(ForecastFromCurve, HoldsTheCurveAfterTheStepWithCertainty) {
  const auto curve = curve_of({4, 3, 2.5, 2.2, 2});
  const auto f = forecast_from_curve(curve, 15);
  EXPECT_EQ(f.steps, (std::vector<std::int64_t>{20, 30, 40}));
  EXPECT_EQ(f.loss, (std::vector<double>{2.5, 2.2, 2}));
  EXPECT_EQ(f.time_s, (std::vector<double>{7, 10, 13}));
  EXPECT_EQ(f.lower, f.loss);
  EXPECT_EQ(f.upper, f.loss);
  ASSERT_EQ(f.members.size(), 1u);
  EXPECT_EQ(f.members[0].weight, 1.0);
  EXPECT_EQ(f.members[0].loss, f.loss);
  EXPECT_TRUE(forecast_from_curve(curve, 40).steps.empty());
}

// The trend-known replay runs the scheduler with the library's defaults (hedged, with the
// hindsight check) on this forecaster. Fed the exact curve, noise included, it must reach the
// optimum in hindsight at every cost of the benchmark: what the trend-known replay loses is
// then the noise the smoothed curve leaves out, not the hedge reading a certain forecast wrongly.
TEST(ForecastFromCurve, OnTheExactCurveTheDefaultSchedulerReachesTheOptimum) {
  std::mt19937 rng(11);
  std::normal_distribution<double> noise(0.0, 0.03);
  std::vector<double> losses;
  for (int i = 0; i < 80; ++i) losses.push_back(2.0 + std::exp(-i / 25.0) + noise(rng));
  const auto curve = curve_of(losses);
  const std::size_t w = 15;
  for (const double multiple : {0.5, 2.0, 8.0}) {
    mp::OnlineOptions o;
    o.forecast.total_steps = curve.steps.back();
    o.costs.stall_s = 3.0 * multiple;
    o.costs.delivery_s = 0.5 * o.costs.stall_s;
    o.warmup_step = curve.steps[w];
    o.forecaster = [&curve](std::span<const mp::CurvePoint> seen, const mp::ForecastOptions&) {
      return forecast_from_curve(curve, seen.back().step);
    };
    mp::OnlineScheduler s(o);
    for (std::size_t i = 0; i < curve.steps.size(); ++i) {
      const double wall = curve.time_s[i] + o.costs.stall_s * static_cast<double>(s.published_steps().size());
      s.observe(curve.steps[i], curve.loss[i], wall);
      s.should_publish(curve.steps[i]);
    }
    const auto best = mp::plan_optimal(curve, w, o.costs);
    ASSERT_FALSE(best.publish_steps.empty()) << multiple;
    EXPECT_NEAR(mp::evaluate_cil(curve, w, o.costs, s.published_steps()), best.cil, 1e-9 * best.cil) << multiple;
  }
}

}  // namespace
}  // namespace modelcast::bench
