// Planner: hand-computed CIL, exact optimum against brute force, baselines.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "cil_ties.h"

#include "modelcast/predictor_planner.h"
#include "modelcast/predictor_viper.h"

namespace modelcast::predictor {
namespace {

TEST(Trajectory, ForecastExtendsThePrefixAndTimeNeverRunsBackwards) {
  std::vector<CurvePoint> prefix(2);
  prefix[0].step = 0;
  prefix[0].loss = 5.0;
  prefix[0].time_s = 0.0;
  prefix[1].step = 10;
  prefix[1].loss = 4.0;
  prefix[1].time_s = 100.0;
  Forecast forecast;
  forecast.steps = {20, 30};
  forecast.loss = {3.5, 3.0};
  forecast.time_s = {90.0, 150.0};  // the first forecast time lies before the last logged one
  auto logged = trajectory_of(prefix);
  EXPECT_EQ(logged.steps, (std::vector<std::int64_t>{0, 10}));
  EXPECT_EQ(logged.loss, (std::vector<double>{5.0, 4.0}));
  auto t = extend_with_forecast(prefix, forecast);
  EXPECT_EQ(t.steps, (std::vector<std::int64_t>{0, 10, 20, 30}));
  EXPECT_EQ(t.loss, (std::vector<double>{5.0, 4.0, 3.5, 3.0}));
  EXPECT_EQ(t.time_s, (std::vector<double>{0.0, 100.0, 100.0, 150.0}));
}

PublishCosts c_with(double stall_s, double max_slowdown_s) {
  PublishCosts c;
  c.stall_s = stall_s;
  c.max_slowdown_s = max_slowdown_s;
  return c;
}

Trajectory simple() { return {{0, 10, 20, 30}, {4.0, 3.0, 2.0, 1.0}, {0.0, 10.0, 20.0, 30.0}}; }

TEST(EvaluateCil, MatchesHandComputation) {
  PublishCosts c;
  c.stall_s = 1.0;
  c.delivery_s = 2.0;
  const auto t = simple();
  // No publish: loss 4 over the whole 30 s window.
  EXPECT_DOUBLE_EQ(evaluate_cil(t, 0, c, {}), 120.0);
  // Publish at 10: servable at 10 + 1 + 2 = 13 -> 4*13 + 3*17.
  EXPECT_DOUBLE_EQ(evaluate_cil(t, 0, c, std::vector<std::int64_t>{10}), 103.0);
  // Publish at 10 and 20: the second is delayed by the first stall: 20 + 2*1 + 2 = 24.
  EXPECT_DOUBLE_EQ(evaluate_cil(t, 0, c, std::vector<std::int64_t>{10, 20}), 4 * 13 + 3 * 11 + 2 * 6.0);
  // Publishing the last step changes nothing inside the window.
  EXPECT_DOUBLE_EQ(evaluate_cil(t, 0, c, std::vector<std::int64_t>{30}), 120.0);
  // Request rate scales, an explicit window replaces t(last) - t(W).
  c.request_rate = 2.0;
  c.window_s = 10.0;
  EXPECT_DOUBLE_EQ(evaluate_cil(t, 0, c, {}), 80.0);
}

TEST(EvaluateCil, RejectsStepsThatAreNotCandidates) {
  PublishCosts c;
  const auto t = simple();
  // Each named for what is wrong with it: the message said "not a logged step after the warm-up
  // step (or steps are not increasing)" of each, also of a logged step out of order.
  auto error_of = [&](std::size_t w, std::vector<std::int64_t> steps) {
    try {
      evaluate_cil(t, w, c, steps);
    } catch (const modelcast::Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(error_of(1, {10}), "publish step 10 is not after the warm-up step 10");
  EXPECT_EQ(error_of(0, {15}), "publish step 15 is not a logged step");
  EXPECT_EQ(error_of(0, {20, 10}), "publish step 10 is not after the one before it (20): publish steps must increase");
  EXPECT_EQ(error_of(0, {20, 20}), "publish step 20 is not after the one before it (20): publish steps must increase");
  // After a publish that is servable only past the window (30 + stall + delivery), the steps were
  // no longer looked at: one never logged, or out of order, was taken.
  c.delivery_s = 1.0;
  EXPECT_EQ(error_of(0, {30, 99999}), "publish step 99999 is not a logged step");
  EXPECT_EQ(error_of(0, {20, 30, 10}), "publish step 10 is not after the one before it (30): publish steps must increase");
  c.delivery_s = 0;
  c.stall_s = -1;
  EXPECT_THROW(evaluate_cil(t, 0, c, {}), modelcast::Error);
  c.stall_s = 0;
  c.delivery_s = std::nan("");
  EXPECT_THROW(evaluate_cil(t, 0, c, {}), modelcast::Error);
  c.delivery_s = 0;
  c.request_rate = 0;
  EXPECT_THROW(evaluate_cil(t, 0, c, {}), modelcast::Error);
}

// Minimum CIL over every subset of candidates (respecting the slowdown cap).
double brute_force(const Trajectory& t, std::size_t w, const PublishCosts& c, std::size_t& best_count) {
  const std::size_t n = t.steps.size() - w - 1;
  double best = std::numeric_limits<double>::infinity();
  for (std::uint32_t mask = 0; mask < (1u << n); ++mask) {
    std::vector<std::int64_t> steps;
    for (std::size_t i = 0; i < n; ++i)
      if (mask & (1u << i)) steps.push_back(t.steps[w + 1 + i]);
    if (c.stall_s * static_cast<double>(steps.size()) > c.max_slowdown_s + 1e-9) continue;
    const double v = evaluate_cil(t, w, c, steps);
    // The planner's own tie rule: within kCilTieTolerance of the CIL, fewer publishes win.
    if (best == std::numeric_limits<double>::infinity() || detail::cil_below(v, best) ||
        (!detail::cil_below(best, v) && steps.size() < best_count)) {
      best = v;
      best_count = steps.size();
    }
  }
  return best;
}

// The plan's CIL is brute force's minimum, its schedule achieves it within the cap, and ties go
// to fewer publishes.
void expect_brute_force_optimum(const Trajectory& t, std::size_t w, const PublishCosts& c, int trial) {
  std::size_t brute_count = 1000;
  const double brute = brute_force(t, w, c, brute_count);
  const auto plan = plan_optimal(t, w, c);
  ASSERT_NEAR(plan.cil, brute, 2 * detail::kCilTieTolerance * std::abs(brute)) << "trial " << trial;
  EXPECT_NEAR(evaluate_cil(t, w, c, plan.publish_steps), plan.cil, 2 * detail::kCilTieTolerance * std::abs(brute))
      << "trial " << trial;
  EXPECT_LE(plan.slowdown_s, c.max_slowdown_s + 1e-9) << "trial " << trial;
  EXPECT_EQ(plan.publish_steps.size(), brute_count) << "ties must go to fewer publishes, trial " << trial;
}

// n points 10 steps apart from loss 5: each falls by up to 1 with probability `falls`, else rises
// by up to `bump`; times advance by 0.5 plus up to `spread`, or not at all with probability
// `equal_times` (then drawn for, else not: the earlier tests' sequences stay as they were).
Trajectory random_walk(std::mt19937& rng, std::size_t n, double falls, double bump, double spread, double equal_times) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  Trajectory t;
  double loss = 5.0, time = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    t.steps.push_back(static_cast<std::int64_t>(i * 10));
    t.loss.push_back(loss);
    t.time_s.push_back(time);
    loss += (u(rng) < falls ? -1.0 : bump) * u(rng);
    time += equal_times > 0 && u(rng) < equal_times ? 0.0 : 0.5 + spread * u(rng);
  }
  return t;
}

TEST(PlanOptimal, AgreesWithBruteForceOnRandomSmallProblems) {
  std::mt19937 rng(42);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int trial = 0; trial < 300; ++trial) {
    // Mostly decreasing with occasional bumps, uneven step times.
    const Trajectory t = random_walk(rng, 3 + trial % 9, 0.8, 0.4, 3.0, 0.0);
    const std::size_t w = trial % 3 == 0 ? 1 : 0;
    PublishCosts c;
    c.stall_s = 4.0 * u(rng);
    c.delivery_s = 3.0 * u(rng);
    if (trial % 4 == 1) c.max_slowdown_s = c.stall_s * static_cast<double>(trial % 3);
    if (trial % 5 == 2) c.window_s = (t.time_s.back() - t.time_s[w]) * (0.5 + u(rng));
    expect_brute_force_optimum(t, w, c, trial);
  }
}

TEST(PlanOptimal, AgreesWithBruteForceWhereLossesRepeatAndRise) {
  // Losses on a coarse grid, so that many candidates tie with an earlier one or lie above it: the
  // planner searches only candidates below every earlier one, and ties must still go to the
  // schedule with fewer publishes.
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int trial = 0; trial < 300; ++trial) {
    const std::size_t n = 4 + trial % 9;  // 4..12 points
    Trajectory t;
    double time = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
      t.steps.push_back(static_cast<std::int64_t>(i * 10));
      t.loss.push_back(std::round(4.0 * (5.0 - 0.4 * static_cast<double>(i) + 1.5 * u(rng))) / 4.0);
      t.time_s.push_back(time);
      time += trial % 2 == 0 ? 2.0 : 0.5 + 3.0 * u(rng);
    }
    const std::size_t w = trial % 3 == 0 ? 1 : 0;
    PublishCosts c;
    c.stall_s = trial % 7 == 0 ? 0.0 : 3.0 * u(rng);
    c.delivery_s = trial % 5 == 0 ? 0.0 : 2.0 * u(rng);
    if (trial % 4 == 1) c.max_slowdown_s = c.stall_s * static_cast<double>(trial % 3);
    expect_brute_force_optimum(t, w, c, trial);
  }
}

