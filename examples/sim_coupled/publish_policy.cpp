#include "publish_policy.h"

#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace sim_coupled {

namespace mp = modelcast::predictor;

namespace {
const char* const kNames[] = {"online", "every_epoch", "every_n", "viper_fixed", "viper_greedy"};
}

PolicyKind parse_policy(const std::string& name) {
  for (int i = 0; i < 5; ++i)
    if (name == kNames[i]) return static_cast<PolicyKind>(i);
  throw std::invalid_argument("unknown policy '" + name +
                              "' (expected online, every_epoch, every_n, viper_fixed or viper_greedy)");
}

std::string policy_name(PolicyKind kind) { return kNames[static_cast<int>(kind)]; }

mp::OnlineOptions::WorkMode parse_work_mode(const std::string& name) {
  if (name == "inline") return mp::OnlineOptions::WorkMode::kInline;
  if (name == "refits_in_background") return mp::OnlineOptions::WorkMode::kRefitsInBackground;
  if (name == "background") return mp::OnlineOptions::WorkMode::kBackground;
  throw std::invalid_argument("unknown work mode '" + name + "' (expected inline, refits_in_background or background)");
}

PublishPolicy::PublishPolicy(const PolicySettings& settings) : settings_(settings) {
  if (settings.total_steps <= 0) throw std::invalid_argument("total_steps must be > 0");
  if (settings.eval_every <= 0) throw std::invalid_argument("eval_every must be > 0");
  if (settings.warmup_step <= 0 || settings.warmup_step >= settings.total_steps ||
      settings.warmup_step % settings.eval_every != 0)
    throw std::invalid_argument("warm-up step " + std::to_string(settings.warmup_step) +
                                " must be an evaluation step inside the run");
  if (settings.kind == PolicyKind::kEveryEpoch && settings.epoch_steps <= 0)
    throw std::invalid_argument("every_epoch needs epoch_steps > 0");
  if (settings.kind == PolicyKind::kEveryN && settings.every_n <= 0)
    throw std::invalid_argument("every_n needs n > 0");
  if (!(settings.request_rate > 0) || !(settings.window_s > 0))
    throw std::invalid_argument("request rate and window must be > 0");
  if (settings.kind == PolicyKind::kOnline) {
    mp::OnlineOptions options;
    options.forecast.total_steps = settings.total_steps;
    options.warmup_step = settings.warmup_step;
    options.costs.request_rate = settings.request_rate;
    options.costs.window_s = settings.window_s;
    options.work_mode = settings.work_mode;
    online_ = std::make_unique<mp::OnlineScheduler>(options);
  }
}

PublishPolicy::~PublishPolicy() = default;

void PublishPolicy::observe(std::int64_t step, double loss, double time_s) {
  // A diverged evaluation (NaN, inf) is no point of the curve: the online scheduler refuses it
  // (an exception out of the training loop: the trainer stopped, where every other policy
  // trained on), and every forecaster would. Left out, said once; training goes on.
  if (!std::isfinite(loss)) {
    if (nonfinite_++ == 0) {
      std::fprintf(stderr, "publish policy: the evaluation at step %lld gave a loss of %g: left out of the "
                           "forecasts (said once; counted as nonfinite_evaluations)\n",
                   static_cast<long long>(step), loss);
    }
    last_left_out_ = step;
    return;
  }
  log_.push_back({step, loss, time_s});
  if (online_) online_->observe(step, loss, time_s);
}

void PublishPolicy::start_serving(double stall_s, double delivery_s) {
  update_costs(stall_s, delivery_s);
  if (settings_.kind != PolicyKind::kViperFixed && settings_.kind != PolicyKind::kViperGreedy) return;
  // Viper forecasts the rest of the run once, at warm-up, on the evaluation steps to come, and
  // plans its rule on that forecast with the costs measured by the warm-up publish.
  mp::ForecastOptions forecast_options;
  forecast_options.total_steps = settings_.total_steps;
  for (std::int64_t s = log_.back().step + settings_.eval_every; s < settings_.total_steps; s += settings_.eval_every)
    forecast_options.future_steps.push_back(s);
  forecast_options.future_steps.push_back(settings_.total_steps);
  const mp::Forecast forecast = mp::forecast_viper(log_, forecast_options);
  const mp::Trajectory predicted = mp::extend_with_forecast(log_, forecast);
  mp::PublishCosts costs;
  costs.stall_s = stall_s;
  costs.delivery_s = delivery_s;
  costs.request_rate = settings_.request_rate;
  costs.window_s = settings_.window_s;
  const std::size_t warmup_index = log_.size() - 1;
  const mp::ViperSchedule schedule = settings_.kind == PolicyKind::kViperFixed
                                        ? mp::viper_fixed_interval(predicted, warmup_index, costs)
                                        : mp::viper_greedy(predicted, warmup_index, costs);
  viper_plan_ = schedule.publish_steps;
  viper_reason_ = schedule.reason + " (forecast: " + forecast.note + ")";
  viper_pending_ = {viper_plan_.begin(), viper_plan_.end()};
}

bool PublishPolicy::should_publish(std::int64_t step, bool evaluated) {
  if (step <= settings_.warmup_step) return false;
  evaluated = evaluated && last_left_out_ != step;  // what observe() left out was not evaluated
  switch (settings_.kind) {
    case PolicyKind::kOnline:
      return evaluated && online_->should_publish(step);
    case PolicyKind::kEveryEpoch:
      return step % settings_.epoch_steps == 0;
    case PolicyKind::kEveryN:
      return step % settings_.every_n == 0;
    case PolicyKind::kViperFixed:
    case PolicyKind::kViperGreedy:
      return evaluated && viper_pending_.erase(step) > 0;
  }
  return false;
}

mp::OnlineStats PublishPolicy::online_stats() const { return online_ ? online_->stats() : mp::OnlineStats{}; }

void PublishPolicy::settle() {
  if (online_) online_->wait_for_background();
}

void PublishPolicy::update_costs(double stall_s, double delivery_s) {
  if (online_) online_->set_costs(stall_s, delivery_s);
}

}  // namespace sim_coupled
