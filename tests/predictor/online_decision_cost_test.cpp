// What keeps OnlineScheduler::should_publish cheap on the training thread: plans are reused
// while they provably still hold (without changing a single decision), and refits can run on a
// worker thread whose forecast the next decision picks up.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <mutex>
#include <random>
#include <span>
#include <stdexcept>
#include <thread>

#include "modelcast/predictor_online.h"

namespace modelcast::predictor {
namespace {

// A noisy power-law run, one point every 2 s.
std::vector<CurvePoint> noisy_run(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(0.0, 0.01);
  std::vector<CurvePoint> points;
  for (std::size_t i = 0; i < n; ++i) {
    const auto step = static_cast<std::int64_t>(10 * (i + 1));
    points.push_back({step, 2.0 + 3.0 * std::pow(static_cast<double>(i + 1), -0.5) + noise(rng), 2.0 * static_cast<double>(i + 1)});
  }
  return points;
}

std::vector<std::int64_t> replay(OnlineScheduler& s, const std::vector<CurvePoint>& points, double stall,
                                 bool wait_each = false) {
  for (const auto& p : points) {
    s.observe(p.step, p.loss, p.time_s + stall * static_cast<double>(s.published_steps().size()));
    s.should_publish(p.step);
    if (wait_each) s.wait_for_background();
  }
  return s.published_steps();
}

OnlineOptions options_for(const std::vector<CurvePoint>& points, double stall) {
  OnlineOptions o;
  o.forecast.total_steps = points.back().step;
  o.warmup_step = points[points.size() / 5].step;
  o.costs.stall_s = stall;
  o.costs.delivery_s = stall / 2;
  return o;
}

TEST(OnlineDecisionCost, ReusesPlansWhileTheyHoldAndDecidesExactlyAsFreshPlansWould) {
  // Built-in forecaster, three costs: re-planning at every decision and re-planning only when
  // the last plan's "wait" may have changed must publish at the same steps, with far fewer plans.
  const auto points = noisy_run(300, 7);
  const std::size_t decisions = points.size() - points.size() / 5 - 1;
  for (double stall : {1.0, 4.0, 16.0}) {
    const auto o = options_for(points, stall);
    OnlineOptions fresh_options = o;
    fresh_options.reuse_plans = false;
    OnlineScheduler reusing(o), fresh(fresh_options);
    const auto reused_steps = replay(reusing, points, stall);
    const auto fresh_steps = replay(fresh, points, stall);
    EXPECT_EQ(reused_steps, fresh_steps) << "stall " << stall;
    EXPECT_EQ(fresh.stats().plans, decisions);
    EXPECT_EQ(reusing.stats().plans + reusing.stats().plans_reused, decisions);
    EXPECT_LT(reusing.stats().plans, decisions / 2) << "stall " << stall;
  }
}

TEST(OnlineDecisionCost, ReusesPlansOnAForecastGridCoarserThanTheLog) {
  // Long logs are forecast on a coarser grid (max_future_points): most decisions then fall
  // between two forecast steps.
  const auto points = noisy_run(600, 9);
  const std::size_t decisions = points.size() - points.size() / 5 - 1;
  for (double stall : {1.0, 4.0, 16.0}) {
    auto o = options_for(points, stall);
    o.forecast.max_future_points = 40;
    OnlineOptions fresh_options = o;
    fresh_options.reuse_plans = false;
    OnlineScheduler reusing(o), fresh(fresh_options);
    EXPECT_EQ(replay(reusing, points, stall), replay(fresh, points, stall)) << "stall " << stall;
    EXPECT_LT(reusing.stats().plans, decisions / 2) << "stall " << stall;
  }
}

TEST(OnlineDecisionCost, DecisionsBeforeTheForecastsFirstStepAreAnchoredAndReusePlans) {
  // A forecast starts one grid gap after the point it was fitted to, and a long horizon's gap
  // spans many logged points (here 10 forecast points: about 80 logged points each at first).
  // Decisions in that first gap found no anchor on the forecast: each planned afresh on the
  // unshifted forecast, and none could reuse a plan. They are now anchored on the line from the
  // fitted point to the forecast's first step, and reuse plans as decisions elsewhere do.
  const auto points = noisy_run(1000, 9);
  for (double stall : {1.0, 16.0}) {
    auto o = options_for(points, stall);
    o.forecast.max_future_points = 10;
    std::vector<std::pair<std::int64_t, std::int64_t>> gaps;  // (fitted step, first forecast step)
    o.forecaster = [&gaps](std::span<const CurvePoint> seen, const ForecastOptions& options) {
      Forecast f = forecast_curve(seen, options);
      gaps.emplace_back(seen.back().step, f.steps.front());
      return f;
    };
    OnlineScheduler s(o);
    std::size_t in_gaps = 0, reused_in_gaps = 0;
    for (const auto& p : points) {
      s.observe(p.step, p.loss, p.time_s + stall * static_cast<double>(s.published_steps().size()));
      const auto before = s.stats();
      s.should_publish(p.step);
      const auto after = s.stats();
      if (after.fits != before.fits || gaps.empty() || p.step <= o.warmup_step) continue;  // a refit's own decision
      if (p.step > gaps.back().first && p.step < gaps.back().second) {
        ++in_gaps;
        reused_in_gaps += after.plans_reused - before.plans_reused;
      }
    }
    ASSERT_GT(in_gaps, 100U) << "stall " << stall << ": the grid left no first gap to decide in";
    EXPECT_GT(reused_in_gaps, in_gaps / 5) << "stall " << stall << ": of " << in_gaps << " decisions in first gaps";
  }
}

TEST(OnlineDecisionCost, AClockThatDriftsFromTheForecastIsReplanned) {
  // The time residual is the one input whose direction says nothing about "publish now": once
  // it moves by more than the tolerance the plan is redone. With a zero tolerance and a clock
  // that runs ever further behind the forecast (the steps take three times as long from the
  // warm-up on), no plan can be reused.
  auto points = noisy_run(120, 3);
  for (std::size_t i = 24; i < points.size(); ++i) points[i].time_s += 4.0 * static_cast<double>(i - 23);
  auto o = options_for(points, 4.0);
  o.refit_growth = 10.0;  // one forecast for the whole run: its time model falls behind
  o.refit_band_points = 0;
  o.replan_time_tolerance = 0.0;
  OnlineScheduler strict(o);
  replay(strict, points, 4.0);
  EXPECT_EQ(strict.stats().plans_reused, 0U);
  o.replan_time_tolerance = 1e9;
  OnlineScheduler loose(o);
  replay(loose, points, 4.0);
  EXPECT_GT(loose.stats().plans_reused, 0U);
}

TEST(OnlineDecisionCost, RefitsOnAWorkerThreadAndTheNextDecisionUsesTheNewForecast) {
  const auto points = noisy_run(200, 11);
  std::mutex mutex;
  std::vector<std::thread::id> fit_threads;
  std::vector<std::int64_t> fitted_up_to;
  auto o = options_for(points, 4.0);
  o.work_mode = OnlineOptions::WorkMode::kRefitsInBackground;
  o.forecaster = [&](std::span<const CurvePoint> seen, const ForecastOptions& fo) {
    {
      std::lock_guard lock(mutex);
      fit_threads.push_back(std::this_thread::get_id());
      fitted_up_to.push_back(seen.back().step);
    }
    return forecast_curve(seen, fo);
  };
  OnlineScheduler s(o);
  std::size_t submitted = 0;
  for (const auto& p : points) {
    s.observe(p.step, p.loss, p.time_s + 4.0 * static_cast<double>(s.published_steps().size()));
    s.should_publish(p.step);
    if (!s.refit_in_flight()) continue;
    ++submitted;
    // The decision went on without the new forecast; once the worker is done, it is adopted.
    s.wait_for_background();
    EXPECT_FALSE(s.refit_in_flight());
    ASSERT_FALSE(s.last_forecast().steps.empty());
    EXPECT_GT(s.last_forecast().steps.front(), p.step) << "the forecast adopted is the one fitted up to this step";
  }
  std::lock_guard lock(mutex);
  ASSERT_GE(fit_threads.size(), 3U);
  EXPECT_EQ(fit_threads.front(), std::this_thread::get_id());  // the first forecast: nothing to decide on before it
  for (std::size_t i = 1; i < fit_threads.size(); ++i) {
    EXPECT_NE(fit_threads[i], std::this_thread::get_id()) << "fit " << i;
    EXPECT_GT(fitted_up_to[i], fitted_up_to[i - 1]);
  }
  EXPECT_EQ(submitted, fit_threads.size() - 1);
  EXPECT_EQ(s.stats().background_fits, submitted);
  EXPECT_EQ(s.stats().fits, fit_threads.size());
}

// A forecaster that knows the run: every refit returns the true rest of it.
std::function<Forecast(std::span<const CurvePoint>, const ForecastOptions&)> exact_forecaster(const std::vector<CurvePoint>& points) {
  return [&points](std::span<const CurvePoint> seen, const ForecastOptions&) {
    Forecast f;
    for (const auto& p : points) {
      if (p.step <= seen.back().step) continue;
      f.steps.push_back(p.step);
      f.loss.push_back(p.loss);
      f.lower.push_back(p.loss);
      f.upper.push_back(p.loss);
      f.time_s.push_back(p.time_s);
    }
    return f;
  };
}

TEST(OnlineDecisionCost, BackgroundDecisionsAnswerAheadAsAFreshPlanWould) {
  // Logged at a regular interval, every point arrives where the worker expected it, so each
  // decision compares the loss with the threshold prepared for it: the schedule must be the one
  // the inline scheduler plans point by point, with every plan made off the caller's thread.
  const auto points = noisy_run(120, 5);
  for (double stall : {1.0, 3.0, 8.0}) {
    auto o = options_for(points, stall);
    o.forecaster = exact_forecaster(points);
    OnlineScheduler inline_scheduler(o);
    const auto inline_steps = replay(inline_scheduler, points, stall);
    o.work_mode = OnlineOptions::WorkMode::kBackground;
    OnlineScheduler background(o);
    const auto background_steps = replay(background, points, stall, /*wait_each=*/true);
    ASSERT_FALSE(inline_steps.empty()) << "stall " << stall;
    EXPECT_EQ(background_steps, inline_steps) << "stall " << stall;
    EXPECT_GT(background.stats().answered_ahead, points.size() / 2) << "stall " << stall;
    EXPECT_EQ(background.stats().background_plans, background.stats().plans);
    EXPECT_EQ(inline_scheduler.stats().background_plans, 0U);
    EXPECT_GT(background.stats().worker_s, 0.0);
  }
}

TEST(OnlineDecisionCost, BackgroundThresholdsIncludeTheHindsightCheck) {
  // Two equally likely futures, as in OnlineScheduler.HindsightCheckWaitsForADropThatOnlySome-
  // ScenariosExpect: the loss keeps its slow fall, or it also drops by 0.9 at step 40 (what the
  // run does, and all the forecast expects once it has seen it). The plan on their mean would
  // publish early; the hindsight check defers that. The thresholds prepared in the background
  // must defer exactly where the inline scheduler does, and answer most decisions ahead.
  // (After step 39 the fall bends, so that no two schedules tie exactly, as on a straight line.)
  const auto slow = [](std::int64_t s) {
    return 2.0 - 0.02 * static_cast<double>(std::min<std::int64_t>(s, 39)) -
           0.1 * (1.0 - std::exp(-static_cast<double>(std::max<std::int64_t>(s - 39, 0)) / 15.0));
  };
  const auto dropped = [&](std::int64_t s) { return slow(s) - (s < 40 ? 0.0 : 0.9); };
  std::vector<CurvePoint> points;
  for (int s = 0; s <= 100; ++s) points.push_back({s, dropped(s), static_cast<double>(s)});
  const auto two_futures = [&](std::span<const CurvePoint> seen, const ForecastOptions& o) {
    Forecast f;
    ForecastMember stays{"stays", 0.5, std::nan(""), {}}, drops{"drops", 0.5, std::nan(""), {}};
    for (std::int64_t s = seen.back().step + 1; s <= o.total_steps; ++s) {
      f.steps.push_back(s);
      f.time_s.push_back(static_cast<double>(s));
      // Once the drop is seen, both futures are the run itself.
      stays.loss.push_back(seen.back().step < 40 ? slow(s) : dropped(s));
      drops.loss.push_back(dropped(s));
      f.loss.push_back(0.5 * (stays.loss.back() + drops.loss.back()));
      f.lower.push_back(drops.loss.back());
      f.upper.push_back(stays.loss.back());
    }
    f.members = {stays, drops};
    return f;
  };
  std::size_t deferred = 0;
  for (double stall : {1.0, 2.0, 4.0, 8.0}) {
    OnlineOptions o;
    o.forecast.total_steps = 100;
    o.costs.stall_s = stall;
    o.costs.delivery_s = 0.0;
    o.warmup_step = 10;
    o.refit_band_points = 0;
    o.refit_growth = 0.0;  // a forecast from every point, in both modes
    o.hedge_options.change_probability = 0.0;
    o.hedge_options.band_probability = 0.0;
    o.forecaster = two_futures;
    OnlineScheduler inline_scheduler(o);
    const auto inline_steps = replay(inline_scheduler, points, stall);
    o.work_mode = OnlineOptions::WorkMode::kBackground;
    OnlineScheduler background(o);
    const auto background_steps = replay(background, points, stall, /*wait_each=*/true);
    deferred += inline_scheduler.stats().deferred;
    EXPECT_EQ(background_steps, inline_steps) << "stall " << stall;
    EXPECT_GT(background.stats().answered_ahead, points.size() / 2) << "stall " << stall;
  }
  EXPECT_GE(deferred, 1U) << "the hindsight check never deferred a publish: the test tests nothing";
}

TEST(OnlineDecisionCost, APointWhereNoneWasExpectedActsOnThePlanOfThePointBefore) {
  // Logging intervals alternate (10 and 20 steps), so no point arrives where the one before it
  // expected the next: every decision acts on the plan made at the point before, and the first
  // publish comes exactly one point after the inline scheduler's.
  auto points = noisy_run(120, 8);
  std::int64_t step = 0;
  for (std::size_t i = 0; i < points.size(); ++i) {
    step += i % 2 == 0 ? 10 : 20;
    points[i].step = step;
  }
  auto o = options_for(points, 2.0);
  o.forecaster = exact_forecaster(points);
  OnlineScheduler inline_scheduler(o);
  const auto inline_steps = replay(inline_scheduler, points, 2.0);
  o.work_mode = OnlineOptions::WorkMode::kBackground;
  OnlineScheduler s(o);
  std::size_t late_publishes = 0;
  for (const auto& p : points) {
    s.observe(p.step, p.loss, p.time_s + 2.0 * static_cast<double>(s.published_steps().size()));
    const std::size_t late_before = s.stats().answered_late;
    if (s.should_publish(p.step)) {
      ++late_publishes;
      EXPECT_EQ(s.stats().answered_late, late_before + 1) << "a publish acts on the plan made at the point before";
    }
    s.wait_for_background();
  }
  EXPECT_EQ(s.stats().answered_ahead, 0U);
  ASSERT_FALSE(inline_steps.empty());
  ASSERT_GT(late_publishes, 0U);
  const auto first = std::find_if(points.begin(), points.end(), [&](const CurvePoint& p) { return p.step == inline_steps.front(); });
  ASSERT_NE(first + 1, points.end());
  EXPECT_EQ(s.published_steps().front(), (first + 1)->step);
}

TEST(OnlineDecisionCost, ShortLogsAreFittedAndPlannedInlineInEveryMode) {
  // Below refit_every_below points each new point changes the forecast most and fits are cheap:
  // a forecast one point behind there cost whole gains, so both background modes fit (and
  // kBackground plans) on the caller's thread until then, and on the workers after; the last
  // decision before prepares the first one after, which is then answered ahead.
  const auto points = noisy_run(60, 4);
  for (auto mode : {OnlineOptions::WorkMode::kRefitsInBackground, OnlineOptions::WorkMode::kBackground}) {
    std::mutex mutex;
    std::vector<std::pair<std::size_t, bool>> fits;  // points seen, on the caller's thread
    auto o = options_for(points, 2.0);
    o.warmup_step = points[4].step;
    o.refit_every_below = 20;
    o.work_mode = mode;
    const auto caller = std::this_thread::get_id();
    o.forecaster = [&](std::span<const CurvePoint> seen, const ForecastOptions& fo) {
      std::lock_guard lock(mutex);
      fits.emplace_back(seen.size(), std::this_thread::get_id() == caller);
      return forecast_curve(seen, fo);
    };
    OnlineScheduler s(o);
    std::size_t plans_inline = 0, background_plans_on_short_log = 0;
    for (std::size_t i = 0; i < points.size(); ++i) {
      const auto& p = points[i];
      s.observe(p.step, p.loss, p.time_s + 2.0 * static_cast<double>(s.published_steps().size()));
      const std::size_t background_before = s.stats().background_plans, plans_before = s.stats().plans;
      s.should_publish(p.step);
      s.wait_for_background();
      // The last decision on the short log (19 points) also prepares the first one after it.
      if (i + 1 < 19) {
        plans_inline += s.stats().plans - plans_before;
        background_plans_on_short_log += s.stats().background_plans - background_before;
      }
    }
    std::lock_guard lock(mutex);
    std::size_t on_worker = 0;
    for (const auto& [seen, on_caller] : fits) {
      EXPECT_EQ(on_caller, seen < 20) << "a fit of " << seen << " points";
      on_worker += on_caller ? 0 : 1;
    }
    EXPECT_GT(fits.size() - on_worker, 10U);
    EXPECT_GT(on_worker, 0U);
    EXPECT_GT(plans_inline, 0U);
    EXPECT_EQ(background_plans_on_short_log, 0U);
    if (mode == OnlineOptions::WorkMode::kBackground) {
      EXPECT_GT(s.stats().background_plans, 0U);
      EXPECT_EQ(s.stats().answered_late, 0U);
    }
  }
}

TEST(OnlineDecisionCost, AFitThatFailsOnTheWorkerIsReportedToTheCaller) {
  const auto points = noisy_run(60, 2);
  int calls = 0;  // touched by one thread at a time: the caller's first fit, then the worker's
  auto o = options_for(points, 2.0);
  o.work_mode = OnlineOptions::WorkMode::kRefitsInBackground;
  o.forecaster = [&calls](std::span<const CurvePoint> seen, const ForecastOptions& fo) {
    if (++calls == 2) throw std::runtime_error("forecaster failed");
    return forecast_curve(seen, fo);
  };
  o.refit_every_below = 0;  // the second fit on the worker, not inline on a short log
  OnlineScheduler s(o);
  bool thrown = false;
  for (const auto& p : points) {
    s.observe(p.step, p.loss, p.time_s);
    s.should_publish(p.step);
    if (!s.refit_in_flight()) continue;
    try {
      s.wait_for_background();
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "forecaster failed");
      thrown = true;
      break;
    }
  }
  EXPECT_TRUE(thrown);
  EXPECT_FALSE(s.refit_in_flight());
}

TEST(OnlineDecisionCost, RejectsABadTimeTolerance) {
  OnlineOptions o;
  o.forecast.total_steps = 1000;
  o.replan_time_tolerance = -0.5;
  EXPECT_THROW(OnlineScheduler{o}, modelcast::Error);
  o.replan_time_tolerance = std::nan("");
  EXPECT_THROW(OnlineScheduler{o}, modelcast::Error);
}

}  // namespace
}  // namespace modelcast::predictor
