// Hedged planning: scenarios around a forecast, expected-CIL plans, regret spread.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "modelcast/predictor.h"

namespace modelcast::predictor {
namespace {

// A run whose prefix is flat (the loss sits on a plateau) and that drops late, as when new data
// arrive or the learning rate decays. 100 points, 10 s apart; the drop starts at point 70.
std::vector<CurvePoint> plateau_then_drop() {
  std::vector<CurvePoint> pts;
  for (int i = 0; i < 100; ++i) {
    const double drop = i < 70 ? 0.0 : 0.6 * (1.0 - std::exp(-(i - 70) / 6.0));
    pts.push_back({i * 10, 2.0 - drop, 10.0 * i});
  }
  return pts;
}

TEST(Hedge, AKnownScheduleTimesTheRegimeChangeAtTheAnneal) {
  // The plateau run's learning rate was configured to drop tenfold at step 700 (where the loss
  // really drops). Without the schedule the hedge spreads its later drop over four evenly spaced
  // times; with it, one scenario drops where the rate anneals and nowhere else.
  const auto run = plateau_then_drop();
  const std::vector<CurvePoint> prefix(run.begin() + 1, run.begin() + 21);
  ForecastOptions fo;
  fo.total_steps = run.back().step;
  const auto point = forecast_curve(prefix, fo);
  HedgeOptions o;
  o.change_probability = 0.3;
  const auto blind = hedge_forecast(prefix, point, o);
  EXPECT_EQ(std::count_if(blind.scenarios.begin(), blind.scenarios.end(), [](const Scenario& s) { return s.kind.rfind("change@", 0) == 0; }), 4);
  o.lr_schedule = LrSchedule{{0, 699, 700}, {1.0, 1.0, 0.1}};
  const auto timed = hedge_forecast(prefix, point, o);
  const auto anneal = std::find_if(timed.scenarios.begin(), timed.scenarios.end(), [](const Scenario& s) { return s.kind == "anneal"; });
  ASSERT_NE(anneal, timed.scenarios.end());
  EXPECT_DOUBLE_EQ(anneal->weight, 0.3);
  EXPECT_EQ(std::count_if(timed.scenarios.begin(), timed.scenarios.end(), [](const Scenario& s) { return s.kind.rfind("change@", 0) == 0; }), 0);
  const double drop = o.change_depth * prefix.back().loss;
  for (std::size_t i = 0; i < point.steps.size(); ++i)
    EXPECT_NEAR(point.loss[i] - anneal->loss[i], point.steps[i] < 700 ? 0.0 : drop, 1e-9) << point.steps[i];
  // A schedule that has already annealed has no drop ahead: back to the evenly spread changes.
  o.lr_schedule = LrSchedule{{0, 50, 100}, {1.0, 1.0, 0.1}};
  const auto done = hedge_forecast(prefix, point, o);
  EXPECT_EQ(std::count_if(done.scenarios.begin(), done.scenarios.end(), [](const Scenario& s) { return s.kind == "anneal"; }), 0);
}

TEST(Hedge, APositiveLossIsNeitherForecastNorPlannedBelowZero) {
  // The first 500 steps of a nanoGPT speed-run record (bench/data/nanogpt_val_loss.csv, r0000):
  // the loss falls from 11 to 4 and an exponential through it reaches about 0.06 by step 6000.
  // The band around it and the hedge's drops (sized on the level now, about 4) went below 0.
  const std::vector<CurvePoint> prefix = {
      {0, 11.0149, 0.305}, {125, 5.6402, 42.345}, {250, 4.6476, 87.335}, {375, 4.1989, 133.084}, {500, 4.0219, 178.052}};
  ForecastOptions fo;
  fo.total_steps = 6000;
  const auto point = forecast_curve(prefix, fo);
  ASSERT_FALSE(point.lower.empty());
  EXPECT_GE(*std::min_element(point.lower.begin(), point.lower.end()), 0.0);
  HedgeOptions o;
  o.change_probability = 0.3;
  o.band_probability = 0.2;
  const auto hedged = hedge_forecast(prefix, point, o);
  for (const auto& s : hedged.scenarios) EXPECT_GE(*std::min_element(s.loss.begin(), s.loss.end()), 0.0) << s.kind;
  // A run that logs a quantity below 0 (a negated return) has no floor at 0.
  std::vector<CurvePoint> negated = prefix;
  for (auto& p : negated) p.loss -= 20.0;
  const auto below = forecast_curve(negated, fo);
  EXPECT_LT(*std::max_element(below.lower.begin(), below.lower.end()), 0.0);
}

TEST(Hedge, ARegimeChangeIsSizedOnTheLossAboveItsFloor) {
  // The plateau run with 1000 added to every loss: the drop of a regime change was 15 % of the
  // level, 150, where the run's loss can fall by at most 2. With the floor stated, every scenario
  // is the plain run's shifted by 1000; without a floor, the drop is sized on the observed range,
  // whatever constant the losses carry.
  const auto run = plateau_then_drop();
  const std::vector<CurvePoint> prefix(run.begin(), run.begin() + 21);
  auto offset = prefix;
  for (auto& p : offset) p.loss += 1000.0;
  ForecastOptions fo;
  fo.total_steps = run.back().step;
  HedgeOptions o;
  o.change_probability = 0.3;
  const auto plain = hedge_forecast(prefix, forecast_curve(prefix, fo), o);
  fo.loss_floor = 1000.0;
  const auto stated = hedge_forecast(offset, forecast_curve(offset, fo), o);
  ASSERT_EQ(plain.scenarios.size(), stated.scenarios.size());
  for (std::size_t k = 0; k < plain.scenarios.size(); ++k) {
    EXPECT_EQ(plain.scenarios[k].kind, stated.scenarios[k].kind);
    EXPECT_NEAR(plain.scenarios[k].weight, stated.scenarios[k].weight, 1e-9);
    for (std::size_t i = 0; i < plain.scenarios[k].loss.size(); ++i)
      EXPECT_NEAR(stated.scenarios[k].loss[i] - 1000.0, plain.scenarios[k].loss[i], 1e-6) << plain.scenarios[k].kind;
  }
  fo.loss_floor = -std::numeric_limits<double>::infinity();
  const auto no_floor = hedge_forecast(offset, forecast_curve(offset, fo), o);
  auto far = offset;
  for (auto& p : far) p.loss -= 5000.0;
  const auto far_no_floor = hedge_forecast(far, forecast_curve(far, fo), o);
  ASSERT_EQ(no_floor.scenarios.size(), far_no_floor.scenarios.size());
  double deepest = 0;
  for (std::size_t k = 0; k < no_floor.scenarios.size(); ++k) {
    for (std::size_t i = 0; i < no_floor.scenarios[k].loss.size(); ++i) {
      EXPECT_NEAR(far_no_floor.scenarios[k].loss[i] + 5000.0, no_floor.scenarios[k].loss[i], 1e-6) << no_floor.scenarios[k].kind;
      deepest = std::max(deepest, offset.back().loss - no_floor.scenarios[k].loss[i]);
    }
  }
  EXPECT_LT(deepest, 1.0);  // the prefix's range (it starts at 2.0 and stays there) bounds the drop
}

TEST(Hedge, AFlatPrefixStillGetsAPlanThatPublishes) {
  const auto run = plateau_then_drop();
  const std::vector<CurvePoint> prefix(run.begin() + 1, run.begin() + 21);  // 20 % warm-up, on the plateau
  ForecastOptions fo;
  fo.total_steps = run.back().step;
  const auto point = forecast_curve(prefix, fo);
  PublishCosts costs;
  costs.stall_s = 20.0;
  costs.delivery_s = 10.0;
  const std::size_t w = prefix.size() - 1;
  // On the point forecast the plateau goes on: publishing is never worth its stall.
  const auto bet = plan_optimal(extend_with_forecast(prefix, point), w, costs);
  EXPECT_TRUE(bet.publish_steps.empty());
  // Hedged: a later drop is possible, so the plan publishes, and it captures part of the real
  // drop that the bet on the flat forecast misses entirely.
  const auto hedged = hedge_forecast(prefix, point, {});
  ASSERT_TRUE(hedged.hedged);
  const auto plan = plan_optimal(extend_with_forecast(prefix, hedged.forecast), w, costs);
  ASSERT_FALSE(plan.publish_steps.empty());
  const std::vector<CurvePoint> scored(run.begin() + 1, run.end());
  const auto truth = trajectory_of(scored);
  const double none = evaluate_cil(truth, w, costs, {});
  const double best = plan_optimal(truth, w, costs).cil;
  const double ours = evaluate_cil(truth, w, costs, snap_to_candidates(plan.publish_steps, truth, w));
  EXPECT_LT(ours, none);
  EXPECT_LT((ours - best) / (none - best), 0.9);
  // Twenty intervals measure the step time: one time axis, and the hedged plan is this plan.
  EXPECT_EQ(plan_hedged(prefix, w, hedged, costs).publish_steps, plan.publish_steps);
  // It does not stop early: the drop may come late, so it still publishes in the last half.
  EXPECT_GT(plan.publish_steps.back(), (prefix.back().step + run.back().step) / 2);
  // The spread reports how the plan would fare if each scenario came true; averaged over them
  // the plan keeps most of what each scenario's own optimum would gain.
  const auto spread = regret_spread(prefix, w, hedged, costs, plan.publish_steps);
  EXPECT_LT(spread.expected_pct, 50.0);
  EXPECT_GT(spread.scenarios, 0U);
  EXPECT_GE(spread.p90_pct, spread.p10_pct);
  EXPECT_GE(spread.p10_pct, 0.0);
}

TEST(Hedge, ExpectedCilOfAnyScheduleIsItsCilOnTheMeanPath) {
  // Why the exact planner on the mean path is the exact expected-CIL optimum: for every
  // schedule, the weighted CIL over scenarios equals the CIL on the weighted mean path.
  std::vector<CurvePoint> prefix;
  for (int i = 0; i < 8; ++i) prefix.push_back({i * 10, 5.0 / (1.0 + 0.3 * i), 4.0 * i});
  ForecastOptions fo;
  fo.total_steps = 400;
  const auto point = forecast_curve(prefix, fo);
  HedgeOptions ho;
  ho.change_probability = 0.4;
  const auto hedged = hedge_forecast(prefix, point, ho);
  ASSERT_GT(hedged.scenarios.size(), 4U);
  double total = 0.0;
  for (const auto& s : hedged.scenarios) total += s.weight;
  EXPECT_NEAR(total, 1.0, 1e-12);
  PublishCosts costs;
  costs.stall_s = 3.0;
  costs.delivery_s = 1.0;
  const std::size_t w = prefix.size() - 1;
  const auto mean_curve = extend_with_forecast(prefix, hedged.forecast);
  std::mt19937 rng(5);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<std::int64_t> steps;
    for (std::size_t i = w + 1; i < mean_curve.steps.size(); ++i)
      if (rng() % 4 == 0) steps.push_back(mean_curve.steps[i]);
    double expected = 0.0;
    Forecast f = hedged.forecast;
    for (const auto& s : hedged.scenarios) {
      f.loss = s.loss;
      expected += s.weight * evaluate_cil(extend_with_forecast(prefix, f), w, costs, steps);
    }
    EXPECT_NEAR(evaluate_cil(mean_curve, w, costs, steps), expected, 1e-9 * expected);
  }
}

TEST(Hedge, ARisingForecastIsCappedAtTheCurrentLevel) {
  // A rise makes "publish now, before it gets worse" look urgent; the scenarios stop at the
  // run's current level (median of the newest three losses) unless the cap is turned off.
  const std::vector<CurvePoint> prefix = {{0, 3.0, 0.0}, {10, 2.0, 1.0}, {20, 2.2, 2.0}, {30, 2.1, 3.0}};
  Forecast f;
  f.steps = {40, 50, 60};
  f.loss = {2.3, 2.5, 2.7};
  f.lower = {2.2, 2.3, 2.4};
  f.upper = {2.4, 2.7, 3.0};
  f.time_s = {4.0, 5.0, 6.0};
  f.members = {{"rising", 1.0, std::nan(""), f.loss}};
  const auto capped = hedge_forecast(prefix, f, {});
  for (const auto& sc : capped.scenarios)
    for (double v : sc.loss) EXPECT_LE(v, 2.1) << sc.kind;
  HedgeOptions off;
  off.cap_at_current_level = false;
  const auto free = hedge_forecast(prefix, f, off);
  EXPECT_GT(free.forecast.loss.back(), 2.1);
}

TEST(Hedge, AForecastDeclaredCertainIsLeftAlone) {
  Forecast f;
  f.steps = {10, 20};
  f.loss = f.lower = f.upper = {2.0, 1.0};
  f.time_s = {1.0, 2.0};
  const std::vector<CurvePoint> prefix = {{0, 3.0, 0.0}};
  const auto h = hedge_forecast(prefix, f, {});
  EXPECT_FALSE(h.hedged);
  ASSERT_EQ(h.scenarios.size(), 1U);
  EXPECT_EQ(h.forecast.loss, f.loss);
}

TEST(Hedge, RegretSpreadOfPublishingNothingIsTotal) {
  std::vector<CurvePoint> prefix;
  for (int i = 0; i < 10; ++i) prefix.push_back({i * 10, 4.0 - 0.2 * i, 5.0 * i});
  ForecastOptions fo;
  fo.total_steps = 300;
  const auto hedged = hedge_forecast(prefix, forecast_curve(prefix, fo), {});
  PublishCosts costs;
  costs.stall_s = 1.0;
  const auto spread = regret_spread(prefix, prefix.size() - 1, hedged, costs, {});
  ASSERT_GT(spread.scenarios, 0U);
  EXPECT_NEAR(spread.expected_pct, 100.0, 1e-9);
  EXPECT_NEAR(spread.p10_pct, 100.0, 1e-9);
}

// One scenario with almost nothing to gain once made the expected regret: its regret ratio
// (thousands of %) was averaged with the others'. The expected figure is the expected shortfall
// over the expected gain; the quantiles stay per scenario.
TEST(Hedge, ExpectedRegretIsTheExpectedShortfallOverTheExpectedGain) {
  const std::vector<CurvePoint> prefix = {{0, 5.0, 0.0}, {10, 4.0, 10.0}};
  HedgedForecast h;
  h.forecast.steps = {20, 30, 40, 50, 60};
  h.forecast.time_s = {20.0, 30.0, 40.0, 50.0, 60.0};
  // Publishing at step 20 is the drop's optimum; the late dip offers almost nothing, and there
  // the publish is all loss.
  h.scenarios = {{"drop", 0.9, {2.0, 2.0, 2.0, 2.0, 2.0}}, {"late_dip", 0.1, {4.0, 4.0, 4.0, 3.99, 3.99}}};
  h.forecast.loss = h.scenarios[0].loss;
  h.time_scenarios = {{"forecast", 1.0, h.forecast.time_s}};
  h.hedged = true;
  PublishCosts costs;
  costs.stall_s = 1.0;
  const std::vector<std::int64_t> publish = {20};
  double shortfall = 0, gain = 0;
  for (const auto& sc : h.scenarios) {
    Forecast f = h.forecast;
    f.loss = sc.loss;
    const auto curve = extend_with_forecast(prefix, f);
    const double none = evaluate_cil(curve, 1, costs, {}), best = plan_optimal(curve, 1, costs).cil;
    shortfall += sc.weight * (evaluate_cil(curve, 1, costs, publish) - best);
    gain += sc.weight * (none - best);
  }
  const auto spread = regret_spread(prefix, 1, h, costs, publish);
  ASSERT_EQ(spread.scenarios, 2U);
  EXPECT_EQ(spread.pairs, 2U);
  EXPECT_NEAR(spread.expected_pct, 100.0 * shortfall / gain, 1e-9);
  EXPECT_LT(spread.expected_pct, 1.0);  // the mean of the ratios: 10 % or more, from the dip alone
}

// A short run whose steps get slower (a sequence-length ramp): 250 steps take 8 s at first and
// 21 s at the end, so the run lasts almost twice as long as the first interval suggests.
std::vector<CurvePoint> slowing_run() {
  return {{0, 10.83, 0.0},     {250, 4.53, 8.15},   {500, 4.24, 16.68},  {750, 3.81, 31.32},
          {1000, 3.53, 46.87}, {1250, 3.37, 68.22}, {1490, 3.28, 88.74}};
}

TEST(Hedge, AShortPrefixDoesNotBetOnItsOwnTimeEstimate) {
  const auto run = slowing_run();
  const std::vector<CurvePoint> prefix(run.begin(), run.begin() + 2);  // 20 % warm-up
  ForecastOptions fo;
  fo.total_steps = run.back().step;
  const auto point = forecast_curve(prefix, fo);
  PublishCosts costs;
  costs.stall_s = 31.1;  // twice the median time between logged points
  costs.delivery_s = 15.55;
  const std::size_t w = prefix.size() - 1;
  const auto truth = trajectory_of(run);
  const double none = evaluate_cil(truth, w, costs, {});
  const double best = plan_optimal(truth, w, costs).cil;
  ASSERT_LT(best, none);  // one publish pays on the real run
  // At the rate of the one interval seen, the run ends before any publish could be served, so
  // a plan that trusts that estimate publishes nothing and loses the whole gain.
  HedgeOptions trusting;
  trusting.time_stretch_probability = 0.0;
  const auto bet = plan_hedged(prefix, w, hedge_forecast(prefix, point, trusting), costs);
  EXPECT_TRUE(bet.publish_steps.empty());
  // With the time axis in doubt the plan publishes, and on the real run it keeps most of the gain.
  const auto hedged = hedge_forecast(prefix, point, {});
  ASSERT_EQ(hedged.time_scenarios.size(), 3U);
  const auto plan = plan_hedged(prefix, w, hedged, costs);
  ASSERT_FALSE(plan.publish_steps.empty());
  const double ours = evaluate_cil(truth, w, costs, snap_to_candidates(plan.publish_steps, truth, w));
  EXPECT_LT((ours - best) / (none - best), 0.5);
}

TEST(Hedge, TimeScenariosOnlyWhenTheStepTimeCannotBeMeasured) {
  // Ten intervals at a steady rate measure the step time: the forecast's times are trusted.
  std::vector<CurvePoint> prefix;
  for (int i = 0; i < 12; ++i) prefix.push_back({i * 100, 4.0 / (1.0 + 0.2 * i), 5.0 * i});
  ForecastOptions fo;
  fo.total_steps = 6000;
  const auto hedged = hedge_forecast(prefix, forecast_curve(prefix, fo), {});
  ASSERT_EQ(hedged.time_scenarios.size(), 1U);
  EXPECT_DOUBLE_EQ(hedged.time_scenarios[0].weight, 1.0);
  // With one time axis the hedged plan is the exact plan on the expected path.
  PublishCosts costs;
  costs.stall_s = 10.0;
  costs.delivery_s = 5.0;
  const std::size_t w = prefix.size() - 1;
  const auto exact = plan_optimal(extend_with_forecast(prefix, hedged.forecast), w, costs);
  const auto plan = plan_hedged(prefix, w, hedged, costs);
  EXPECT_EQ(plan.publish_steps, exact.publish_steps);
  EXPECT_DOUBLE_EQ(plan.cil, exact.cil);
}

TEST(Hedge, HedgedPlanHasTheLowestExpectedCilOfItsCandidates) {
  const auto run = slowing_run();
  const std::vector<CurvePoint> prefix(run.begin(), run.begin() + 3);
  ForecastOptions fo;
  fo.total_steps = run.back().step;
  const auto hedged = hedge_forecast(prefix, forecast_curve(prefix, fo), {});
  ASSERT_GT(hedged.time_scenarios.size(), 1U);
  double weights = 0.0;
  for (const auto& t : hedged.time_scenarios) {
    weights += t.weight;
    ASSERT_EQ(t.time_s.size(), hedged.forecast.steps.size());
    // A stretched axis never runs ahead of the forecast's own.
    for (std::size_t i = 0; i < t.time_s.size(); ++i) EXPECT_GE(t.time_s[i], hedged.forecast.time_s[i] - 1e-9);
  }
  EXPECT_NEAR(weights, 1.0, 1e-12);
  PublishCosts costs;
  costs.stall_s = 8.0;
  costs.delivery_s = 4.0;
  const std::size_t w = prefix.size() - 1;
  const auto expected_cil = [&](const std::vector<std::int64_t>& steps) {
    double e = 0.0;
    Forecast f = hedged.forecast;
    for (const auto& t : hedged.time_scenarios) {
      f.time_s = t.time_s;
      e += t.weight * evaluate_cil(extend_with_forecast(prefix, f), w, costs, steps);
    }
    return e;
  };
  const auto plan = plan_hedged(prefix, w, hedged, costs);
  EXPECT_NEAR(plan.cil, expected_cil(plan.publish_steps), 1e-9 * plan.cil);
  // Nothing, every forecast step, and the plan for the forecast's own times cost at least as much.
  EXPECT_LE(plan.cil, expected_cil({}) + 1e-9);
  EXPECT_LE(plan.cil, expected_cil(hedged.forecast.steps) + 1e-9);
  const auto own = plan_optimal(extend_with_forecast(prefix, hedged.forecast), w, costs);
  EXPECT_LE(plan.cil, expected_cil(own.publish_steps) + 1e-9);
}

TEST(Hedge, EarlySaturationRunsTheForecastAtTwiceTheSpeed) {
  std::vector<CurvePoint> prefix;
  for (int i = 0; i < 10; ++i) prefix.push_back({i * 10, 3.0 - 0.1 * i, 1.0 * i});
  Forecast f;
  for (int i = 1; i <= 10; ++i) {
    f.steps.push_back(90 + 10 * i);
    f.loss.push_back(2.1 - 0.1 * i);  // keeps falling to the end
    f.lower.push_back(f.loss.back() - 0.05);
    f.upper.push_back(f.loss.back() + 0.05);
    f.time_s.push_back(9.0 + i);
  }
  HedgeOptions o;
  o.change_probability = 0.0;
  o.band_probability = 0.0;
  o.early_saturation_probability = 0.3;
  const auto h = hedge_forecast(prefix, f, o);
  const Scenario* early = nullptr;
  for (const auto& s : h.scenarios)
    if (s.kind == "early_saturation") early = &s;
  ASSERT_NE(early, nullptr);
  EXPECT_DOUBLE_EQ(early->weight, 0.3);
  // Step 90 + 10 i sits where the forecast is at step 90 + 20 i; from the middle on, at its end.
  for (int i = 1; i <= 10; ++i) {
    const double want = i <= 5 ? f.loss[static_cast<std::size_t>(2 * i - 1)] : f.loss.back();
    EXPECT_NEAR(early->loss[static_cast<std::size_t>(i - 1)], want, 1e-12) << i;
  }
  // The expected path reaches the low losses sooner than the forecast alone.
  EXPECT_LT(h.forecast.loss[2], f.loss[2]);
  EXPECT_NEAR(h.forecast.loss.back(), f.loss.back(), 1e-12);
}

TEST(Hedge, RejectsBadOptionsAndForecasts) {
  const std::vector<CurvePoint> prefix = {{0, 3.0, 0.0}, {10, 2.0, 1.0}};
  Forecast f;
  f.steps = {20, 30};
  f.loss = {1.5, 1.2};
  f.lower = {1.4, 1.0};
  f.upper = {1.6, 1.4};
  f.time_s = {2.0, 3.0};
  HedgeOptions bad;
  bad.change_probability = 0.9;
  bad.band_probability = 0.2;  // sums above 1
  EXPECT_THROW(hedge_forecast(prefix, f, bad), Error);
  // A NaN observed loss made every change scenario NaN.
  try {
    hedge_forecast(std::vector<CurvePoint>{{0, 3.0, 0.0}, {10, std::nan(""), 1.0}}, f, HedgeOptions{});
    ADD_FAILURE() << "hedged a NaN loss";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("hedge: loss at step 10 is not finite"), std::string::npos) << e.what();
  }
  HedgeOptions depth;
  depth.change_depth = -0.1;
  EXPECT_THROW(hedge_forecast(prefix, f, depth), Error);
  Forecast short_band = f;
  short_band.lower = {1.4};
  EXPECT_THROW(hedge_forecast(prefix, short_band, {}), Error);
  EXPECT_THROW(hedge_forecast({}, f, {}), Error);
  HedgeOptions early;
  early.early_saturation_probability = 0.7;  // with the change and band masses, above 1
  EXPECT_THROW(hedge_forecast(prefix, f, early), Error);
  HedgeOptions shrink;
  shrink.time_stretch = 0.5;  // the rest of the run cannot be assumed shorter than estimated
  EXPECT_THROW(hedge_forecast(prefix, f, shrink), Error);
  HedgeOptions stretch_p;
  stretch_p.time_stretch_probability = 1.5;
  EXPECT_THROW(hedge_forecast(prefix, f, stretch_p), Error);
}


