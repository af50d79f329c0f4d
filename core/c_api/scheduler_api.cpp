// The C ABI's online publish scheduler (modelcast::predictor::OnlineScheduler).
#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <utility>

#include "core/c_api/c_boundary.h"
#include "modelcast/predictor_online.h"

struct mc_scheduler {
  modelcast::predictor::OnlineScheduler scheduler;
};

using namespace modelcast::c_api;

namespace {

// The fields as a C caller sets them, in the messages of the predictor's own cost check.
constexpr modelcast::predictor::PublishCostNames kCostNames{"", "options.publish_cost_s", "options.update_latency_s",
                                                            "options.request_rate", "options.window_s",
                                                            "options.max_slowdown_s"};

using WorkMode = modelcast::predictor::OnlineOptions::WorkMode;

WorkMode work_mode(int value) {
  switch (value) {
    case MC_SCHEDULER_INLINE:
      return WorkMode::kInline;
    case MC_SCHEDULER_REFITS_IN_BACKGROUND:
      return WorkMode::kRefitsInBackground;
    case MC_SCHEDULER_BACKGROUND:
      return WorkMode::kBackground;
  }
  invalid("options.work_mode is " + std::to_string(value) +
          ": use MC_SCHEDULER_INLINE (0), MC_SCHEDULER_REFITS_IN_BACKGROUND (1) or MC_SCHEDULER_BACKGROUND (2)");
}

}  // namespace

extern "C" {

// The name in parentheses: modelcast.h's macro of that name would expand here.
void (mc_scheduler_options_init)(mc_scheduler_options* options) {
  if (options == nullptr) return;
  const modelcast::predictor::OnlineOptions defaults;
  *options = mc_scheduler_options{};
  options->struct_size = sizeof(mc_scheduler_options);
  options->warmup_step = defaults.warmup_step;
  options->publish_cost_s = defaults.costs.stall_s;
  options->update_latency_s = defaults.costs.delivery_s;
  options->request_rate = defaults.costs.request_rate;
  options->window_s = defaults.costs.window_s;
  options->max_slowdown_s = defaults.costs.max_slowdown_s;
  options->refit_growth = defaults.refit_growth;
  options->refit_band_points = defaults.refit_band_points;
  options->refit_every_below = defaults.refit_every_below;
  options->max_candidates = defaults.max_candidates;
  options->work_mode = defaults.work_mode == WorkMode::kBackground            ? MC_SCHEDULER_BACKGROUND
                       : defaults.work_mode == WorkMode::kRefitsInBackground ? MC_SCHEDULER_REFITS_IN_BACKGROUND
                                                                             : MC_SCHEDULER_INLINE;
  options->loss_floor = defaults.forecast.loss_floor;
}

void mc_scheduler_options_init_sized(mc_scheduler_options* options, size_t size) {
  init_sized(options, size, &(mc_scheduler_options_init));
}

mc_status mc_scheduler_create(const mc_scheduler_options* options, mc_scheduler_t** out) {
  if (out != nullptr) *out = nullptr;
  return guarded(__func__, [&] {
    require(out, "out");
    require(options, "options");
    if (options->struct_size < kSchedulerOptionsV1) {
      invalid("options.struct_size is " + std::to_string(options->struct_size) +
              ": call mc_scheduler_options_init first");
    }
    if (options->total_steps <= 0) invalid("options.total_steps must be > 0 (the planned length of the run)");
    modelcast::predictor::OnlineOptions o;
    o.costs.stall_s = options->publish_cost_s;
    o.costs.delivery_s = options->update_latency_s;
    o.costs.request_rate = options->request_rate;
    o.costs.window_s = options->window_s;
    o.costs.max_slowdown_s = options->max_slowdown_s;
    modelcast::predictor::validate_costs(o.costs, kCostNames);
    if (!std::isfinite(options->refit_growth) || options->refit_growth < 0) {
      std::ostringstream why;
      why << "options.refit_growth must be finite and >= 0, got " << options->refit_growth;
      invalid(why.str());
    }
    // The scheduler's own bound: a plan weighs "now" and at least one future step.
    if (options->max_candidates < 2) invalid("options.max_candidates must be >= 2");
    o.forecast.total_steps = options->total_steps;
    o.warmup_step = options->warmup_step;
    o.refit_growth = options->refit_growth;
    o.refit_band_points = options->refit_band_points;
    o.refit_every_below = options->refit_every_below;
    o.max_candidates = options->max_candidates;
    if (has_field(*options, options->work_mode)) o.work_mode = work_mode(options->work_mode);
    if (has_field(*options, options->loss_floor)) {
      if (options->loss_floor == std::numeric_limits<double>::infinity())
        invalid("options.loss_floor must not be +infinity (NaN: from the losses; -INFINITY: none)");
      o.forecast.loss_floor = options->loss_floor;
    }
    *out = new mc_scheduler{modelcast::predictor::OnlineScheduler(std::move(o))};
    return MC_OK;
  });
}

void mc_scheduler_destroy(mc_scheduler_t* scheduler) {
  const CancelHeldOff held;  // the worker's destructor joins its thread
  try {
    delete scheduler;
  } catch (...) {
    // Destructors do not throw; nothing may cross the ABI regardless.
  }
}

mc_status mc_scheduler_observe(mc_scheduler_t* scheduler, int64_t step, double loss, double wall_time_s) {
  return guarded(__func__, [&] {
    require(scheduler, "scheduler");
    scheduler->scheduler.observe(step, loss, wall_time_s);
    return MC_OK;
  });
}

mc_status mc_scheduler_should_publish(mc_scheduler_t* scheduler, int64_t step, int* publish) {
  if (publish != nullptr) *publish = 0;
  return guarded(__func__, [&] {
    require(scheduler, "scheduler");
    require(publish, "publish");
    *publish = scheduler->scheduler.should_publish(step) ? 1 : 0;
    return MC_OK;
  });
}

mc_status mc_scheduler_wait_for_background(mc_scheduler_t* scheduler) {
  return guarded(__func__, [&] {
    require(scheduler, "scheduler");
    scheduler->scheduler.wait_for_background();
    return MC_OK;
  });
}

mc_status mc_scheduler_set_costs(mc_scheduler_t* scheduler, double publish_cost_s, double update_latency_s) {
  return guarded(__func__, [&] {
    require(scheduler, "scheduler");
    modelcast::predictor::PublishCosts costs;
    costs.stall_s = publish_cost_s;
    costs.delivery_s = update_latency_s;
    modelcast::predictor::validate_costs(costs, {.context = "", .stall_s = "publish_cost_s", .delivery_s = "update_latency_s"});
    scheduler->scheduler.set_costs(publish_cost_s, update_latency_s);
    return MC_OK;
  });
}

size_t mc_scheduler_publish_count(const mc_scheduler_t* scheduler) {
  return scheduler == nullptr ? 0 : scheduler->scheduler.published_steps().size();
}

mc_status mc_scheduler_published_steps(const mc_scheduler_t* scheduler, int64_t* steps, size_t capacity,
                                       size_t* count) {
  return guarded(__func__, [&] {
    require(scheduler, "scheduler");
    require(count, "count");
    if (capacity > 0) require(steps, "steps");
    const auto& published = scheduler->scheduler.published_steps();
    *count = published.size();
    for (std::size_t i = 0; i < published.size() && i < capacity; ++i) steps[i] = published[i];
    return MC_OK;
  });
}

}  // extern "C"
