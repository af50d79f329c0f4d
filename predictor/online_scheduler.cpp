#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "modelcast/predictor_online.h"

namespace modelcast::predictor {

OnlineScheduler::OnlineScheduler(OnlineOptions options) : options_(std::move(options)) {
  if (options_.forecast.total_steps <= 0) throw std::invalid_argument("online scheduler: total_steps must be positive");
  if (options_.warmup_step < 0 || options_.warmup_step >= options_.forecast.total_steps)
    throw std::invalid_argument("online scheduler: warm-up step must be in [0, total_steps)");
  if (options_.max_candidates < 2) throw std::invalid_argument("online scheduler: max_candidates must be >= 2");
  set_costs(options_.costs.stall_s, options_.costs.delivery_s);
}

void OnlineScheduler::set_costs(double stall_s, double delivery_s) {
  if (!std::isfinite(stall_s) || stall_s < 0 || !std::isfinite(delivery_s) || delivery_s < 0)
    throw std::invalid_argument("online scheduler: stall and delivery times must be finite and >= 0");
  options_.costs.stall_s = stall_s;
  options_.costs.delivery_s = delivery_s;
  planned_next_publish_ = -1;  // costs changed: the cached plan is stale
}

void OnlineScheduler::observe(std::int64_t step, double loss, double wall_time_s) {
  if (!std::isfinite(loss) || !std::isfinite(wall_time_s))
    throw std::invalid_argument("online scheduler: non-finite loss or time at step " + std::to_string(step));
  if (!observed_.empty() && step <= observed_.back().step)
    throw std::invalid_argument("online scheduler: step " + std::to_string(step) + " is not after step " +
                                std::to_string(observed_.back().step));
  // Work on the stall-free training clock, as the forecast's time model expects.
  observed_.push_back({step, loss, wall_time_s - stall_total_s_});
  if (step == options_.warmup_step || (std::isnan(warmup_time_s_) && step > options_.warmup_step)) {
    warmup_time_s_ = observed_.back().time_s;
    origin_loss_ = loss;
    origin_servable_s_ = wall_time_s;
  }
}

bool OnlineScheduler::refit_if_due() {
  const std::size_t n = observed_.size();
  const auto due = std::max<std::size_t>(points_at_last_fit_ + 1,
                                         static_cast<std::size_t>(std::ceil(static_cast<double>(points_at_last_fit_) * (1.0 + options_.refit_growth))));
  if (!forecast_.steps.empty() && n < due) return false;
  forecast_ = options_.forecaster ? options_.forecaster(observed_, options_.forecast)
                                  : forecast_curve(observed_, options_.forecast);
  points_at_last_fit_ = n;
  return true;
}

bool OnlineScheduler::should_publish(std::int64_t step) {
  if (observed_.empty() || observed_.back().step != step)
    throw std::invalid_argument("online scheduler: should_publish(" + std::to_string(step) +
                                ") must follow observe() of the same step");
  if (std::isnan(warmup_time_s_) || step <= options_.warmup_step) return false;
  const auto& now = observed_.back();
  const double now_wall = now.time_s + stall_total_s_;

  // Candidates on the producer's clock: now, then the forecast's future steps.
  Trajectory future;
  future.steps.push_back(now.step);
  future.loss.push_back(now.loss);
  future.time_s.push_back(now_wall);
  double predicted_end = now.time_s;
  if (step < options_.forecast.total_steps) {
    const bool refitted = refit_if_due();
    if (!refitted && planned_next_publish_ > step) return false;
    for (std::size_t i = 0; i < forecast_.steps.size(); ++i) {
      if (forecast_.steps[i] <= step) continue;
      future.steps.push_back(forecast_.steps[i]);
      future.loss.push_back(forecast_.loss[i]);
      future.time_s.push_back(std::max(forecast_.time_s[i] + stall_total_s_, future.time_s.back()));
    }
    if (!forecast_.time_s.empty()) predicted_end = std::max(predicted_end, forecast_.time_s.back());
  }
  // Thin very long horizons evenly, always keeping "now" and the last step.
  const auto limit = static_cast<std::size_t>(options_.max_candidates);
  if (future.steps.size() > limit) {
    Trajectory thin;
    for (std::size_t k = 0; k < limit; ++k) {
      const auto i = static_cast<std::size_t>(std::llround(static_cast<double>(k) * static_cast<double>(future.steps.size() - 1) / static_cast<double>(limit - 1)));
      if (!thin.steps.empty() && future.steps[i] == thin.steps.back()) continue;
      thin.steps.push_back(future.steps[i]);
      thin.loss.push_back(future.loss[i]);
      thin.time_s.push_back(future.time_s[i]);
    }
    future = std::move(thin);
  }
  const double window = std::isfinite(options_.costs.window_s) ? options_.costs.window_s : predicted_end - warmup_time_s_;
  const double window_end = warmup_time_s_ + window;  // producer clock: no stall before W
  const auto plan = plan_from(origin_loss_, origin_servable_s_, static_cast<int>(published_.size()), window_end,
                              future, options_.costs);
  planned_next_publish_ = plan.publish_steps.empty() ? std::numeric_limits<std::int64_t>::max() : plan.publish_steps.front();
  if (plan.publish_steps.empty() || plan.publish_steps.front() != step) return false;
  planned_next_publish_ = -1;  // re-plan at the next step: the state changed
  published_.push_back(step);
  origin_loss_ = now.loss;
  origin_servable_s_ = now_wall + options_.costs.stall_s + options_.costs.delivery_s;
  stall_total_s_ += options_.costs.stall_s;
  return true;
}

}  // namespace modelcast::predictor