// Two equally likely futures after a 2-point prefix, one second per step: in one the loss halves
// at once (a large gain), in the other it stays up and falls by 0.4 late (a small one). The stall
// lets a single publish serve either future well, not both.
HedgedForecast two_futures(PlanChoice choice) {
  HedgedForecast h;
  h.hedged = true;
  h.plan_choice = choice;
  Forecast& f = h.forecast;
  std::vector<double> early, late;
  for (int i = 0; i < 40; ++i) {
    f.steps.push_back(2 + i);
    f.time_s.push_back(2.0 + i);
    early.push_back(i < 1 ? 1.0 : 0.5);
    late.push_back(i < 25 ? 1.0 : 0.6);
  }
  h.scenarios = {{"early", 0.5, early}, {"late", 0.5, late}};
  for (std::size_t i = 0; i < early.size(); ++i) f.loss.push_back(0.5 * early[i] + 0.5 * late[i]);
  f.lower = f.upper = f.loss;
  h.time_scenarios = {{"forecast", 1.0, f.time_s}};
  return h;
}

// Regret share of steps in each scenario of h, against that scenario's optimum.
std::vector<double> regrets_of(const std::vector<CurvePoint>& prefix, const HedgedForecast& h, const PublishCosts& costs,
                               const std::vector<std::int64_t>& steps) {
  std::vector<double> out;
  for (const auto& s : h.scenarios) {
    Forecast f = h.forecast;
    f.loss = s.loss;
    const auto curve = extend_with_forecast(prefix, f);
    const double none = evaluate_cil(curve, 1, costs, {});
    const double best = plan_optimal(curve, 1, costs).cil;
    out.push_back((evaluate_cil(curve, 1, costs, steps) - best) / (none - best));
  }
  return out;
}

