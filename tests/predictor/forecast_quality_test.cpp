// The harness's direct measure of the forecast (bench/predictor/forecast_quality.h): the fall
// ratio and path error at cuts through a run, against forecasters whose errors are known.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "forecast_quality.h"
#include "known_curve.h"

namespace modelcast::bench {
namespace {

namespace mp = modelcast::predictor;

// A noiseless, strictly falling run of 20 points: its 5-point running median is itself but at
// the first point and the last two, where the window is cut short.
mp::LossLog falling_run() {
  mp::LossLog run;
  for (int i = 0; i < 20; ++i)
    run.points.push_back({.step = 100 * (i + 1), .loss = 1.0 + 4.0 / (1.0 + i), .time_s = 2.0 * (i + 1)});
  run.total_steps = 2000;
  return run;
}

mp::ForecastOptions options_of(const mp::LossLog& run) {
  mp::ForecastOptions o;
  o.total_steps = *run.total_steps;
  return o;
}

TEST(ForecastQuality, AForecastOfTheRunsOwnTrendFallsRightAndFollowsIt) {
  const auto run = falling_run();
  const auto trend = running_median(mp::trajectory_of(run.points), 2);
  std::vector<std::vector<std::int64_t>> asked;
  const auto cuts = forecast_cuts(run, options_of(run), [&](std::span<const mp::CurvePoint> seen, const mp::ForecastOptions& o) {
    asked.push_back(o.future_steps);
    return forecast_from_curve(trend, seen.back().step);
  });
  ASSERT_EQ(cuts.size(), kForecastCutFractions.size());
  for (std::size_t i = 0; i < cuts.size(); ++i) {
    EXPECT_DOUBLE_EQ(cuts[i].cut_fraction, kForecastCutFractions[i]);
    // After the 80 % cut the trend falls by 2.2 % of its range (1.25 to 1.21): under 3 %, no ratio.
    if (i + 1 < cuts.size()) {
      EXPECT_NEAR(cuts[i].fall_ratio, 1.0, 1e-12);
    } else {
      EXPECT_TRUE(std::isnan(cuts[i].fall_ratio)) << cuts[i].fall_ratio;
    }
    EXPECT_NEAR(cuts[i].path_error, 0.0, 1e-12);
    EXPECT_NEAR(cuts[i].end_error, 0.0, 1e-12);
  }
  // The forecaster was asked for the logged steps after the cut: at 20 % of 20 points, 4 seen.
  ASSERT_FALSE(asked.empty());
  EXPECT_EQ(asked.front().front(), 500);
  EXPECT_EQ(asked.front().back(), 2000);
  EXPECT_EQ(asked.front().size(), 16u);
}

TEST(ForecastQuality, AForecastThatStaysAtTheNewestLossForeseesNoFallAndIsScoredByHowFarTheRunFalls) {
  const auto run = falling_run();
  const std::vector<double> at_half = {0.5};
  const auto cuts = forecast_cuts(run, options_of(run), [](std::span<const mp::CurvePoint> seen, const mp::ForecastOptions& o) {
    mp::Forecast f;
    for (const auto s : o.future_steps) {
      f.steps.push_back(s);
      f.loss.push_back(seen.back().loss);
    }
    return f;
  }, at_half);
  ASSERT_EQ(cuts.size(), 1u);
  EXPECT_NEAR(cuts[0].fall_ratio, 0.0, 1e-12);
  // By hand: the cut at 10 points; the forecast holds the 10th loss, which is the trend's level
  // there; the range is the trend's, from its first value down to its last.
  const auto trend = running_median(mp::trajectory_of(run.points), 2).loss;
  ASSERT_EQ(trend[9], run.points[9].loss);
  const double range = trend.front() - trend.back();
  double error = 0.0;
  for (int i = 10; i < 20; ++i) error += trend[9] - trend[static_cast<std::size_t>(i)];
  EXPECT_NEAR(cuts[0].path_error, error / (10.0 * range), 1e-12);
  EXPECT_NEAR(cuts[0].end_error, (trend[9] - trend[19]) / range, 1e-12);
}

TEST(ForecastQuality, ACutAfterWhichTheTrendHardlyFallsHasNoFallRatio) {
  // Falls to step 1000, then flat: from the 50 % cut on the trend falls by nothing.
  mp::LossLog run;
  for (int i = 0; i < 20; ++i)
    run.points.push_back({.step = 100 * (i + 1), .loss = i < 10 ? 5.0 - 0.4 * i : 1.4, .time_s = 2.0 * (i + 1)});
  run.total_steps = 2000;
  const auto trend = running_median(mp::trajectory_of(run.points), 2);
  const auto cuts = forecast_cuts(run, options_of(run), [&](std::span<const mp::CurvePoint> seen, const mp::ForecastOptions&) {
    return forecast_from_curve(trend, seen.back().step);
  });
  ASSERT_EQ(cuts.size(), kForecastCutFractions.size());
  for (const auto& cut : cuts) {
    EXPECT_EQ(std::isnan(cut.fall_ratio), cut.cut_fraction >= 0.5) << cut.cut_fraction;
    EXPECT_NEAR(cut.path_error, 0.0, 1e-12);
  }
}

TEST(ForecastQuality, ARunTooShortOrFlatHasNoCutsAndSixPointsAreEnough) {
  mp::LossLog flat;
  for (int i = 0; i < 20; ++i) flat.points.push_back({.step = i + 1, .loss = 2.0, .time_s = 1.0 * i});
  flat.total_steps = 20;
  const auto never = [](std::span<const mp::CurvePoint>, const mp::ForecastOptions&) -> mp::Forecast {
    ADD_FAILURE() << "no forecast should be asked for";
    return {};
  };
  EXPECT_TRUE(forecast_cuts(flat, options_of(flat), never).empty());
  // Five falling points: no cut leaves 4 before it and 2 after.
  auto short_run = falling_run();
  short_run.points.resize(5);
  EXPECT_TRUE(forecast_cuts(short_run, options_of(short_run), never).empty());
  short_run.points = falling_run().points;
  short_run.points.resize(6);
  EXPECT_EQ(forecast_cuts(short_run, options_of(short_run), [&](std::span<const mp::CurvePoint> seen, const mp::ForecastOptions&) {
              return forecast_from_curve(running_median(mp::trajectory_of(short_run.points), 2), seen.back().step);
            }).size(),
            kForecastCutFractions.size());
}

// What forecast_cuts throws for the run named `name` with this forecaster; "" when it did not.
std::string refusal(const std::string& name, const CutForecaster& forecaster) {
  auto run = falling_run();
  run.run = name;
  try {
    forecast_cuts(run, options_of(run), forecaster);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

TEST(ForecastQuality, AnEmptyForecastIsRefusedNamingTheRun) {
  const auto why = refusal("r8", [](std::span<const mp::CurvePoint>, const mp::ForecastOptions&) { return mp::Forecast{}; });
  EXPECT_NE(why.find("'r8'"), std::string::npos) << "refusal: '" << why << "'";
  EXPECT_NE(why.find("0 steps"), std::string::npos) << "refusal: '" << why << "'";
}

TEST(ForecastQuality, AForecastThatIsNotFiniteIsRefusedNamingTheRun) {
  const auto why = refusal("r7", [](std::span<const mp::CurvePoint>, const mp::ForecastOptions& o) {
    mp::Forecast f;
    f.steps = o.future_steps;
    f.loss.assign(o.future_steps.size(), std::nan(""));
    return f;
  });
  EXPECT_NE(why.find("'r7'"), std::string::npos) << "refusal: '" << why << "'";
  EXPECT_NE(why.find("not finite"), std::string::npos) << "refusal: '" << why << "'";
}

}  // namespace
}  // namespace modelcast::bench