// A free publish (no stall) delays nothing, so the planner takes every record low served for some
// time without searching: that must be the optimum, ties (equal times, a window that ends first)
// to fewer publishes included. On a smooth log of 10^5 points the search took minutes and
// gigabytes for this answer.
TEST(PlanOptimal, AFreePublishIsEveryRecordLowServedForSomeTime) {
  std::mt19937 rng(23);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int trial = 0; trial < 300; ++trial) {
    const Trajectory t = random_walk(rng, 4 + trial % 9, 0.7, 0.5, 2.0, 0.3);  // some equal times
    const std::size_t w = trial % 3 == 0 ? 1 : 0;
    PublishCosts c;
    c.delivery_s = trial % 4 == 0 ? 0.0 : 3.0 * u(rng);
    if (trial % 5 == 2) c.window_s = (t.time_s.back() - t.time_s[w]) * (0.3 + u(rng));
    expect_brute_force_optimum(t, w, c, trial);
  }
  Trajectory smooth;
  for (int i = 0; i < 100'000; ++i) {
    smooth.steps.push_back(i);
    smooth.loss.push_back(2.0 + 3.0 / (1.0 + 0.01 * i));
    smooth.time_s.push_back(0.5 * i);
  }
  PublishCosts c;
  c.delivery_s = 2.0;  // four points' time: the last five are servable at or past the window's end
  const auto plan = plan_optimal(smooth, 10, c);
  // Every point is a record low; late ones gain less than a tie of the CIL each, and go while
  // the CIL stays within a tie of publishing every one.
  std::vector<std::int64_t> every;
  for (std::int64_t s = 11; s < 100'000 - 5; ++s) every.push_back(s);
  const double all = evaluate_cil(smooth, 10, c, every);
  EXPECT_FALSE(detail::cil_below(all, plan.cil)) << "publishing every record low beats the plan by more than a tie";
  EXPECT_LE(plan.publish_steps.size(), every.size());
  EXPECT_GT(plan.publish_steps.size(), every.size() / 2);
  EXPECT_NEAR(evaluate_cil(smooth, 10, c, plan.publish_steps), plan.cil, 1e-9 * plan.cil);
  // On a nearly flat curve most gains are ties: those go, but no more than that. Every publish
  // kept is worth more than a tie of the optimum (publishing every record low).
  Trajectory flat;
  for (int i = 0; i < 3000; ++i) {
    flat.steps.push_back(i);
    flat.loss.push_back(2.0 + 1e-5 * std::exp(-i / 300.0));
    flat.time_s.push_back(i);
  }
  const auto kept = plan_optimal(flat, 10, PublishCosts{}).publish_steps;
  std::vector<std::int64_t> all_lows;
  for (std::int64_t s = 11; s < 2999; ++s) all_lows.push_back(s);
  const double optimum = evaluate_cil(flat, 10, PublishCosts{}, all_lows);
  ASSERT_GT(kept.size(), 10u);
  ASSERT_LT(kept.size(), all_lows.size() / 2) << "the ties were kept";
  EXPECT_FALSE(detail::cil_below(optimum, evaluate_cil(flat, 10, PublishCosts{}, kept)));
  for (std::size_t k = 0; k < kept.size(); ++k) {
    auto without = kept;
    without.erase(without.begin() + static_cast<std::ptrdiff_t>(k));
    EXPECT_TRUE(detail::cil_below(optimum, evaluate_cil(flat, 10, PublishCosts{}, without)))
        << "step " << kept[k] << " could go within a tie";
  }
  // The online scheduler's mid-run plan, whose origin may become servable after some candidates.
  Trajectory future;
  for (int i = 0; i < 6; ++i) {
    future.steps.push_back(100 + i);
    future.loss.push_back(3.0 - 0.1 * i);
    future.time_s.push_back(10.0 + i);
  }
  const auto mid = plan_from(4.0, 12.5, 3, 30.0, future, c);  // the first, servable at 12, precedes the origin
  EXPECT_EQ(mid.publish_steps, (std::vector<std::int64_t>{101, 102, 103, 104, 105}));
  EXPECT_NEAR(mid.cil, 4.0 * 0.5 + 2.9 + 2.8 + 2.7 + 2.6 + 2.5 * 13, 1e-9);
}