TEST(Hedge, MinimaxRegretPlanBoundsTheWorstScenario) {
  const std::vector<CurvePoint> prefix = {{0, 1.0, 0.0}, {1, 1.0, 1.0}};
  PublishCosts costs;
  costs.stall_s = 6.0;
  costs.delivery_s = 1.0;
  const auto h = two_futures(PlanChoice::kExpectedCil);
  const auto by_cil = plan_hedged(prefix, 1, h, costs);
  const auto by_minimax = plan_hedged(prefix, 1, two_futures(PlanChoice::kMinimaxRegret), costs);
  const auto r_cil = regrets_of(prefix, h, costs, by_cil.publish_steps);
  const auto r_minimax = regrets_of(prefix, h, costs, by_minimax.publish_steps);
  // Expected CIL serves the future with the most CIL at stake and leaves the other with little ...
  EXPECT_NEAR(r_cil[0], 0.0, 1e-9);
  EXPECT_GT(r_cil[1], 0.85);
  // ... the minimax plan lowers the worst regret, paying for it in expected CIL.
  EXPECT_LT(std::max(r_minimax[0], r_minimax[1]), std::max(r_cil[0], r_cil[1]) - 0.05);
  EXPECT_GT(by_minimax.cil, by_cil.cil);
  // Its cil is the expected CIL of its schedule.
  double expected = 0.0;
  for (const auto& s : h.scenarios) {
    Forecast f = h.forecast;
    f.loss = s.loss;
    expected += s.weight * evaluate_cil(extend_with_forecast(prefix, f), 1, costs, by_minimax.publish_steps);
  }
  EXPECT_NEAR(by_minimax.cil, expected, 1e-9 * expected);
}

