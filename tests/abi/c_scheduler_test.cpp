// The C ABI's online scheduler decides exactly as the C++ OnlineScheduler it wraps, for the
// same options: every field of mc_scheduler_options reaches the scheduler.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <cstddef>
#include <string>
#include <cstdint>
#include <vector>

#include "modelcast/modelcast.h"
#include "modelcast/predictor_online.h"

namespace {

struct Point {
  std::int64_t step;
  double loss, time_s;
};

// A noisy power-law curve with a late drop: enough structure that costs and window matter.
std::vector<Point> curve() {
  std::vector<Point> points;
  for (std::int64_t step = 50; step <= 4000; step += 50) {
    const double s = static_cast<double>(step);
    const double drop = step > 3200 ? 0.4 * (s - 3200) / 800 : 0.0;
    points.push_back({step, 2.5 + 6.0 * std::pow(s / 100.0, -0.6) - drop + 0.01 * std::sin(s), 0.4 * s});
  }
  return points;
}

std::vector<std::int64_t> run_c(const mc_scheduler_options& options) {
  mc_scheduler_t* scheduler = nullptr;
  EXPECT_EQ(mc_scheduler_create(&options, &scheduler), MC_OK) << mc_last_error();
  std::vector<std::int64_t> steps;
  double stalls = 0;
  for (const auto& p : curve()) {
    EXPECT_EQ(mc_scheduler_observe(scheduler, p.step, p.loss, p.time_s + stalls), MC_OK) << mc_last_error();
    int publish = 0;
    EXPECT_EQ(mc_scheduler_should_publish(scheduler, p.step, &publish), MC_OK) << mc_last_error();
    if (publish) {
      steps.push_back(p.step);
      stalls += options.publish_cost_s;
    }
    EXPECT_EQ(mc_scheduler_wait_for_background(scheduler), MC_OK) << mc_last_error();
  }
  mc_scheduler_destroy(scheduler);
  return steps;
}

std::vector<std::int64_t> run_cpp(const mc_scheduler_options& c) {
  modelcast::predictor::OnlineOptions o;
  o.forecast.total_steps = c.total_steps;
  o.warmup_step = c.warmup_step;
  o.costs.stall_s = c.publish_cost_s;
  o.costs.delivery_s = c.update_latency_s;
  o.costs.request_rate = c.request_rate;
  o.costs.window_s = c.window_s;
  o.costs.max_slowdown_s = c.max_slowdown_s;
  o.refit_growth = c.refit_growth;
  o.refit_band_points = c.refit_band_points;
  o.refit_every_below = c.refit_every_below;
  o.max_candidates = c.max_candidates;
  o.forecast.loss_floor = c.loss_floor;
  using WorkMode = modelcast::predictor::OnlineOptions::WorkMode;
  o.work_mode = c.work_mode == MC_SCHEDULER_BACKGROUND            ? WorkMode::kBackground
                : c.work_mode == MC_SCHEDULER_REFITS_IN_BACKGROUND ? WorkMode::kRefitsInBackground
                                                                  : WorkMode::kInline;
  modelcast::predictor::OnlineScheduler scheduler(o);
  double stalls = 0;
  for (const auto& p : curve()) {
    scheduler.observe(p.step, p.loss, p.time_s + stalls);
    if (scheduler.should_publish(p.step)) stalls += c.publish_cost_s;
    scheduler.wait_for_background();
  }
  return scheduler.published_steps();
}

TEST(CScheduler, DecidesAsTheCppSchedulerForEveryOption) {
  mc_scheduler_options base;
  mc_scheduler_options_init(&base);
  base.total_steps = 4000;
  base.warmup_step = 600;
  base.publish_cost_s = 20;
  base.update_latency_s = 10;
  std::vector<mc_scheduler_options> variants(10, base);
  variants[1].publish_cost_s = 120;
  variants[2].request_rate = 0.01;
  variants[3].max_slowdown_s = 40;
  variants[4].window_s = 400;
  variants[5].refit_growth = 0;
  variants[5].max_candidates = 8;
  variants[6].work_mode = MC_SCHEDULER_REFITS_IN_BACKGROUND;
  variants[7].work_mode = MC_SCHEDULER_BACKGROUND;
  variants[8].loss_floor = -std::numeric_limits<double>::infinity();
  variants[9].loss_floor = 1.9;  // the curve ends near 2.0
  std::vector<std::vector<std::int64_t>> seen;
  for (const auto& options : variants) {
    const auto c = run_c(options);
    EXPECT_EQ(c, run_cpp(options));
    seen.push_back(c);
  }
  // The options change the decisions, so agreement above is not agreement on a constant.
  EXPECT_NE(seen[0], seen[1]);
  EXPECT_NE(seen[0], seen[9]);  // the floor is read
  EXPECT_LE(seen[3].size(), 2u);  // 40 s of slowdown at 20 s per publish
}

// The work mode is read, checked, and ignored where the caller's struct predates it.
TEST(CScheduler, AnUnknownWorkModeIsRefusedNamingTheFieldUnlessTheStructPredatesIt) {
  mc_scheduler_options options;
  mc_scheduler_options_init(&options);
  EXPECT_EQ(options.work_mode, MC_SCHEDULER_INLINE);
  options.total_steps = 1000;
  options.work_mode = 7;
  mc_scheduler_t* scheduler = nullptr;
  EXPECT_EQ(mc_scheduler_create(&options, &scheduler), MC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(scheduler, nullptr);
  EXPECT_NE(std::string(mc_last_error()).find("options.work_mode is 7"), std::string::npos) << mc_last_error();
  options.struct_size = offsetof(mc_scheduler_options, work_mode);  // a caller built before the field
  ASSERT_EQ(mc_scheduler_create(&options, &scheduler), MC_OK) << mc_last_error();
  mc_scheduler_destroy(scheduler);
  EXPECT_EQ(mc_scheduler_wait_for_background(nullptr), MC_ERR_INVALID_ARGUMENT);
}

TEST(CScheduler, ALossFloorOfPlusInfinityIsRefusedNamingTheFieldUnlessTheStructPredatesIt) {
  mc_scheduler_options options;
  mc_scheduler_options_init(&options);
  EXPECT_TRUE(std::isnan(options.loss_floor));
  options.total_steps = 1000;
  options.loss_floor = std::numeric_limits<double>::infinity();
  mc_scheduler_t* scheduler = nullptr;
  EXPECT_EQ(mc_scheduler_create(&options, &scheduler), MC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(mc_last_error()).find("options.loss_floor must not be +infinity"), std::string::npos) << mc_last_error();
  options.struct_size = offsetof(mc_scheduler_options, loss_floor);  // a caller built before the field
  ASSERT_EQ(mc_scheduler_create(&options, &scheduler), MC_OK) << mc_last_error();
  mc_scheduler_destroy(scheduler);
  // A loss below a stated floor is refused at observe, naming it.
  options.struct_size = sizeof options;
  options.loss_floor = 2.0;
  ASSERT_EQ(mc_scheduler_create(&options, &scheduler), MC_OK) << mc_last_error();
  EXPECT_EQ(mc_scheduler_observe(scheduler, 10, 1.5, 1.0), MC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(mc_last_error()).find("below the stated loss_floor"), std::string::npos) << mc_last_error();
  EXPECT_EQ(mc_scheduler_observe(scheduler, 10, 2.5, 1.0), MC_OK) << mc_last_error();
  mc_scheduler_destroy(scheduler);
}

// The defaults are the C++ scheduler's, and the C checks are its bounds, named as the C caller
// set them (max_candidates 1 once passed the C check and failed in C++ without naming the field).
TEST(CScheduler, DefaultsAndBoundsAreTheCppSchedulersNamedByField) {
  mc_scheduler_options options;
  mc_scheduler_options_init(&options);
  const modelcast::predictor::OnlineOptions cpp;
  EXPECT_EQ(options.refit_band_points, cpp.refit_band_points);
  EXPECT_EQ(options.max_candidates, cpp.max_candidates);
  options.total_steps = 1000;
  auto refused = [&](mc_scheduler_options bad, const std::string& words) {
    mc_scheduler_t* scheduler = nullptr;
    EXPECT_EQ(mc_scheduler_create(&bad, &scheduler), MC_ERR_INVALID_ARGUMENT) << words;
    EXPECT_EQ(scheduler, nullptr);
    EXPECT_NE(std::string(mc_last_error()).find(words), std::string::npos) << mc_last_error();
  };
  mc_scheduler_options bad = options;
  bad.max_candidates = 1;
  refused(bad, "options.max_candidates must be >= 2");
  bad = options;
  bad.request_rate = std::nan("");
  refused(bad, "options.request_rate must be finite and > 0");
  bad = options;
  bad.window_s = -1;
  refused(bad, "options.window_s must be finite and > 0");
  bad.window_s = 0;  // an empty window scores every schedule at 0
  refused(bad, "options.window_s must be finite and > 0");
  bad = options;
  bad.max_slowdown_s = -1;
  refused(bad, "options.max_slowdown_s must be >= 0");
  bad = options;
  bad.refit_growth = std::numeric_limits<double>::infinity();  // it said "must be >= 0"
  refused(bad, "options.refit_growth must be finite and >= 0, got inf");
  options.max_candidates = 2;
  mc_scheduler_t* scheduler = nullptr;
  ASSERT_EQ(mc_scheduler_create(&options, &scheduler), MC_OK) << mc_last_error();
  mc_scheduler_destroy(scheduler);
}

}  // namespace
