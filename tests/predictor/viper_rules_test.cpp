// Viper's rules and forecaster as the paper states them, on curves small enough to work out by
// hand. Workflow model (predictor_planner.h): the j-th publish at a step completing at t becomes
// servable at t + j c + d; CIL = r x the integral of the served loss over [t_W, t_last].
#include <gtest/gtest.h>

#include <cmath>

#include "modelcast/predictor_forecast.h"
#include "modelcast/predictor_viper.h"

namespace modelcast::predictor {
namespace {

TEST(ViperFixedInterval, PicksTheIntervalWithTheLowestPredictedCil) {
  // Steps 0..4 at t = 0..4, W = 0, c = 0.9, d = 0, window [0, 4]. By hand:
  //   nothing: 10 x 4 = 40
  //   k=1 (1, 2, 3, 4): servable 1.9, 3.8, 5.7 (after the window)
  //                     10 x 1.9 + 9 x 1.9 + 4 x 0.2 = 36.9
  //   k=2 (2, 4):       servable 2.9, 5.8: 10 x 2.9 + 4 x 1.1 = 33.4
  //   k=3 (3):          servable 3.9: 10 x 3.9 + 4 x 0.1 = 39.4
  //   k=4 (4):          servable 4.9: 40
  const Trajectory t{{0, 1, 2, 3, 4}, {10.0, 9.0, 4.0, 4.0, 1.0}, {0.0, 1.0, 2.0, 3.0, 4.0}};
  PublishCosts c;
  c.stall_s = 0.9;
  const auto s = viper_fixed_interval(t, 0, c);
  EXPECT_EQ(s.interval, 2U);
  EXPECT_EQ(s.publish_steps, (std::vector<std::int64_t>{2, 4}));
  EXPECT_NEAR(s.predicted_cil, 33.4, 1e-9);
  EXPECT_NE(s.reason.find("every 2 candidate"), std::string::npos) << s.reason;
  EXPECT_EQ(fixed_interval_schedule(t, 0, c), s.publish_steps);
}

TEST(ViperFixedInterval, TiesGoToTheShortestIntervalAsInThePaper) {
  // A flat forecast: every schedule serves loss 5 throughout, CIL 20. Algorithm 2 keeps the
  // first minimum (interval 1) and tries "nothing" last.
  const Trajectory flat{{0, 1, 2, 3, 4}, {5.0, 5.0, 5.0, 5.0, 5.0}, {0.0, 1.0, 2.0, 3.0, 4.0}};
  PublishCosts c;
  c.stall_s = 0.5;
  const auto s = viper_fixed_interval(flat, 0, c);
  EXPECT_EQ(s.interval, 1U);
  EXPECT_EQ(s.publish_steps, (std::vector<std::int64_t>{1, 2, 3, 4}));
  EXPECT_NEAR(s.predicted_cil, 20.0, 1e-12);
}

TEST(ViperFixedInterval, SaysWhyItPublishesNothing) {
  // A rising forecast, free publishes, a window of 5 s (to t = 5). By hand:
  //   nothing: 5 x 5 = 25;  k=1: 5 + 5.5 + 6 + 6.5 + 7 = 30;  k=2: 5 x 2 + 6 x 2 + 7 = 29;
  //   k=3: 5 x 3 + 6.5 x 2 = 28;  k=4: 5 x 4 + 7 = 27.
  const Trajectory rising{{0, 1, 2, 3, 4}, {5.0, 5.5, 6.0, 6.5, 7.0}, {0.0, 1.0, 2.0, 3.0, 4.0}};
  PublishCosts c;
  c.window_s = 5.0;
  const auto s = viper_fixed_interval(rising, 0, c);
  EXPECT_TRUE(s.publish_steps.empty());
  EXPECT_EQ(s.interval, 0U);
  EXPECT_NEAR(s.predicted_cil, 25.0, 1e-12);  // 5 x 5
  EXPECT_NE(s.reason.find("publishing nothing has the lowest predicted CIL (25)"), std::string::npos) << s.reason;
}

TEST(ViperGreedy, ThresholdIsTheMeanPlusTheSdOfTheWarmupDrops) {
  // Warm-up losses 10, 8, 7, 4: drops 2, 1, 3; mean 2, population sd sqrt(2/3).
  const Trajectory t{{0, 1, 2, 3}, {10.0, 8.0, 7.0, 4.0}, {0.0, 1.0, 2.0, 3.0}};
  const auto th = viper_drop_threshold(t, 3);
  EXPECT_EQ(th.drops, 3U);
  EXPECT_NEAR(th.mean_drop, 2.0, 1e-12);
  EXPECT_NEAR(th.sd_drop, std::sqrt(2.0 / 3.0), 1e-12);
  EXPECT_NEAR(th.threshold, 2.0 + std::sqrt(2.0 / 3.0), 1e-12);
  EXPECT_THROW(viper_drop_threshold(t, 4), modelcast::Error);
}

// A NaN in the warm-up was reported as "losses this large overflow, rescale them".
TEST(ViperGreedy, ANonFiniteWarmUpLossIsNamed) {
  const Trajectory t{{0, 10, 20}, {3.0, std::nan(""), 1.0}, {0.0, 1.0, 2.0}};
  try {
    viper_drop_threshold(t, 2);
    FAIL() << "a NaN loss accepted";
  } catch (const modelcast::Error& e) {
    EXPECT_NE(std::string(e.what()).find("the loss at warm-up point 1 (step 10) is not finite"), std::string::npos) << e.what();
  }
}

TEST(ViperGreedy, FiniteLossesWhoseDropsOverflowAreNamedWithTheirSize) {
  const Trajectory t{{0, 1, 2}, {1e308, -1e308, 0.0}, {0.0, 1.0, 2.0}};
  try {
    viper_drop_threshold(t, 2);
    FAIL() << "a threshold of inf accepted";
  } catch (const modelcast::Error& e) {
    EXPECT_NE(std::string(e.what()).find("largest |loss| is 1e+308; losses this large overflow"), std::string::npos)
        << e.what();
  }
}

TEST(ViperGreedy, PublishesWhereTheForecastFellByMoreThanTheThreshold) {
  // Same warm-up (threshold 2.816), then forecast 3.5, 2.0, 1.5, 0.9, 0.5. From the warm-up
  // loss 4 the drops are 0.5, 2.0, 2.5, then 3.1 at step 7: publish; from 0.9, 0.4 at step 8.
  const Trajectory t{{0, 1, 2, 3, 4, 5, 6, 7, 8},
                     {10.0, 8.0, 7.0, 4.0, 3.5, 2.0, 1.5, 0.9, 0.5},
                     {0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0}};
  const auto s = viper_greedy(t, 3, {});
  EXPECT_EQ(s.publish_steps, (std::vector<std::int64_t>{7}));
  EXPECT_NEAR(s.threshold, 2.0 + std::sqrt(2.0 / 3.0), 1e-12);
  EXPECT_EQ(threshold_schedule(t, 3, {}), s.publish_steps);
  // The costs do not enter the rule, only cap the publishes.
  PublishCosts capped;
  capped.stall_s = 1.0;
  capped.max_slowdown_s = 0.5;
  EXPECT_TRUE(viper_greedy(t, 3, capped).publish_steps.empty());
  EXPECT_NE(viper_greedy(t, 3, capped).reason.find("max_slowdown_s"), std::string::npos);
}

TEST(ViperGreedy, SaysWhyItPublishesNothing) {
  // Largest predicted fall below the warm-up loss 4: 2.4 (to 1.6), under the threshold 2.816.
  const Trajectory small{{0, 1, 2, 3, 4, 5, 6, 7},
                         {10.0, 8.0, 7.0, 4.0, 3.5, 3.0, 2.0, 1.6},
                         {0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0}};
  const auto s = viper_greedy(small, 3, {});
  EXPECT_TRUE(s.publish_steps.empty());
  EXPECT_NE(s.reason.find("falls at most 2.4 below the warm-up loss 4"), std::string::npos) << s.reason;
  EXPECT_NE(s.reason.find("threshold 2.8165"), std::string::npos) << s.reason;
  // A forecast that never falls below the warm-up loss.
  const Trajectory up{{0, 1, 2, 3, 4, 5}, {10.0, 8.0, 7.0, 4.0, 4.5, 5.0}, {0.0, 1.0, 2.0, 3.0, 4.0, 5.0}};
  const auto u = viper_greedy(up, 3, {});
  EXPECT_TRUE(u.publish_steps.empty());
  EXPECT_NE(u.reason.find("never falls below the warm-up loss 4"), std::string::npos) << u.reason;
}

TEST(ViperForecast, KeepsTheLowestMseFunctionEvenWhenItExtrapolatesBelowZero) {
  // Exactly linear losses 5 - 8 x (x = step / 1000), observed at steps 100..500: Lin2 fits with
  // no error, so it is kept, and its forecast reaches 5 - 8 = -3 at the last step. (A forecast
  // judged by plausibility would have rejected it: losses here are positive.)
  std::vector<CurvePoint> seen;
  for (int s = 100; s <= 500; s += 50) seen.push_back({s, 5.0 - 8.0 * s / 1000.0, s / 10.0});
  ForecastOptions o;
  o.total_steps = 1000;
  const auto f = forecast_viper(seen, o);
  ASSERT_EQ(f.members.size(), 1U);
  EXPECT_EQ(f.members[0].family, "viper_linear");
  EXPECT_FALSE(f.fallback);
  EXPECT_NEAR(f.loss.back(), -3.0, 1e-6);
  EXPECT_NE(f.note.find("kept Lin2"), std::string::npos) << f.note;
  for (const char* name : {"Exp2", "Exp3", "Lin2", "Expd3"}) EXPECT_NE(f.note.find(name), std::string::npos) << name;
}

}  // namespace
}  // namespace modelcast::predictor