TEST(Hedge, ExpectedRegretPlanWeighsEveryScenarioByItsOwnGain) {
  const std::vector<CurvePoint> prefix = {{0, 1.0, 0.0}, {1, 1.0, 1.0}};
  PublishCosts costs;
  costs.stall_s = 6.0;
  costs.delivery_s = 1.0;
  const auto h = two_futures(PlanChoice::kExpectedCil);
  const auto expected_regret = [&](const std::vector<std::int64_t>& steps) {
    const auto r = regrets_of(prefix, h, costs, steps);
    return 0.5 * r[0] + 0.5 * r[1];
  };
  const auto by_cil = plan_hedged(prefix, 1, h, costs);
  const auto by_regret = plan_hedged(prefix, 1, two_futures(PlanChoice::kExpectedRegret), costs);
  // The small late gain counts for as much as the large early one: the regret rule serves it,
  // which lowers the expected regret below the expected-CIL plan's.
  EXPECT_LT(expected_regret(by_regret.publish_steps), expected_regret(by_cil.publish_steps) - 0.02);
  EXPECT_GE(by_regret.cil, by_cil.cil);
}

// A forecast declared certain (one scenario): the loss sits at 2 and falls to `after_drop` at
// step 600. 10 logged points, 10 s apart, then 90 forecast points to step 990.
struct CertainDrop {
  std::vector<CurvePoint> prefix;
  HedgedForecast hedged;
  PublishCosts costs;
  explicit CertainDrop(double after_drop) {
    for (int i = 0; i < 10; ++i) prefix.push_back({i * 10, 2.0, 10.0 * i});
    Forecast f;
    for (int s = 100; s <= 990; s += 10) {
      f.steps.push_back(s);
      f.loss.push_back(s < 600 ? 2.0 : after_drop);
      f.time_s.push_back(static_cast<double>(s));
    }
    f.lower = f.upper = f.loss;
    hedged = hedge_forecast(prefix, f, {});
    costs.stall_s = 20.0;
    costs.delivery_s = 10.0;
  }
  Trajectory curve() const { return extend_with_forecast(prefix, hedged.forecast); }
};