// Straightforward O(n^2 x publishes) version of the recurrence, as a reference for the planner's
// envelope-accelerated DP on problems too large for brute force.
double naive_dp(const Trajectory& t, std::size_t w, const PublishCosts& c) {
  const double end = t.time_s[w] + (t.time_s.back() - t.time_s[w]);
  const std::size_t n = t.steps.size();
  const double inf = std::numeric_limits<double>::infinity();
  double best = t.loss[w] * (end - t.time_s[w]);
  std::vector<double> f(n, inf);
  for (std::size_t i = w + 1; i < n; ++i)
    if (t.time_s[i] + c.stall_s + c.delivery_s < end) f[i] = t.loss[w] * (t.time_s[i] + c.stall_s + c.delivery_s - t.time_s[w]);
  for (std::size_t j = 1; j <= n; ++j) {
    std::vector<double> g(n, inf);
    for (std::size_t i = w + 1; i < n; ++i) {
      if (f[i] == inf) continue;
      best = std::min(best, f[i] + t.loss[i] * (end - (t.time_s[i] + static_cast<double>(j) * c.stall_s + c.delivery_s)));
      for (std::size_t k = i + 1; k < n; ++k)
        if (t.time_s[k] + static_cast<double>(j + 1) * c.stall_s + c.delivery_s < end)
          g[k] = std::min(g[k], f[i] + t.loss[i] * (t.time_s[k] - t.time_s[i] + c.stall_s));
    }
    f = std::move(g);
  }
  return best;
}

