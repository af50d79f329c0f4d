#include <algorithm>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>

#include "modelcast/predictor_online.h"
#include "modelcast/error.h"
#include "online_refit_worker.h"

namespace modelcast::predictor {
namespace {
constexpr std::size_t kNow = static_cast<std::size_t>(-1);  // the "publish now" candidate
}  // namespace

OnlineScheduler::OnlineScheduler(OnlineOptions options) : options_(std::move(options)) {
  if (options_.forecast.total_steps <= 0) throw Error(ErrorCode::kInvalidArgument, "online scheduler: total_steps must be positive");
  if (options_.warmup_step < 0 || options_.warmup_step >= options_.forecast.total_steps)
    throw Error(ErrorCode::kInvalidArgument, "online scheduler: warm-up step must be in [0, total_steps)");
  if (options_.max_candidates < 2) throw Error(ErrorCode::kInvalidArgument, "online scheduler: max_candidates must be >= 2");
  if (!std::isfinite(options_.refit_growth) || options_.refit_growth < 0 || options_.refit_band_points < 0 ||
      options_.refit_every_below < 0)
    throw Error(ErrorCode::kInvalidArgument, "online scheduler: refit_growth, refit_band_points and refit_every_below must be >= 0");
  if (!std::isfinite(options_.replan_time_tolerance) || options_.replan_time_tolerance < 0)
    throw Error(ErrorCode::kInvalidArgument, "online scheduler: replan_time_tolerance must be finite and >= 0, got " +
                                                 std::to_string(options_.replan_time_tolerance));
  if (options_.refit_mode != OnlineOptions::RefitMode::kInline && options_.refit_mode != OnlineOptions::RefitMode::kBackground)
    throw Error(ErrorCode::kInvalidArgument, "online scheduler: unknown refit_mode");
  if (!std::isfinite(options_.band_trigger_width) || options_.band_trigger_width <= 0)
    throw Error(ErrorCode::kInvalidArgument, "online scheduler: band_trigger_width must be finite and > 0, got " +
                                                 std::to_string(options_.band_trigger_width));
  if (options_.hedge) hedge_forecast(std::vector<CurvePoint>{{0, 1.0, 0.0}}, Forecast{}, options_.hedge_options);  // checks the options
  set_costs(options_.costs.stall_s, options_.costs.delivery_s);
}

OnlineScheduler::~OnlineScheduler() = default;
OnlineScheduler::OnlineScheduler(OnlineScheduler&&) noexcept = default;
OnlineScheduler& OnlineScheduler::operator=(OnlineScheduler&&) noexcept = default;

void OnlineScheduler::set_costs(double stall_s, double delivery_s) {
  if (!std::isfinite(stall_s) || stall_s < 0 || !std::isfinite(delivery_s) || delivery_s < 0)
    throw Error(ErrorCode::kInvalidArgument, "online scheduler: stall and delivery times must be finite and >= 0");
  if (stall_s != options_.costs.stall_s || delivery_s != options_.costs.delivery_s) ++forecast_version_;  // re-plan
  options_.costs.stall_s = stall_s;
  options_.costs.delivery_s = delivery_s;
}

OnlineScheduler::Fitted OnlineScheduler::fit(std::span<const CurvePoint> regime, const OnlineOptions& options) {
  Forecast raw = options.forecaster ? options.forecaster(regime, options.forecast) : forecast_curve(regime, options.forecast);
  Fitted out;
  if (options.hedge) {
    auto hedged = hedge_forecast(regime, raw, options.hedge_options);
    out.forecast = std::move(hedged.forecast);
    if (hedged.hedged) out.scenarios = std::move(hedged.scenarios);
  } else {
    out.forecast = std::move(raw);
  }
  return out;
}

void OnlineScheduler::adopt(Fitted fitted) {
  forecast_ = std::move(fitted.forecast);
  scenarios_ = std::move(fitted.scenarios);
  ++forecast_version_;
  ++stats_.fits;
}

void OnlineScheduler::wait_for_refit() {
  if (!refit_in_flight_) return;
  refit_in_flight_ = false;  // also when the fit threw: the next due refit starts a new one
  adopt(worker_->wait());
  ++stats_.background_fits;
}

void OnlineScheduler::observe(std::int64_t step, double loss, double wall_time_s) {
  if (!std::isfinite(loss) || !std::isfinite(wall_time_s))
    throw Error(ErrorCode::kInvalidArgument, "online scheduler: non-finite loss or time at step " + std::to_string(step));
  if (!observed_.empty() && step <= observed_.back().step)
    throw Error(ErrorCode::kInvalidArgument, "online scheduler: step " + std::to_string(step) + " is not after step " +
                                std::to_string(observed_.back().step));
  // Work on the stall-free training clock, as the forecast's time model expects.
  observed_.push_back({step, loss, wall_time_s - stall_total_s_});
  if (step == options_.warmup_step || (std::isnan(warmup_time_s_) && step > options_.warmup_step)) {
    warmup_time_s_ = observed_.back().time_s;
    origin_loss_ = loss;
    origin_servable_s_ = wall_time_s;
  }
}

std::size_t OnlineScheduler::band_points() const {
  // On long per-step logs one point says little: compare one fit bin's mean instead.
  const std::size_t bin = options_.forecast.max_fit_points > 0
                              ? observed_.size() / static_cast<std::size_t>(options_.forecast.max_fit_points)
                              : 0;
  return std::max(static_cast<std::size_t>(options_.refit_band_points), bin);
}

bool OnlineScheduler::left_band(double* first_half_width) const {
  if (options_.refit_band_points == 0 || forecast_.steps.empty()) return false;
  const std::size_t k = band_points();
  if (observed_.size() < points_at_last_fit_ + k) return false;
  if (forecast_.lower.size() != forecast_.steps.size() || forecast_.upper.size() != forecast_.steps.size())
    return false;  // a custom forecaster without a band
  // Residuals against the band's centre (the point forecast; the hedged loss sits below it),
  // in units of the widened half-width.
  std::vector<double> z;
  for (std::size_t j = observed_.size() - k; j < observed_.size(); ++j) {
    const auto& p = observed_[j];
    const auto it = std::lower_bound(forecast_.steps.begin(), forecast_.steps.end(), p.step);
    if (it == forecast_.steps.end()) return false;  // past the forecast horizon: nothing to compare
    const auto i = static_cast<std::size_t>(it - forecast_.steps.begin());
    double lo = forecast_.lower[i], hi = forecast_.upper[i];
    if (*it != p.step && i > 0) {  // between two forecast steps: interpolate the band
      const double f = static_cast<double>(p.step - forecast_.steps[i - 1]) /
                       static_cast<double>(forecast_.steps[i] - forecast_.steps[i - 1]);
      lo = forecast_.lower[i - 1] + f * (lo - forecast_.lower[i - 1]);
      hi = forecast_.upper[i - 1] + f * (hi - forecast_.upper[i - 1]);
    }
    const double half = 0.5 * (hi - lo) * options_.band_trigger_width;
    if (!(half > 0)) return false;  // a forecast declared certain has no band to leave
    if (z.empty() && first_half_width) *first_half_width = half;
    z.push_back((p.loss - 0.5 * (lo + hi)) / half);
  }
  if (k > static_cast<std::size_t>(options_.refit_band_points)) {  // bin mean on long logs
    double mean = 0.0;
    for (double v : z) mean += v / static_cast<double>(z.size());
    return std::abs(mean) > 1.0;
  }
  return std::all_of(z.begin(), z.end(), [](double v) { return v > 1.0; }) ||
         std::all_of(z.begin(), z.end(), [](double v) { return v < -1.0; });
}

void OnlineScheduler::refit_if_due() {
  if (refit_in_flight_) {
    // A new forecast is coming: no refit is due on the old one, and its band says little now.
    std::optional<Fitted> done;
    try {
      done = worker_->take();
    } catch (...) {
      refit_in_flight_ = false;
      throw;
    }
    if (!done) return;
    refit_in_flight_ = false;
    adopt(std::move(*done));
    ++stats_.background_fits;
  }
  const std::size_t n = observed_.size();
  // Growth is counted within the current regime.
  const std::size_t seen = points_at_last_fit_ - std::min(points_at_last_fit_, fit_from_);
  bool due = forecast_.steps.empty() || n < static_cast<std::size_t>(options_.refit_every_below);
  due = due || n - fit_from_ >= std::max<std::size_t>(seen + 1, static_cast<std::size_t>(std::ceil(static_cast<double>(seen) *
                                                                                                    (1.0 + options_.refit_growth))));
  // A regime change: the newest points left the band, and the departure began with a jump
  // larger than the widened band (new data, a shift, a sudden drop or rise). The points before
  // the jump no longer describe the curve. A gradual departure is left to the geometric
  // schedule: on the development curves refitting early on it made decisions worse.
  double half_width = 0.0;
  bool band = !forecast_.steps.empty() && left_band(&half_width);
  const std::size_t change = n - std::min(n, band_points());
  band = band && change > fit_from_ && std::abs(observed_[change].loss - observed_[change - 1].loss) > half_width;
  if (n <= points_at_last_fit_ || !(due || band)) return;
  if (band) {
    fit_from_ = change;
    ++stats_.band_refits;
  }
  const std::span<const CurvePoint> regime(observed_.data() + fit_from_, n - fit_from_);
  points_at_last_fit_ = n;
  if (options_.refit_mode == OnlineOptions::RefitMode::kBackground && !forecast_.steps.empty()) {
    if (!worker_) worker_ = std::make_unique<RefitWorker>(options_);
    worker_->submit({regime.begin(), regime.end()});
    refit_in_flight_ = true;
    return;
  }
  adopt(fit(regime, options_));
}

bool OnlineScheduler::previous_plan_holds(std::int64_t step, double loss_shift, double time_shift) const {
  if (!options_.reuse_plans || !memo_.valid || memo_.forecast_version != forecast_version_ ||
      memo_.published != published_.size() || observed_.size() < 2)
    return false;
  // Why the last plan's "wait" still holds: it was optimal over every schedule from its step on,
  // which include every schedule from this step on (none publishes in between), on the same
  // forecast shifted by its loss residual. Lowering the whole future (now included) by the same
  // amount favours the schedule that publishes first, so only a newest point lower than the
  // plan's anchor can make "publish now" the better move; one at or above it cannot. The plan's
  // first publish must also lie beyond the next forecast step, so that a planned publish is
  // always decided by a fresh plan. The argument is exact when "now" is a forecast step (then it
  // was one of the plan's candidates) and the horizon is not thinned (max_candidates); between
  // two forecast steps it is not, and the tests check that decisions stay the same there.
  const auto next = std::upper_bound(forecast_.steps.begin(), forecast_.steps.end(), step);
  if (next == forecast_.steps.end()) return false;
  if (memo_.publishes && memo_.first_publish <= *next) return false;
  if (loss_shift < memo_.loss_shift) return false;
  // A shifted clock moves every candidate and, unless the window is fixed, its end alike; with
  // a fixed window it does not, so the time residual must stay close to the plan's.
  const double interval = observed_.back().time_s - observed_[observed_.size() - 2].time_s;
  return std::abs(time_shift - memo_.time_shift) <= options_.replan_time_tolerance * interval;
}

bool OnlineScheduler::waiting_pays(const Trajectory& future, const std::vector<std::size_t>& source, double loss_shift,
                                   double window_end) const {
  // Hindsight check: in each scenario, the best the run can still do if it publishes now, and
  // if it waits (and then, having seen more, follows that scenario's best plan). Waiting keeps
  // the option to publish when the loss has really dropped; the mean-path plan alone does not
  // value that option, and at a high publish cost spends its few publishes too early.
  const auto& costs = options_.costs;
  const double s_now = future.time_s[0] + costs.stall_s + costs.delivery_s;
  const int done = static_cast<int>(published_.size());
  double publish_now = 0.0, wait = 0.0;
  Trajectory rest, rest_after_stall;
  for (const auto& scenario : scenarios_) {
    rest.steps.assign(future.steps.begin() + 1, future.steps.end());
    rest.time_s.assign(future.time_s.begin() + 1, future.time_s.end());
    rest.loss.clear();
    for (std::size_t k = 1; k < source.size(); ++k) rest.loss.push_back(scenario.loss[source[k]] + loss_shift);
    rest_after_stall = rest;
    for (double& t : rest_after_stall.time_s) t += costs.stall_s;  // publishing now delays every later step
    const double served_until_now = origin_loss_ * std::max(0.0, s_now - origin_servable_s_);
    wait += scenario.weight * plan_from(origin_loss_, origin_servable_s_, done, window_end, rest, costs).cil;
    publish_now += scenario.weight * (costs.request_rate * served_until_now +
                                      plan_from(future.loss[0], s_now, done + 1, window_end, rest_after_stall, costs).cil);
  }
  return wait < publish_now;
}

bool OnlineScheduler::should_publish(std::int64_t step) {
  if (observed_.empty() || observed_.back().step != step)
    throw Error(ErrorCode::kInvalidArgument, "online scheduler: should_publish(" + std::to_string(step) +
                                ") must follow observe() of the same step");
  if (std::isnan(warmup_time_s_) || step <= options_.warmup_step) return false;
  const auto& now = observed_.back();
  const double now_wall = now.time_s + stall_total_s_;

  // Candidates on the producer's clock: now, then the forecast's future steps.
  Trajectory future;
  std::vector<std::size_t> source = {kNow};  // forecast index of each candidate
  future.steps.push_back(now.step);
  future.loss.push_back(now.loss);
  future.time_s.push_back(now_wall);
  double predicted_end = now.time_s;
  double loss_shift = 0.0, time_shift = 0.0;
  bool anchored = false;  // the residuals were measured (the step lies within the forecast)
  if (step < options_.forecast.total_steps) {
    refit_if_due();
    // Between refits the forecast was made from an older prefix: anchor it on the newest point
    // (shift its loss and time by their residuals here), so that "publish now" is weighed
    // against a future that continues from where the run actually is.
    const auto it = std::lower_bound(forecast_.steps.begin(), forecast_.steps.end(), step);
    if (it != forecast_.steps.end() && (*it == step || it != forecast_.steps.begin())) {
      const auto i = static_cast<std::size_t>(it - forecast_.steps.begin());
      const std::size_t j = *it == step ? i : i - 1;  // interpolate between j and i (j == i: exact)
      const double f = j == i ? 0.0 : static_cast<double>(step - forecast_.steps[j]) /
                                          static_cast<double>(forecast_.steps[i] - forecast_.steps[j]);
      loss_shift = now.loss - (forecast_.loss[j] + f * (forecast_.loss[i] - forecast_.loss[j]));
      time_shift = now.time_s - (forecast_.time_s[j] + f * (forecast_.time_s[i] - forecast_.time_s[j]));
      anchored = true;
    }
    if (anchored && previous_plan_holds(step, loss_shift, time_shift)) {
      ++stats_.plans_reused;
      return false;
    }
    for (std::size_t i = 0; i < forecast_.steps.size(); ++i) {
      if (forecast_.steps[i] <= step) continue;
      future.steps.push_back(forecast_.steps[i]);
      future.loss.push_back(forecast_.loss[i] + loss_shift);
      future.time_s.push_back(std::max(forecast_.time_s[i] + time_shift + stall_total_s_, future.time_s.back()));
      source.push_back(i);
    }
    if (!forecast_.time_s.empty()) predicted_end = std::max(predicted_end, forecast_.time_s.back() + time_shift);
  }
  // Thin very long horizons evenly, always keeping "now" and the last step.
  const auto limit = static_cast<std::size_t>(options_.max_candidates);
  if (future.steps.size() > limit) {
    Trajectory thin;
    std::vector<std::size_t> thin_source;
    for (std::size_t k = 0; k < limit; ++k) {
      const auto i = static_cast<std::size_t>(std::llround(static_cast<double>(k) * static_cast<double>(future.steps.size() - 1) / static_cast<double>(limit - 1)));
      if (!thin.steps.empty() && future.steps[i] == thin.steps.back()) continue;
      thin.steps.push_back(future.steps[i]);
      thin.loss.push_back(future.loss[i]);
      thin.time_s.push_back(future.time_s[i]);
      thin_source.push_back(source[i]);
    }
    future = std::move(thin);
    source = std::move(thin_source);
  }
  const double window = std::isfinite(options_.costs.window_s) ? options_.costs.window_s : predicted_end - warmup_time_s_;
  const double window_end = warmup_time_s_ + window;  // producer clock: no stall before W
  const auto plan = plan_from(origin_loss_, origin_servable_s_, static_cast<int>(published_.size()), window_end,
                              future, options_.costs);
  ++stats_.plans;
  memo_ = {.valid = anchored,
           .forecast_version = forecast_version_,
           .published = published_.size(),
           .loss_shift = loss_shift,
           .time_shift = time_shift,
           .publishes = !plan.publish_steps.empty(),
           .first_publish = plan.publish_steps.empty() ? 0 : plan.publish_steps.front()};
  if (plan.publish_steps.empty() || plan.publish_steps.front() != step) return false;
  if (options_.hindsight_check && scenarios_.size() > 1 && waiting_pays(future, source, loss_shift, window_end)) {
    ++stats_.deferred;
    return false;
  }
  published_.push_back(step);
  origin_loss_ = now.loss;
  origin_servable_s_ = now_wall + options_.costs.stall_s + options_.costs.delivery_s;
  stall_total_s_ += options_.costs.stall_s;
  return true;
}

}  // namespace modelcast::predictor