// The evenly spaced schedule of k publishes over CertainDrop's 90 forecast steps.
std::vector<std::int64_t> evenly_spaced(const HedgedForecast& hedged, std::size_t k) {
  const auto& steps = hedged.forecast.steps;
  std::vector<std::int64_t> even;
  for (std::size_t j = 1; j <= k; ++j) even.push_back(steps[std::min(steps.size() - 1, j * steps.size() / (k + 1))]);
  even.erase(std::unique(even.begin(), even.end()), even.end());
  return even;
}

TEST(Hedge, APlanThatDepartsFromEvenSpacingSaysByHowMuchAndHowSurely) {
  // The exact plan publishes once, at the drop; no even spacing puts a single publish there.
  const CertainDrop run(1.0);
  ASSERT_FALSE(run.hedged.hedged);
  const std::size_t w = run.prefix.size() - 1;
  const auto plan = plan_hedged(run.prefix, w, run.hedged, run.costs);
  ASSERT_EQ(plan.publish_steps, std::vector<std::int64_t>{600});
  const auto choice = explain_plan(run.prefix, w, run.hedged, run.costs, plan.publish_steps);
  EXPECT_EQ(choice.picked, "forecast");
  EXPECT_EQ(choice.publish_steps, plan.publish_steps);
  const auto curve = run.curve();
  EXPECT_DOUBLE_EQ(choice.candidate_cil, evaluate_cil(curve, w, run.costs, plan.publish_steps));
  EXPECT_DOUBLE_EQ(plan.cil, choice.candidate_cil);
  ASSERT_FALSE(choice.best_evenly_spaced.empty());
  EXPECT_NE(choice.best_evenly_spaced, plan.publish_steps);
  EXPECT_DOUBLE_EQ(choice.best_evenly_spaced_cil, evaluate_cil(curve, w, run.costs, choice.best_evenly_spaced));
  // No even spacing of 1 to 24 publishes does better than the one reported.
  for (std::size_t k = 1; k <= 24; ++k)
    EXPECT_GE(evaluate_cil(curve, w, run.costs, evenly_spaced(run.hedged, k)), choice.best_evenly_spaced_cil - 1e-9) << k;
  const double none = evaluate_cil(curve, w, run.costs, {});
  EXPECT_NEAR(choice.expected_margin_pct, 100.0 * (choice.best_evenly_spaced_cil - choice.candidate_cil) / (none - plan.cil), 1e-9);
  EXPECT_GT(choice.expected_margin_pct, 0.0);
  EXPECT_DOUBLE_EQ(choice.win_probability, 1.0);  // one scenario, and the plan wins in it
  EXPECT_NE(choice.reason.find("is expected to do better than the best even spacing"), std::string::npos) << choice.reason;
}