TEST(PlanOptimal, AgreesWithTheNaiveRecurrenceOnLargerProblems) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int trial = 0; trial < 20; ++trial) {
    Trajectory t;
    double loss = 6.0, time = 0.0;
    for (int i = 0; i < 120; ++i) {
      t.steps.push_back(i);
      t.loss.push_back(loss);
      t.time_s.push_back(time);
      loss += (u(rng) < 0.7 ? -0.1 : 0.08) * u(rng);  // noisy, like a per-step training loss
      time += u(rng) < 0.1 ? 0.0 : 1.0 + u(rng);      // some equal times
    }
    PublishCosts c;
    c.stall_s = 0.2 + 5.0 * u(rng);
    c.delivery_s = 3.0 * u(rng);
    const auto plan = plan_optimal(t, 10, c);
    const double reference = naive_dp(t, 10, c);
    ASSERT_NEAR(plan.cil, reference, 1e-9 * reference) << "trial " << trial;
    EXPECT_NEAR(evaluate_cil(t, 10, c, plan.publish_steps), plan.cil, 1e-9 * reference);
  }
}

// Smooth falling curves make every point a record low, so the search runs on all of them and
// only the bound (free publishing of the rest) keeps its layers and states few: it must never
// drop the optimum, at stalls from tiny (hundreds of publishes) to large.
TEST(PlanOptimal, AgreesWithTheNaiveRecurrenceOnSmoothCurvesWhereEveryPointIsACandidate) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int trial = 0; trial < 24; ++trial) {
    Trajectory t;
    double time = 0.0;
    const double scale = 20.0 + 200.0 * u(rng);
    for (int i = 0; i < 160; ++i) {
      t.steps.push_back(i);
      t.loss.push_back(2.0 + 3.0 * std::exp(-i / scale) + (trial % 2 ? 0.0 : 1.0 / (1.0 + i)));
      t.time_s.push_back(time);
      time += trial % 3 == 0 ? 1.0 : 0.5 + u(rng);
    }
    PublishCosts c;
    c.stall_s = trial % 4 == 0 ? 0.01 : std::pow(10.0, -1.0 + 2.5 * u(rng));
    c.delivery_s = 2.0 * u(rng);
    const auto plan = plan_optimal(t, 10, c);
    const double reference = naive_dp(t, 10, c);
    ASSERT_NEAR(plan.cil, reference, 1e-9 * reference) << "trial " << trial;
    EXPECT_NEAR(evaluate_cil(t, 10, c, plan.publish_steps), plan.cil, 1e-9 * reference) << "trial " << trial;
  }
}

