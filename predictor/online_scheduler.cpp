#include <algorithm>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <span>
#include <sstream>
#include <string>

#include "modelcast/predictor_online.h"
#include "modelcast/error.h"
#include "online_worker.h"

namespace modelcast::predictor {
namespace {
constexpr std::size_t kNow = static_cast<std::size_t>(-1);  // the "publish now" candidate
// OnlineOptions::costs as the caller set them.
constexpr PublishCostNames kCostNames{"online scheduler: ", "costs.stall_s", "costs.delivery_s", "costs.request_rate",
                                      "costs.window_s", "costs.max_slowdown_s"};

// A point's loss and time residuals against the forecast (interpolated between its steps), by
// which the forecast's future is shifted to continue from that point; none where the point lies
// outside the forecast. A forecast starts one grid gap after `fitted_to`, the last point it was
// fitted to, and a long horizon's gap spans many logged steps (a 10^5-step run's 400 forecast
// points: 250 steps each): a point in that first gap, the fitted point itself included, is
// measured against the line from the fitted point to the forecast's first step. Left
// unanchored, each such decision planned afresh on the unshifted forecast, and none could reuse
// a plan. The line starts at the point as observed, its noise with it (a forecast gives no value
// at the points it was fitted to): in that gap a residual carries two points' noise, not one.
struct Residuals {
  double loss = 0.0, time_s = 0.0;
};
std::optional<Residuals> residuals_at(const Forecast& forecast, const std::optional<CurvePoint>& fitted_to,
                                      std::int64_t step, double loss, double time_s) {
  const auto it = std::lower_bound(forecast.steps.begin(), forecast.steps.end(), step);
  if (it == forecast.steps.end()) return std::nullopt;
  const auto i = static_cast<std::size_t>(it - forecast.steps.begin());
  if (*it != step && i == 0) {
    if (!fitted_to || step < fitted_to->step || fitted_to->step >= forecast.steps[0]) return std::nullopt;
    const double f = static_cast<double>(step - fitted_to->step) / static_cast<double>(forecast.steps[0] - fitted_to->step);
    return Residuals{loss - (fitted_to->loss + f * (forecast.loss[0] - fitted_to->loss)),
                     time_s - (fitted_to->time_s + f * (forecast.time_s[0] - fitted_to->time_s))};
  }
  const std::size_t j = *it == step ? i : i - 1;  // interpolate between j and i (j == i: exact)
  const double f = j == i ? 0.0 : static_cast<double>(step - forecast.steps[j]) /
                                      static_cast<double>(forecast.steps[i] - forecast.steps[j]);
  return Residuals{loss - (forecast.loss[j] + f * (forecast.loss[i] - forecast.loss[j])),
                   time_s - (forecast.time_s[j] + f * (forecast.time_s[i] - forecast.time_s[j]))};
}
// What a caller's forecaster returned, before anything indexes it by the forecast's steps (short
// vectors read past their end) or plans on it (a NaN was reported as a "trajectory" error).
void check_forecaster_result(const Forecast& f) {
  auto refuse = [](const std::string& why) {
    throw Error(ErrorCode::kInvalidArgument, "online scheduler: the forecaster returned " + why);
  };
  const std::size_t n = f.steps.size();
  if (f.loss.size() != n || f.time_s.size() != n || (!f.lower.empty() && f.lower.size() != n) ||
      (!f.upper.empty() && f.upper.size() != n)) {
    refuse(std::to_string(n) + " steps, " + std::to_string(f.loss.size()) + " losses, " + std::to_string(f.time_s.size()) +
           " times and a band of " + std::to_string(f.lower.size()) + " / " + std::to_string(f.upper.size()) +
           " (all as many as the steps, or no band)");
  }
  for (std::size_t i = 0; i < n; ++i) {
    const std::string at = " at step " + std::to_string(f.steps[i]);
    if (i > 0 && f.steps[i] <= f.steps[i - 1]) refuse("steps not strictly increasing" + at);
    if (!std::isfinite(f.loss[i])) refuse("a non-finite loss" + at);
    if (!std::isfinite(f.time_s[i])) refuse("a non-finite time" + at);
    if (!f.lower.empty() && !(std::isfinite(f.lower[i]) && std::isfinite(f.upper[i]))) refuse("a non-finite band" + at);
  }
}

}  // namespace

OnlineScheduler::OnlineScheduler(OnlineOptions options) : options_(std::move(options)) {
  // Here rather than at every decision after the warm-up, where a bad option first showed.
  try {
    check_forecast_options(options_.forecast);
  } catch (const Error& e) {
    throw Error(ErrorCode::kInvalidArgument, std::string("online scheduler: options.forecast: ") + e.what());
  }
  if (options_.warmup_step < 0 || options_.warmup_step >= options_.forecast.total_steps)
    throw Error(ErrorCode::kInvalidArgument, "online scheduler: warmup_step must be in [0, forecast.total_steps " +
                                                 std::to_string(options_.forecast.total_steps) + "), got " +
                                                 std::to_string(options_.warmup_step));
  stats_.horizon_end = options_.forecast.total_steps;
  if (options_.max_candidates < 2) throw Error(ErrorCode::kInvalidArgument, "online scheduler: max_candidates must be >= 2");
  if (!std::isfinite(options_.refit_growth) || options_.refit_growth < 0)
    throw Error(ErrorCode::kInvalidArgument, "online scheduler: refit_growth must be finite and >= 0, got " +
                                                 std::to_string(options_.refit_growth));
  if (options_.refit_band_points < 0)
    throw Error(ErrorCode::kInvalidArgument, "online scheduler: refit_band_points must be >= 0, got " +
                                                 std::to_string(options_.refit_band_points));
  if (options_.refit_every_below < 0)
    throw Error(ErrorCode::kInvalidArgument, "online scheduler: refit_every_below must be >= 0, got " +
                                                 std::to_string(options_.refit_every_below));
  if (!std::isfinite(options_.replan_time_tolerance) || options_.replan_time_tolerance < 0)
    throw Error(ErrorCode::kInvalidArgument, "online scheduler: replan_time_tolerance must be finite and >= 0, got " +
                                                 std::to_string(options_.replan_time_tolerance));
  if (options_.work_mode != OnlineOptions::WorkMode::kInline && options_.work_mode != OnlineOptions::WorkMode::kRefitsInBackground &&
      options_.work_mode != OnlineOptions::WorkMode::kBackground)
    throw Error(ErrorCode::kInvalidArgument, "online scheduler: unknown work_mode");
  if (!std::isfinite(options_.band_trigger_width) || options_.band_trigger_width <= 0)
    throw Error(ErrorCode::kInvalidArgument, "online scheduler: band_trigger_width must be finite and > 0, got " +
                                                 std::to_string(options_.band_trigger_width));
  if (options_.hedge) {
    try {
      hedge_forecast(std::vector<CurvePoint>{{0, 1.0, 0.0}}, Forecast{}, options_.hedge_options);  // checks the options
    } catch (const Error& e) {
      throw Error(ErrorCode::kInvalidArgument, std::string("online scheduler: options.hedge_options: ") + e.what());
    }
  }
  fitted_ = std::make_shared<const Fitted>();
  set_costs(options_.costs.stall_s, options_.costs.delivery_s);
}

OnlineScheduler::~OnlineScheduler() = default;
OnlineScheduler::OnlineScheduler(OnlineScheduler&&) noexcept = default;
OnlineScheduler& OnlineScheduler::operator=(OnlineScheduler&&) noexcept = default;

void OnlineScheduler::refuse_if_moved_from(const char* call) const {
  // A moved-from shared_ptr is empty (the standard says so), and a live scheduler always holds a
  // forecast, so this tells the two apart; its other members were dereferenced as they were.
  if (!fitted_)
    throw Error(ErrorCode::kState, std::string("online scheduler: ") + call +
                                       " on a scheduler that was moved from (only destroying or assigning it is allowed)");
}

const Forecast& OnlineScheduler::last_forecast() const {
  refuse_if_moved_from("last_forecast()");
  return fitted_->forecast;
}

// Out of line, each refusing a moved-from scheduler as every other call does: inline, they
// answered from the emptied members (no publishes, counters left behind) as if it were live.
bool OnlineScheduler::refit_in_flight() const {
  refuse_if_moved_from("refit_in_flight()");
  return refit_in_flight_;
}

bool OnlineScheduler::plan_in_flight() const {
  refuse_if_moved_from("plan_in_flight()");
  return plan_in_flight_;
}

const std::vector<std::int64_t>& OnlineScheduler::published_steps() const {
  refuse_if_moved_from("published_steps()");
  return published_;
}

const OnlineStats& OnlineScheduler::stats() const {
  refuse_if_moved_from("stats()");
  return stats_;
}

std::int64_t OnlineScheduler::regime_start_step() const {
  refuse_if_moved_from("regime_start_step()");
  return observed_.empty() ? 0 : observed_[fit_from_].step;
}

void OnlineScheduler::set_costs(double stall_s, double delivery_s) {
  refuse_if_moved_from("set_costs()");
  // Every field, not only the two set here: the constructor checks the options' costs this way,
  // rather than leaving a bad rate or window to the first decision after the warm-up.
  PublishCosts costs = options_.costs;
  costs.stall_s = stall_s;
  costs.delivery_s = delivery_s;
  validate_costs(costs, kCostNames);
  if (stall_s != options_.costs.stall_s || delivery_s != options_.costs.delivery_s) ++forecast_version_;  // re-plan
  options_.costs.stall_s = stall_s;
  options_.costs.delivery_s = delivery_s;
}

OnlineScheduler::Fitted OnlineScheduler::fit(std::span<const CurvePoint> regime, const OnlineOptions& options) {
  Forecast raw = options.forecaster ? options.forecaster(regime, options.forecast) : forecast_curve(regime, options.forecast);
  if (options.forecaster) check_forecaster_result(raw);
  // A forecaster of the caller's that says nothing of the floor was made under the stated one:
  // the hedge would otherwise take it from the points (0 for a loss of 1000.x stated above 1000).
  if (std::isnan(raw.loss_floor)) raw.loss_floor = options.forecast.loss_floor;
  Fitted out;
  if (!regime.empty()) out.fitted_to = regime.back();
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
  fitted_ = std::make_shared<const Fitted>(std::move(fitted));
  ++forecast_version_;
  ++stats_.fits;
}

std::size_t OnlineScheduler::batch_scheduled_workers() const {
  return static_cast<std::size_t>(refit_worker_ && refit_worker_->batch_scheduled()) +
         static_cast<std::size_t>(plan_worker_ && plan_worker_->batch_scheduled());
}

void OnlineScheduler::wait_for_background() {
  refuse_if_moved_from("wait_for_background()");
  if (refit_in_flight_ && refit_worker_) {
    refit_in_flight_ = false;  // also when the fit threw: the next due refit starts a new one
    adopt(refit_worker_->wait());
    ++stats_.background_fits;
    stats_.worker_s = refit_worker_->busy_s();
    stats_.batch_scheduled_workers = batch_scheduled_workers();
  }
  if (plan_in_flight_) {
    PlanOutcome answer;
    try {
      answer = plan_worker_->wait();
    } catch (...) {
      end_failed_plan_job();
      throw;
    }
    absorb(answer);
    answered_ = std::move(answer);
  }
}

void OnlineScheduler::observe(std::int64_t step, double loss, double wall_time_s) {
  refuse_if_moved_from("observe()");
  if (!std::isfinite(loss))
    throw Error(ErrorCode::kInvalidArgument, "online scheduler: loss " + std::to_string(loss) + " at step " +
                                                 std::to_string(step) + " is not finite");
  if (!std::isfinite(wall_time_s))
    throw Error(ErrorCode::kInvalidArgument, "online scheduler: wall time " + std::to_string(wall_time_s) + " at step " +
                                                 std::to_string(step) + " is not finite");
  if (step > kMaxCurveStep || step < -kMaxCurveStep)
    throw Error(ErrorCode::kInvalidArgument, "online scheduler: step " + std::to_string(step) +
                                                 " is beyond 2^53, the largest step the predictor takes");
  if (!observed_.empty() && step <= observed_.back().step)
    throw Error(ErrorCode::kInvalidArgument, "online scheduler: step " + std::to_string(step) + " is not after step " +
                                std::to_string(observed_.back().step));
  // Refused here, naming the point, rather than later by a forecast in terms of steps the caller
  // never gave: fits square losses (beyond 1e100 they overflow), and the time model needs a clock.
  if (std::abs(loss) > kMaxCurveValue) {
    std::ostringstream why;
    why << "online scheduler: loss " << loss << " at step " << step << " is beyond +-1e100; rescale the loss";
    throw Error(ErrorCode::kInvalidArgument, why.str());
  }
  // Every later forecast would refuse it, and with it every decision of the rest of the run.
  if (loss < options_.forecast.loss_floor) {
    std::ostringstream why;
    why << "online scheduler: loss " << loss << " at step " << step << " is below the stated loss_floor ("
        << options_.forecast.loss_floor << ")";
    throw Error(ErrorCode::kInvalidArgument, why.str());
  }
  if (wall_time_s < 0 || (!observed_.empty() && wall_time_s < last_wall_time_s_)) {
    throw Error(ErrorCode::kInvalidArgument,
                "online scheduler: wall time " + std::to_string(wall_time_s) + " s at step " + std::to_string(step) +
                    (wall_time_s < 0 ? " is negative" : " is before the previous point's") +
                    " (seconds of training since it started, never decreasing)");
  }
  if (step > options_.forecast.total_steps) extend_horizon(step);
  // Work on the stall-free training clock, as the forecast's time model expects. The last
  // publish's stall was assumed (costs.stall_s); it took at most the wall time since the point
  // before, and deducting more ran the training clock backwards (evaluations 0.2 ms apart with
  // a stall of 0.5 ms set), which the forecast refused.
  if (!observed_.empty() && stall_unseen_s_ > wall_time_s - last_wall_time_s_)
    stall_total_s_ -= stall_unseen_s_ - (wall_time_s - last_wall_time_s_);
  stall_unseen_s_ = 0.0;
  double training_time_s = wall_time_s - stall_total_s_;
  if (!observed_.empty()) training_time_s = std::max(training_time_s, observed_.back().time_s);  // round-off
  last_wall_time_s_ = wall_time_s;
  observed_.push_back({step, loss, training_time_s});
  if (step == options_.warmup_step || (std::isnan(warmup_time_s_) && step > options_.warmup_step)) {
    warmup_time_s_ = observed_.back().time_s;
    origin_loss_ = loss;
    origin_servable_s_ = wall_time_s;
  }
}

void OnlineScheduler::extend_horizon(std::int64_t step) {
  // Work in flight was planned to the old end: taken in first (a worker's failure is thrown here,
  // before anything changed), then the workers go, as they hold the old options.
  wait_for_background();
  answered_.reset();
  prepared_ = Prepared{};
  refit_worker_.reset();
  plan_worker_.reset();
  auto& end = options_.forecast.total_steps;
  const std::int64_t start = options_.warmup_step;  // < end (checked at construction)
  while (end < step) end = end - start > (kMaxCurveStep - start) / 2 ? kMaxCurveStep : start + 2 * (end - start);
  options_.forecast.future_steps.clear();
  refit_now_ = true;
  ++stats_.horizon_extensions;
  stats_.horizon_end = end;
}

std::size_t OnlineScheduler::band_points() const {
  // On long per-step logs one point says little: compare one fit bin's mean instead.
  const std::size_t bin = options_.forecast.max_fit_points > 0
                              ? observed_.size() / static_cast<std::size_t>(options_.forecast.max_fit_points)
                              : 0;
  return std::max(static_cast<std::size_t>(options_.refit_band_points), bin);
}

bool OnlineScheduler::left_band(double* first_half_width) const {
  const Forecast& forecast = fitted_->forecast;
  if (options_.refit_band_points == 0 || forecast.steps.empty()) return false;
  const std::size_t k = band_points();
  if (observed_.size() < points_at_last_fit_ + k) return false;
  if (forecast.lower.size() != forecast.steps.size() || forecast.upper.size() != forecast.steps.size())
    return false;  // a custom forecaster without a band
  if (band_.fits != stats_.fits) {
    band_ = BandResiduals{};
    band_.fits = stats_.fits;
    band_.from = points_at_last_fit_;  // the window below never starts before it
  }
  // Residuals against the band's centre (the point forecast; the hedged loss sits below it),
  // in units of the widened half-width, for the points not yet seen against this forecast.
  for (std::size_t j = band_.from + band_.z.size(); j < observed_.size(); ++j) {
    const auto& p = observed_[j];
    double half = 0.0, z = 0.0;
    // Past the forecast horizon there is nothing to compare.
    if (const auto it = std::lower_bound(forecast.steps.begin(), forecast.steps.end(), p.step); it != forecast.steps.end()) {
      const auto i = static_cast<std::size_t>(it - forecast.steps.begin());
      double lo = forecast.lower[i], hi = forecast.upper[i];
      if (*it != p.step && i > 0) {  // between two forecast steps: interpolate the band
        const double f = static_cast<double>(p.step - forecast.steps[i - 1]) /
                         static_cast<double>(forecast.steps[i] - forecast.steps[i - 1]);
        lo = forecast.lower[i - 1] + f * (lo - forecast.lower[i - 1]);
        hi = forecast.upper[i - 1] + f * (hi - forecast.upper[i - 1]);
      }
      half = 0.5 * (hi - lo) * options_.band_trigger_width;
      if (half > 0) z = (p.loss - 0.5 * (lo + hi)) / half;  // a forecast declared certain has no band
    }
    band_.half.push_back(half);
    band_.z.push_back(z);
    band_.z_sum.push_back(band_.z_sum.back() + z);
    band_.bandless.push_back(band_.bandless.back() + (half > 0 ? 0 : 1));
  }
  const std::size_t first = observed_.size() - k - band_.from, end = observed_.size() - band_.from;
  if (band_.bandless[end] != band_.bandless[first]) return false;
  if (first_half_width) *first_half_width = band_.half[first];
  if (k > static_cast<std::size_t>(options_.refit_band_points)) {  // bin mean on long logs
    return std::abs((band_.z_sum[end] - band_.z_sum[first]) / static_cast<double>(k)) > 1.0;
  }
  const auto z = std::span<const double>(band_.z).subspan(first, k);
  return std::all_of(z.begin(), z.end(), [](double v) { return v > 1.0; }) ||
         std::all_of(z.begin(), z.end(), [](double v) { return v < -1.0; });
}

void OnlineScheduler::refit_if_due() {
  const bool background = options_.work_mode == OnlineOptions::WorkMode::kBackground;
  if (refit_in_flight_ && background) return;  // its forecast comes with a plan's answer
  if (refit_in_flight_) {
    // A new forecast is coming: no refit is due on the old one, and its band says little now.
    std::optional<Fitted> done;
    try {
      done = refit_worker_->take();
    } catch (...) {
      refit_in_flight_ = false;
      throw;
    }
    if (!done) return;
    refit_in_flight_ = false;
    adopt(std::move(*done));
    ++stats_.background_fits;
    stats_.worker_s = refit_worker_->busy_s();
    stats_.batch_scheduled_workers = batch_scheduled_workers();
  }
  const Forecast& forecast = fitted_->forecast;
  const std::size_t n = observed_.size();
  // Growth is counted within the current regime.
  const std::size_t seen = points_at_last_fit_ - std::min(points_at_last_fit_, fit_from_);
  bool due = refit_now_ || forecast.steps.empty() || n < static_cast<std::size_t>(options_.refit_every_below);
  // In doubles: a large refit_growth (1e19: "never again") is past size_t, and casting it was
  // undefined (it came out as "refit at every point").
  const double grown = std::max(static_cast<double>(seen + 1), std::ceil(static_cast<double>(seen) * (1.0 + options_.refit_growth)));
  due = due || static_cast<double>(n - fit_from_) >= grown;
  // A regime change: the newest points left the band, and the departure began with a jump
  // larger than the widened band (new data, a shift, a sudden drop or rise). The points before
  // the jump no longer describe the curve. A gradual departure is left to the geometric
  // schedule: on the development curves refitting early on it made decisions worse.
  double half_width = 0.0;
  bool band = !forecast.steps.empty() && left_band(&half_width);
  const std::size_t change = n - std::min(n, band_points());
  band = band && change > fit_from_ && std::abs(observed_[change].loss - observed_[change - 1].loss) > half_width;
  if (n <= points_at_last_fit_ || !(due || band)) return;
  if (band) {
    fit_from_ = change;
    ++stats_.band_refits;
  }
  const std::span<const CurvePoint> regime(observed_.data() + fit_from_, n - fit_from_);
  points_at_last_fit_ = n;
  refit_now_ = false;
  if (background && !short_log()) {
    // The next plan job fits it first; the first forecast too (the decisions wait for it), so
    // that not even a warm-up longer than refit_every_below points fits on the caller's thread.
    refit_regime_.assign(regime.begin(), regime.end());
    refit_in_flight_ = true;
    return;
  }
  if (options_.work_mode == OnlineOptions::WorkMode::kRefitsInBackground && !forecast.steps.empty() && !short_log()) {
    if (!refit_worker_) {
      // The worker's own copy of the options, never written after this.
      refit_worker_ = std::make_unique<detail::OnlineWorker<std::vector<CurvePoint>, Fitted>>(
          [options = options_](std::vector<CurvePoint>& points) { return fit(points, options); },
          options_.batch_scheduled_workers);
    }
    refit_worker_->submit({regime.begin(), regime.end()});
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
  const Forecast& forecast = fitted_->forecast;
  const auto next = std::upper_bound(forecast.steps.begin(), forecast.steps.end(), step);
  if (next == forecast.steps.end()) return false;
  if (memo_.publishes && memo_.first_publish <= *next) return false;
  if (loss_shift < memo_.loss_shift) return false;
  // A shifted clock moves every candidate and, unless the window is fixed, its end alike; with
  // a fixed window it does not, so the time residual must stay close to the plan's.
  const double interval = observed_.back().time_s - observed_[observed_.size() - 2].time_s;
  return std::abs(time_shift - memo_.time_shift) <= options_.replan_time_tolerance * interval;
}

bool OnlineScheduler::waiting_pays(const PlanInput& in, const Trajectory& future, const std::vector<std::size_t>& source,
                                   double window_end) {
  // Hindsight check: in each scenario, the best the run can still do if it publishes now, and
  // if it waits (and then, having seen more, follows that scenario's best plan). Waiting keeps
  // the option to publish when the loss has really dropped; the mean-path plan alone does not
  // value that option, and at a high publish cost spends its few publishes too early.
  const auto& costs = in.costs;
  const double s_now = future.time_s[0] + costs.stall_s + costs.delivery_s;
  const int done = static_cast<int>(in.published);
  double publish_now = 0.0, wait = 0.0;
  Trajectory rest, rest_after_stall;
  for (const auto& scenario : in.fitted->scenarios) {
    rest.steps.assign(future.steps.begin() + 1, future.steps.end());
    rest.time_s.assign(future.time_s.begin() + 1, future.time_s.end());
    rest.loss.clear();
    for (std::size_t k = 1; k < source.size(); ++k) rest.loss.push_back(scenario.loss[source[k]] + in.loss_shift);
    rest_after_stall = rest;
    for (double& t : rest_after_stall.time_s) t += costs.stall_s;  // publishing now delays every later step
    const double served_until_now = in.origin_loss * std::max(0.0, s_now - in.origin_servable_s);
    wait += scenario.weight * plan_from(in.origin_loss, in.origin_servable_s, done, window_end, rest, costs).cil;
    publish_now += scenario.weight * (costs.request_rate * served_until_now +
                                      plan_from(future.loss[0], s_now, done + 1, window_end, rest_after_stall, costs).cil);
  }
  return wait < publish_now;
}

OnlineScheduler::Candidates OnlineScheduler::candidates(const PlanInput& in) {
  const Forecast& forecast = in.fitted->forecast;
  const double now_wall = in.now.time_s + in.stall_total_s;
  // Candidates on the producer's clock: now, then the forecast's future steps.
  Trajectory future;
  std::vector<std::size_t> source = {kNow};  // forecast index of each candidate
  future.steps.push_back(in.now.step);
  future.loss.push_back(in.now.loss);
  future.time_s.push_back(now_wall);
  double predicted_end = in.now.time_s;
  if (in.in_horizon) {
    for (std::size_t i = 0; i < forecast.steps.size(); ++i) {
      if (forecast.steps[i] <= in.now.step) continue;
      future.steps.push_back(forecast.steps[i]);
      future.loss.push_back(forecast.loss[i] + in.loss_shift);
      future.time_s.push_back(std::max(forecast.time_s[i] + in.time_shift + in.stall_total_s, future.time_s.back()));
      source.push_back(i);
    }
    if (!forecast.time_s.empty()) predicted_end = std::max(predicted_end, forecast.time_s.back() + in.time_shift);
  }
  // Thin very long horizons evenly, always keeping "now" and the last step.
  const auto limit = static_cast<std::size_t>(in.max_candidates);
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
  const double window = std::isfinite(in.costs.window_s) ? in.costs.window_s : predicted_end - in.warmup_time_s;
  const double window_end = in.warmup_time_s + window;  // producer clock: no stall before W
  return Candidates{std::move(future), std::move(source), window_end};
}

OnlineScheduler::PlanOutcome OnlineScheduler::plan(const PlanInput& in) {
  const auto [future, source, window_end] = candidates(in);
  const auto best = plan_from(in.origin_loss, in.origin_servable_s, static_cast<int>(in.published), window_end, future,
                              in.costs);
  PlanOutcome out;
  out.memo = {.valid = in.anchored,
              .forecast_version = in.forecast_version,
              .published = in.published,
              .loss_shift = in.loss_shift,
              .time_shift = in.time_shift,
              .publishes = !best.publish_steps.empty(),
              .first_publish = best.publish_steps.empty() ? 0 : best.publish_steps.front()};
  if (best.publish_steps.empty() || best.publish_steps.front() != in.now.step) return out;
  if (in.hindsight_check && in.fitted->scenarios.size() > 1 && waiting_pays(in, future, source, window_end)) {
    out.deferred = true;
    return out;
  }
  out.publish = true;
  return out;
}

void OnlineScheduler::end_failed_plan_job() {
  plan_in_flight_ = false;
  // A refit that rode in the failed job is over too: the next due refit starts a new one.
  if (std::exchange(refit_in_plan_job_, false)) refit_in_flight_ = false;
}

std::optional<OnlineScheduler::PlanOutcome> OnlineScheduler::collect_plan() {
  if (answered_) return std::exchange(answered_, std::nullopt);  // booked in by wait_for_background()
  if (!plan_in_flight_) return std::nullopt;
  std::optional<PlanOutcome> done;
  try {
    done = plan_worker_->take();
  } catch (...) {
    end_failed_plan_job();
    throw;
  }
  if (done) absorb(*done);
  return done;
}

void OnlineScheduler::absorb(PlanOutcome& answer) {
  plan_in_flight_ = false;
  ++stats_.plans;
  ++stats_.background_plans;
  stats_.worker_s = plan_worker_->busy_s();
  stats_.batch_scheduled_workers = batch_scheduled_workers();
  if (answer.refitted) {
    fitted_ = std::move(answer.refitted);
    ++forecast_version_;
    ++stats_.fits;
    ++stats_.background_fits;
    refit_in_flight_ = refit_in_plan_job_ = false;
  }
}

OnlineScheduler::PlanOutcome OnlineScheduler::plan_job(PlanInput& in, const OnlineOptions& options) {
  std::shared_ptr<const Fitted> refitted;
  if (!in.refit_regime.empty()) {
    refitted = std::make_shared<const Fitted>(fit(in.refit_regime, options));
    in.fitted = refitted;
    ++in.forecast_version;  // as the caller's, once it adopts this forecast
    in.anchored = false;
    in.loss_shift = in.time_shift = 0.0;
    if (in.in_horizon) {
      if (const auto r = residuals_at(refitted->forecast, refitted->fitted_to, in.now.step, in.now.loss, in.now.time_s)) {
        in.loss_shift = r->loss;
        in.time_shift = r->time_s;
        in.anchored = true;
      }
    }
  }
  PlanOutcome out = plan(in);
  if (in.next_step > 0) out.next = prepare_next(in);
  out.refitted = std::move(refitted);
  return out;
}

void OnlineScheduler::publish_now() {
  const auto& now = observed_.back();
  const double now_wall = now.time_s + stall_total_s_;
  published_.push_back(now.step);
  origin_loss_ = now.loss;
  origin_servable_s_ = now_wall + options_.costs.stall_s + options_.costs.delivery_s;
  stall_total_s_ += options_.costs.stall_s;
  stall_unseen_s_ += options_.costs.stall_s;
}

bool OnlineScheduler::should_publish(std::int64_t step) {
  refuse_if_moved_from("should_publish()");
  if (observed_.empty() || observed_.back().step != step)
    throw Error(ErrorCode::kInvalidArgument, "online scheduler: should_publish(" + std::to_string(step) +
                                ") must follow observe() of the same step");
  if (std::isnan(warmup_time_s_) || step <= options_.warmup_step) return false;
  const auto& now = observed_.back();
  const bool in_horizon = step < options_.forecast.total_steps;
  const bool background = options_.work_mode == OnlineOptions::WorkMode::kBackground && !short_log();
  // kBackground: the worker's answer (and the forecast it refitted) before deciding on a refit.
  std::optional<PlanOutcome> answer;
  if (background) answer = collect_plan();
  if (in_horizon) refit_if_due();

  if (background) {
    if (answer) {
      if (answer->deferred) ++stats_.deferred;
      memo_ = answer->memo;
      prepared_ = answer->next;
    }
    // The answer prepared for this point, if it came where it was expected.
    const Prepared ready = std::exchange(prepared_, Prepared{});
    const std::optional<bool> ahead = ready.published == published_.size() && ready.stall_s == options_.costs.stall_s &&
                                              ready.delivery_s == options_.costs.delivery_s
                                          ? ready.answer(now)
                                          : std::nullopt;
    if (ahead) {
      ++stats_.answered_ahead;
      const bool publish = *ahead;
      if (publish) publish_now();
      prepare(step, in_horizon);
      return publish;
    }
    // Otherwise act on the plan of the earlier point: its "publish now" publishes the newer model.
    if (answer && answer->publish && answer->memo.published == published_.size()) {
      ++stats_.answered_late;
      publish_now();
      prepare(step, in_horizon);
      return true;
    }
    if (plan_in_flight_) {
      ++stats_.answered_late;  // the worker is behind: its answer comes at a later decision
      return false;
    }
  }

  // Between refits the forecast was made from an older prefix: anchor it on the newest point
  // (shift its loss and time by their residuals here), so that "publish now" is weighed against
  // a future that continues from where the run actually is.
  double loss_shift = 0.0, time_shift = 0.0;
  bool anchored = false;  // the residuals were measured (the step lies within the forecast)
  if (in_horizon) {
    if (const auto r = residuals_at(fitted_->forecast, fitted_->fitted_to, step, now.loss, now.time_s)) {
      loss_shift = r->loss;
      time_shift = r->time_s;
      anchored = true;
    }
  }
  const bool reused = anchored && previous_plan_holds(step, loss_shift, time_shift);
  if (background) {
    // "Wait": proven by the last plan, or for want of an answer for this point (late: the plan
    // of this point answers at the next decision).
    ++(reused ? stats_.plans_reused : stats_.answered_late);
    prepare(step, in_horizon);
    return false;
  }
  bool publish = false;
  if (reused) {
    ++stats_.plans_reused;
  } else {
    const PlanOutcome fresh = plan(plan_input(in_horizon, loss_shift, time_shift, anchored));
    ++stats_.plans;
    memo_ = fresh.memo;
    if (fresh.deferred) ++stats_.deferred;
    publish = fresh.publish;
    if (publish) publish_now();
  }
  // The last decision on a short log prepares the first one in the background.
  if (options_.work_mode == OnlineOptions::WorkMode::kBackground &&
      observed_.size() + 1 >= static_cast<std::size_t>(options_.refit_every_below))
    prepare(step, in_horizon);
  return publish;
}

OnlineScheduler::PlanInput OnlineScheduler::plan_input(bool in_horizon, double loss_shift,
                                                       double time_shift, bool anchored) const {
  const auto& now = observed_.back();
  return PlanInput{.fitted = fitted_,
                   .now = now,
                   .in_horizon = in_horizon,
                   .anchored = anchored,
                   .loss_shift = loss_shift,
                   .time_shift = time_shift,
                   .stall_total_s = stall_total_s_,
                   .warmup_time_s = warmup_time_s_,
                   .origin_loss = origin_loss_,
                   .origin_servable_s = origin_servable_s_,
                   .published = published_.size(),
                   .forecast_version = forecast_version_,
                   .costs = options_.costs,
                   .max_candidates = options_.max_candidates,
                   .hindsight_check = options_.hindsight_check,
                   .total_steps = options_.forecast.total_steps,
                   .next_step = 0,
                   .next_time_s = 0.0,
                   .refit_regime = {}};
}

void OnlineScheduler::prepare(std::int64_t step, bool in_horizon) {
  // Plan this point (the late answer, and the memo) and prepare the next, with the state after
  // this decision (a publish just recorded included).
  double loss_shift = 0.0, time_shift = 0.0;
  bool anchored = false;
  const auto& now = observed_.back();
  if (in_horizon) {
    if (const auto r = residuals_at(fitted_->forecast, fitted_->fitted_to, step, now.loss, now.time_s)) {
      loss_shift = r->loss;
      time_shift = r->time_s;
      anchored = true;
    }
  }
  PlanInput input = plan_input(in_horizon, loss_shift, time_shift, anchored);
  if (observed_.size() >= 2) {
    const auto& before = observed_[observed_.size() - 2];
    input.next_step = std::min(step + (step - before.step), options_.forecast.total_steps);
    input.next_time_s = now.time_s + (now.time_s - before.time_s);
    if (input.next_step <= step) input.next_step = 0;  // the run's last point: nothing comes next
  }
  if (refit_in_flight_ && !refit_regime_.empty()) {
    input.refit_regime = std::move(refit_regime_);
    refit_regime_.clear();
    refit_in_plan_job_ = true;
  }
  if (!plan_worker_) {
    // The worker's own copy of the options (for refits), never written after this.
    plan_worker_ = std::make_unique<detail::OnlineWorker<PlanInput, PlanOutcome>>(
        [options = options_](PlanInput& in) { return plan_job(in, options); }, options_.batch_scheduled_workers);
  }
  plan_worker_->submit(std::move(input));
  plan_in_flight_ = true;
}

namespace {
// The best CIL of a family of schedules as a function of a shift delta of every loss from the
// prepared point on (its own loss and the forecast anchored on it), at one delta: the value and
// the slope there. One schedule's CIL is linear in delta: the versions it serves after its first
// publish all move by delta, the version served before (the origin) does not. So the best of a
// family is concave and piecewise linear, and its slope is request_rate x the time from the
// first publish's version being servable to the window's end.
struct CostLine {
  double value = 0.0, slope = 0.0;
};

struct Origin {
  double loss = 0.0, servable_s = 0.0;
  int publishes_done = 0;
};

// The schedules that wait (publish first at a later candidate of `rest`, or never), at delta.
CostLine waiting(const Trajectory& rest, double delta, const Origin& origin, double window_end,
                 const PublishCosts& costs, Trajectory& shifted) {
  shifted.steps = rest.steps;
  shifted.time_s = rest.time_s;
  shifted.loss.resize(rest.loss.size());
  for (std::size_t k = 0; k < rest.loss.size(); ++k) shifted.loss[k] = rest.loss[k] + delta;
  const auto best = plan_from(origin.loss, origin.servable_s, origin.publishes_done, window_end, shifted, costs);
  CostLine line{best.cil, 0.0};
  if (!best.publish_steps.empty()) {
    const auto it = std::lower_bound(rest.steps.begin(), rest.steps.end(), best.publish_steps.front());
    const double servable = rest.time_s[static_cast<std::size_t>(it - rest.steps.begin())] + costs.stall_s + costs.delivery_s;
    line.slope = costs.request_rate * std::max(0.0, window_end - servable);
  }
  return line;
}

// Where `now` (the schedules that publish now: a line, their best continuation does not depend
// on delta) meets `wait` (concave, flatter): publishing now is the better move below it. Newton's
// method on a concave function lands at or above the meeting point after one step and then
// descends to it, one step per piece of `wait` crossed, a handful in practice. With
// `at_most_start`, only a meeting point below `start` matters: where publishing now is still
// the better move at `start`, that is the answer, for one evaluation. nullopt where it does not
// settle (or the two run parallel), and the answer is left to the plan after the point.
template <class Wait>
std::optional<double> meeting_point(const CostLine& now, Wait&& wait, double start, double tolerance,
                                    bool at_most_start = false) {
  constexpr int kMaxSteps = 40;
  double delta = start;
  for (int k = 0; k < kMaxSteps; ++k) {
    const CostLine w = wait(delta);
    if (k == 0 && at_most_start && now.value + now.slope * delta <= w.value) return start;
    const double steeper = now.slope - w.slope;
    if (!(steeper > 0.0) || !std::isfinite(w.value)) return std::nullopt;
    const double next = delta + (w.value - (now.value + now.slope * delta)) / steeper;
    if (!std::isfinite(next)) return std::nullopt;
    if (std::abs(next - delta) <= tolerance) return next;
    delta = next;
  }
  return std::nullopt;
}
}  // namespace

// For the point expected next, the loss below which publishing there is the plan's first move
// and survives the hindsight check, at each end of the time window. Both sides of each
// comparison are piecewise linear in that loss (CostLine), so the threshold is solved for with a
// few plans of the schedules that wait, instead of searched for with full plans by bisection
// (which cost about three times as many plans, each with the hindsight check's two per
// scenario, and left a wider band unresolved).
OnlineScheduler::Prepared OnlineScheduler::prepare_next(const PlanInput& in) {
  Prepared out;
  const Forecast& forecast = in.fitted->forecast;
  const double interval = in.next_time_s - in.now.time_s;
  if (!(interval > 0)) return out;
  // The scale of the answer: the forecast's band at the next step, or the current residual where
  // the band is narrower. The threshold is known to a millionth of it; the first guess is the
  // loss the current residual predicts.
  double half_band = 0.0;
  const auto it = std::lower_bound(forecast.steps.begin(), forecast.steps.end(), in.next_step);
  if (it != forecast.steps.end() && forecast.lower.size() == forecast.steps.size() && forecast.upper.size() == forecast.steps.size()) {
    const auto i = static_cast<std::size_t>(it - forecast.steps.begin());
    half_band = 0.5 * (forecast.upper[i] - forecast.lower[i]);
  }
  const auto& costs = in.costs;
  const Origin origin{in.origin_loss, in.origin_servable_s, static_cast<int>(in.published)};
  const bool hindsight = in.hindsight_check && in.fitted->scenarios.size() > 1;
  // The next point's time is known only roughly (logging intervals jitter by tens of percent on
  // the development runs): the threshold is found at the two ends of a window of one interval
  // either side of the expected time and interpolated between. (Solving at the expected time
  // too cost the worker half as much again in the decision benchmark and changed no decision
  // in the tests' replays.)
  double thresholds[2], tolerances[2];
  for (int e = 0; e < 2; ++e) {
    const double time_s = in.next_time_s + (e == 0 ? -1.0 : 1.0) * interval;
    const auto at_zero = residuals_at(forecast, in.fitted->fitted_to, in.next_step, 0.0, time_s);
    if (!at_zero) return out;  // beyond the forecast: the late answer will do
    const double expected = -at_zero->loss;  // the forecast's loss at the next step
    const double scale = std::max({half_band, std::abs(in.loss_shift), 1e-9 * std::max(1.0, std::abs(expected))});
    // A millionth of the scale, and never below what the plans' rounding can resolve.
    tolerances[e] = std::max(1e-6 * scale, 1e-9 * (1.0 + std::abs(expected)));
    // The candidates at delta = 0: the point at the forecast's own loss.
    PlanInput probe = in;
    probe.next_step = 0;
    probe.in_horizon = in.next_step < in.total_steps;
    probe.anchored = true;
    probe.time_shift = at_zero->time_s;
    probe.now = {in.next_step, expected, time_s};
    probe.loss_shift = 0.0;
    const auto [future, source, window_end] = candidates(probe);
    const double s_now = future.time_s[0] + costs.stall_s + costs.delivery_s;
    if (!(s_now < window_end && s_now >= in.origin_servable_s)) {
      thresholds[e] = -std::numeric_limits<double>::infinity();  // publishing there is not a candidate
      continue;
    }
    const double now_slope = costs.request_rate * (window_end - s_now);
    const double served_until_now = costs.request_rate * in.origin_loss * std::max(0.0, s_now - in.origin_servable_s);
    Trajectory rest, rest_after_stall, shifted;
    rest.steps.assign(future.steps.begin() + 1, future.steps.end());
    rest.time_s.assign(future.time_s.begin() + 1, future.time_s.end());
    rest.loss.assign(future.loss.begin() + 1, future.loss.end());
    auto after_stall = [&](const Trajectory& r) {
      rest_after_stall = r;
      for (double& t : rest_after_stall.time_s) t += costs.stall_s;  // publishing now delays every later step
      return plan_from(expected, s_now, origin.publishes_done + 1, window_end, rest_after_stall, costs).cil;
    };
    // The plan on the mean path.
    const CostLine now{served_until_now + after_stall(rest), now_slope};
    auto mean_root = meeting_point(
        now, [&](double delta) { return waiting(rest, delta, origin, window_end, costs, shifted); }, in.loss_shift,
        tolerances[e]);
    if (!mean_root) return out;
    double threshold = *mean_root;
    if (hindsight) {
      // The hindsight check, as waiting_pays() makes it: each scenario's best after publishing
      // now against its best after waiting, in expectation.
      const auto& scenarios = in.fitted->scenarios;
      std::vector<Trajectory> rests(scenarios.size(), rest);
      CostLine now_expected;
      for (std::size_t sc = 0; sc < scenarios.size(); ++sc) {
        for (std::size_t k = 1; k < source.size(); ++k) rests[sc].loss[k - 1] = scenarios[sc].loss[source[k]];
        now_expected.value += scenarios[sc].weight * (served_until_now + after_stall(rests[sc]));
        now_expected.slope += scenarios[sc].weight * now_slope;
      }
      auto wait_expected = [&](double delta) {
        CostLine sum;
        for (std::size_t sc = 0; sc < scenarios.size(); ++sc) {
          const CostLine w = waiting(rests[sc], delta, origin, window_end, costs, shifted);
          sum.value += scenarios[sc].weight * w.value;
          sum.slope += scenarios[sc].weight * w.slope;
        }
        return sum;
      };
      auto checked_root = meeting_point(now_expected, wait_expected, threshold, tolerances[e], /*at_most_start=*/true);
      if (!checked_root) return out;
      threshold = std::min(threshold, *checked_root);
    }
    thresholds[e] = expected + threshold;
  }
  out.valid = true;
  out.step = in.next_step;
  out.time_lo = in.next_time_s - interval;
  out.time_hi = in.next_time_s + interval;
  // Within the tolerance of a threshold the plan's own rounding may go either way: not answered.
  out.threshold_lo = thresholds[0] - 2.0 * tolerances[0];
  out.threshold_hi = thresholds[1] - 2.0 * tolerances[1];
  out.gap_lo = thresholds[0] + 2.0 * tolerances[0];
  out.gap_hi = thresholds[1] + 2.0 * tolerances[1];
  out.low = -std::numeric_limits<double>::infinity();
  out.high = std::numeric_limits<double>::infinity();
  out.published = in.published;
  out.stall_s = costs.stall_s;
  out.delivery_s = costs.delivery_s;
  return out;
}

std::optional<bool> OnlineScheduler::Prepared::answer(const CurvePoint& point) const {
  if (!valid || point.step != step || !(point.time_s >= time_lo && point.time_s <= time_hi)) return std::nullopt;
  if (!(point.loss >= low && point.loss <= high)) return std::nullopt;
  const double f = (point.time_s - time_lo) / (time_hi - time_lo);
  auto between = [f](double a, double b) {
    if (std::isinf(a) || std::isinf(b)) return a == b ? a : (f < 0.5 ? a : b);  // an unbounded end: the nearer one
    return a + f * (b - a);
  };
  const double threshold = between(threshold_lo, threshold_hi);
  const double gap = std::max(between(gap_lo, gap_hi), threshold);
  if (point.loss > threshold && point.loss < gap) return std::nullopt;  // not resolved
  return point.loss <= threshold;
}

}  // namespace modelcast::predictor