TEST(Hedge, AnEvenlySpacedScheduleIsNamedSoAndABetterSpacingIsNamed) {
  // One publish in the middle of the forecast (step 550) is the single evenly spaced publish; it
  // comes before the drop and gains nothing, so another spacing does better.
  const CertainDrop run(1.0);
  const std::size_t w = run.prefix.size() - 1;
  ASSERT_EQ(evenly_spaced(run.hedged, 1), std::vector<std::int64_t>{550});
  const auto choice = explain_plan(run.prefix, w, run.hedged, run.costs, std::vector<std::int64_t>{550});
  EXPECT_EQ(choice.picked, "evenly_spaced");
  EXPECT_EQ(choice.publish_steps, std::vector<std::int64_t>{550});  // kept: it is no departure
  EXPECT_LT(choice.expected_margin_pct, 0.0);
  EXPECT_DOUBLE_EQ(choice.win_probability, 0.0);
  EXPECT_NE(choice.reason.find("is expected to do better"), std::string::npos) << choice.reason;
}

TEST(Hedge, APlanThatPublishesNothingSaysThereIsNoGain) {
  const CertainDrop flat(2.0);  // no drop: nothing to gain
  const std::size_t w = flat.prefix.size() - 1;
  const auto plan = plan_hedged(flat.prefix, w, flat.hedged, flat.costs);
  EXPECT_TRUE(plan.publish_steps.empty());
  const auto choice = explain_plan(flat.prefix, w, flat.hedged, flat.costs, plan.publish_steps);
  EXPECT_EQ(choice.picked, "no_publish");
  EXPECT_DOUBLE_EQ(choice.expected_margin_pct, 0.0);
  EXPECT_NE(choice.reason.find("no gain"), std::string::npos) << choice.reason;
  EXPECT_THROW(explain_plan(flat.prefix, flat.prefix.size(), flat.hedged, flat.costs, plan.publish_steps), Error);
}