TEST(PlanOptimal, FreePublishingMeansPublishingEveryUsefulStep) {
  PublishCosts c;  // c = d = 0
  const auto plan = plan_optimal(simple(), 0, c);
  EXPECT_EQ(plan.publish_steps, (std::vector<std::int64_t>{10, 20}));  // 30 ends the window
  EXPECT_DOUBLE_EQ(plan.cil, 4 * 10 + 3 * 10 + 2 * 10.0);
}

// It returned the steps after the warm-up of a trajectory with fewer losses than steps, which
// every other function refuses.
TEST(Baselines, EveryCandidateRefusesAMalformedTrajectory) {
  Trajectory t{{0, 1, 2, 3}, {1.0}, {}};
  EXPECT_THROW(every_candidate_schedule(t, 0), modelcast::Error);
  EXPECT_EQ(every_candidate_schedule(simple(), 1), (std::vector<std::int64_t>{20, 30}));
}

TEST(Baselines, EveryNStepsPublishesAtTheFirstLoggedStepOfEachEpoch) {
  Trajectory t;
  for (int i = 0; i <= 10; ++i) {
    t.steps.push_back(i * 130);
    t.loss.push_back(5.0 - 0.1 * i);
    t.time_s.push_back(i);
  }
  // W = 260; epochs of 500: boundaries 500, 1000 -> first logged steps 520, 1040.
  EXPECT_EQ(every_n_steps_schedule(t, 2, 500), (std::vector<std::int64_t>{520, 1040}));
  EXPECT_EQ(every_candidate_schedule(t, 8), (std::vector<std::int64_t>{1170, 1300}));
  EXPECT_THROW(every_n_steps_schedule(t, 2, 0), modelcast::Error);
  // Epochs of 1 step over a run of 1e10 steps logged at 11 points: one publish a logged point
  // after the warm-up, found without a boundary per step (that allocated gigabytes, then failed).
  Trajectory long_run;
  for (int i = 0; i <= 10; ++i) {
    long_run.steps.push_back(std::int64_t{1'000'000'000} * i);
    long_run.loss.push_back(5.0 - 0.1 * i);
    long_run.time_s.push_back(i);
  }
  const auto every_step = every_n_steps_schedule(long_run, 2, 1);
  EXPECT_EQ(every_step, (std::vector<std::int64_t>(long_run.steps.begin() + 3, long_run.steps.end())));
  EXPECT_EQ(every_n_steps_schedule(long_run, 2, 3'000'000'000),
            (std::vector<std::int64_t>{3'000'000'000, 6'000'000'000, 9'000'000'000}));
}

TEST(Baselines, FixedIntervalIsNoWorseThanPublishingEverything) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  Trajectory t;
  for (int i = 0; i < 30; ++i) {
    t.steps.push_back(i * 100);
    t.loss.push_back(3.0 + 5.0 / (1.0 + i) + 0.01 * u(rng));
    t.time_s.push_back(10.0 * i);
  }
  PublishCosts c;
  c.stall_s = 15.0;
  c.delivery_s = 5.0;
  const auto fixed = fixed_interval_schedule(t, 2, c);
  const double every = evaluate_cil(t, 2, c, every_candidate_schedule(t, 2));
  EXPECT_LE(evaluate_cil(t, 2, c, fixed), every);
  EXPECT_GE(evaluate_cil(t, 2, c, fixed), plan_optimal(t, 2, c).cil);
  // Fixed interval: the gaps between its publishes (in candidates) are all equal.
  ASSERT_GE(fixed.size(), 2u);
  for (std::size_t i = 2; i < fixed.size(); ++i) EXPECT_EQ(fixed[i] - fixed[i - 1], fixed[1] - fixed[0]);
}

TEST(Baselines, ThresholdRulePublishesNothingOnAFlatForecast) {
  Trajectory flat{{0, 1, 2, 3, 4}, {3.0, 3.0, 3.0, 3.0, 3.0}, {0, 1, 2, 3, 4}};
  EXPECT_TRUE(threshold_schedule(flat, 0, {}).empty());
  Trajectory dropping{{0, 1, 2, 3, 4}, {5.0, 4.0, 3.0, 2.0, 1.0}, {0, 10, 20, 30, 40}};
  PublishCosts c;
  c.stall_s = 1;
  const auto steps = threshold_schedule(dropping, 0, c);
  EXPECT_FALSE(steps.empty());
  EXPECT_LT(evaluate_cil(dropping, 0, c, steps), evaluate_cil(dropping, 0, c, {}));
}

TEST(SnapToCandidates, MapsToTheNextLoggedStepAfterWarmup) {
  const auto t = simple();
  EXPECT_EQ(snap_to_candidates(std::vector<std::int64_t>{5, 12, 19, 31}, t, 0), (std::vector<std::int64_t>{10, 20}));
}

// Planned steps out of order were cut to their rising part without a word ({25, 5, 15}: {30}).
TEST(SnapToCandidates, PlannedStepsOutOfOrderAreAnError) {
  const auto t = simple();
  try {
    snap_to_candidates(std::vector<std::int64_t>{25, 5, 15}, t, 0);
    ADD_FAILURE() << "steps out of order taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("planned steps must be in order: step 5 (at 1) comes after 25"), std::string::npos)
        << e.what();
  }
}

// An index past the curve's end once read beyond it (garbage steps, or a crash from Python).
TEST(SnapToCandidates, AWarmUpIndexPastTheEndIsAnError) {
  const auto t = simple();
  const std::vector<std::int64_t> planned{5};
  for (std::size_t w : {t.steps.size(), std::size_t{1} << 40}) {
    try {
      snap_to_candidates(planned, t, w);
      ADD_FAILURE() << "index " << w << " taken";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("warm-up index " + std::to_string(w) + " is past the end"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(snap_to_candidates(planned, Trajectory{}, 0), Error);
}

// A forecast with fewer losses or times than steps was read past its end.
TEST(Trajectory, AForecastWithFewerValuesThanStepsIsRefused) {
  const std::vector<CurvePoint> prefix{{0, 5.0, 0.0}};
  Forecast short_time;
  short_time.steps = {10, 20, 30};
  short_time.loss = {4.0, 3.0, 2.0};
  short_time.time_s = {1.0};
  try {
    extend_with_forecast(prefix, short_time);
    ADD_FAILURE() << "extended with a forecast of 3 steps and 1 time";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("3 steps, 3 losses and 1 times"), std::string::npos) << e.what();
  }
}

// A cap past every integer (1e20 s, or a denormal stall under a finite cap) was cast undefined
// and came out as "no publish", in the plans and in Viper's rules alike.
TEST(PlanOptimal, AHugeSlowdownCapIsNoCap) {
  Trajectory t;
  for (int i = 0; i < 40; ++i) {
    t.steps.push_back(i * 10);
    t.loss.push_back(5.0 / (1.0 + i));
    t.time_s.push_back(i * 10.0);
  }
  PublishCosts free;
  free.stall_s = 1.0;
  free.delivery_s = 0.5;
  const auto uncapped = plan_optimal(t, 3, free);
  ASSERT_FALSE(uncapped.publish_steps.empty());
  EXPECT_EQ(viper_fixed_interval(t, 3, free).publish_steps.empty(), false);
  for (double cap : {1e20, std::numeric_limits<double>::max()}) {
    PublishCosts c = free;
    c.max_slowdown_s = cap;
    EXPECT_EQ(plan_optimal(t, 3, c).publish_steps, uncapped.publish_steps) << cap;
    EXPECT_EQ(viper_fixed_interval(t, 3, c).publish_steps, viper_fixed_interval(t, 3, free).publish_steps) << cap;
  }
  PublishCosts tiny = free;
  tiny.stall_s = 1e-310;  // denormal
  tiny.max_slowdown_s = 100;
  PublishCosts tiny_free = tiny;
  tiny_free.max_slowdown_s = std::numeric_limits<double>::infinity();
  EXPECT_EQ(plan_optimal(t, 3, tiny).publish_steps, plan_optimal(t, 3, tiny_free).publish_steps);
  EXPECT_EQ(publishes_allowed(c_with(2.0, 7.0), 100), 3U);
  EXPECT_EQ(publishes_allowed(c_with(2.0, 7.0), 2), 2U);
}

// A NaN origin made every schedule's CIL NaN; a NaN window end made it "publish nothing", CIL 0.
TEST(PlanFrom, ANonFiniteStateIsRefusedNamingIt) {
  const Trajectory future{{10, 20}, {4.0, 3.5}, {10.0, 20.0}};
  PublishCosts c;
  c.stall_s = 1;
  const auto refused = [&](double loss, double servable, int done, double end, const std::string& said) {
    try {
      plan_from(loss, servable, done, end, future, c);
      ADD_FAILURE() << "planned: " << said;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(said), std::string::npos) << e.what();
    }
  };
  refused(std::nan(""), 0.0, 0, 40.0, "origin_loss must be finite");
  refused(5.0, std::nan(""), 0, 40.0, "origin_servable_s must be finite");
  refused(5.0, 0.0, 0, std::nan(""), "window_end_s must be finite");
  refused(5.0, 0.0, -1, 40.0, "publishes_done must be >= 0, got -1");
}

TEST(PlanFrom, MidRunStateMatchesTheFullPlanWhenNothingWasPublished) {
  const Trajectory t{{0, 10, 20, 30, 40}, {5.0, 4.0, 3.5, 2.0, 1.9}, {0.0, 10.0, 20.0, 30.0, 40.0}};
  PublishCosts c;
  c.stall_s = 2;
  c.delivery_s = 1;
  const auto full = plan_optimal(t, 0, c);
  const Trajectory future{{10, 20, 30, 40}, {4.0, 3.5, 2.0, 1.9}, {10.0, 20.0, 30.0, 40.0}};
  const auto mid = plan_from(5.0, 0.0, 0, 40.0, future, c);
  EXPECT_EQ(mid.publish_steps, full.publish_steps);
  EXPECT_NEAR(mid.cil, full.cil, 1e-12);
}

}  // namespace
}  // namespace modelcast::predictor