// Two futures: a small drop at step 300 (weight 0.6), or a large one at step 800 (0.4). On their
// mean path the exact plan waits for the large drop and publishes once, at 800. That wins in
// expectation, through the second future alone: in the first, even spacing publishes the small
// drop soon after it comes, and the plan only at 800.
CertainDrop minority_bet() {
  CertainDrop run(2.0);
  std::vector<double> small, large;
  for (auto s : run.hedged.forecast.steps) small.push_back(s < 300 ? 2.0 : 1.98), large.push_back(s < 800 ? 2.0 : 0.5);
  for (std::size_t i = 0; i < small.size(); ++i) run.hedged.forecast.loss[i] = 0.6 * small[i] + 0.4 * large[i];
  run.hedged.scenarios = {{"small drop", 0.6, small}, {"large drop", 0.4, large}};
  run.hedged.hedged = true;
  return run;
}

TEST(Hedge, APlanThatWinsOnlyInAMinorityOfScenariosKeepsToEvenSpacing) {
  CertainDrop run = minority_bet();
  const std::size_t w = run.prefix.size() - 1;
  const auto bet = plan_optimal(run.curve(), w, run.costs).publish_steps;
  ASSERT_EQ(bet, (std::vector<std::int64_t>{800}));
  const auto choice = explain_plan(run.prefix, w, run.hedged, run.costs, bet);
  EXPECT_GT(choice.expected_margin_pct, 0.0);
  EXPECT_NEAR(choice.win_probability, 0.4, 1e-12);
  EXPECT_EQ(choice.picked, "evenly_spaced");
  EXPECT_EQ(choice.publish_steps, choice.best_evenly_spaced);
  EXPECT_NE(choice.best_evenly_spaced, bet);
  EXPECT_NE(choice.reason.find("only in scenarios holding 40 %"), std::string::npos) << choice.reason;
  const auto plan = plan_hedged(run.prefix, w, run.hedged, run.costs);
  EXPECT_EQ(plan.publish_steps, choice.best_evenly_spaced);
  EXPECT_DOUBLE_EQ(plan.cil, choice.best_evenly_spaced_cil);
  // Asking for less confidence than the forecast has, the plan bets on it.
  run.hedged.depart_confidence = 0.4;
  EXPECT_EQ(plan_hedged(run.prefix, w, run.hedged, run.costs).publish_steps, bet);
  run.hedged.depart_confidence = 0.0;
  EXPECT_EQ(plan_hedged(run.prefix, w, run.hedged, run.costs).publish_steps, bet);
  HedgeOptions bad;
  bad.depart_confidence = 1.5;
  EXPECT_THROW(hedge_forecast(run.prefix, run.hedged.forecast, bad), Error);
}

TEST(Hedge, TheEvenSpacingAPlanIsHeldToKeepsToTheSlowdownCap) {
  // The minority bet is held to even spacing, which publishes several times when nothing caps
  // the slowdown. Under a cap the simple rule obeys it as every plan does.
  CertainDrop run = minority_bet();
  const std::size_t w = run.prefix.size() - 1;
  const auto uncapped = plan_hedged(run.prefix, w, run.hedged, run.costs);
  ASSERT_GT(uncapped.publish_steps.size(), 1u);
  run.costs.max_slowdown_s = run.costs.stall_s;  // room for one stall
  const auto one = plan_hedged(run.prefix, w, run.hedged, run.costs);
  EXPECT_EQ(one.publish_steps.size(), 1u);
  const auto one_choice = explain_plan(run.prefix, w, run.hedged, run.costs, plan_optimal(run.curve(), w, run.costs).publish_steps);
  EXPECT_LE(one_choice.best_evenly_spaced.size(), 1u);
  EXPECT_EQ(one_choice.publish_steps, one.publish_steps);
  run.costs.max_slowdown_s = 0.5 * run.costs.stall_s;  // no room at all
  const auto none = plan_hedged(run.prefix, w, run.hedged, run.costs);
  EXPECT_TRUE(none.publish_steps.empty());
  EXPECT_DOUBLE_EQ(none.cil, evaluate_cil(run.curve(), w, run.costs, {}));
  const auto none_choice = explain_plan(run.prefix, w, run.hedged, run.costs, none.publish_steps);
  EXPECT_EQ(none_choice.picked, "no_publish");
  EXPECT_TRUE(none_choice.best_evenly_spaced.empty());
  EXPECT_NE(none_choice.reason.find("cap on training slowdown (10 s) leaves no room for a publish's stall of 20 s"), std::string::npos)
      << none_choice.reason;
}

}  // namespace
}  // namespace modelcast::predictor
