// Online publish scheduler for the producer: feed it every logged loss, ask it at each
// logged step whether to publish now. It refits the forecast as points arrive, re-plans the
// rest of the run exactly, and commits only the next decision.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <vector>

#include "modelcast/predictor_forecast.h"
#include "modelcast/predictor_planner.h"

namespace modelcast::predictor {

struct OnlineOptions {
  ForecastOptions forecast;    // total_steps required
  PublishCosts costs;          // window_s NaN: forecast end of training minus warm-up time
  std::int64_t warmup_step = 0;  // inference starts when this step completes (must be observed)
  // Refit the forecast when the number of observed points grew by this fraction since the last
  // fit (always at least one new point). Between refits the last forecast is re-planned.
  double refit_growth = 0.05;
  // Plans consider at most this many future candidates (evenly thinned, "now" always kept),
  // bounding the cost of re-planning at every logged step on very long logs.
  int max_candidates = 160;
  // How to forecast (empty: forecast_curve). Lets callers cache fits or inject a known curve;
  // it is called from should_publish() on the scheduler's thread.
  std::function<Forecast(std::span<const CurvePoint>, const ForecastOptions&)> forecaster;
};

// Not thread-safe: one producer thread drives it. Throws std::invalid_argument on
// non-increasing steps, non-finite values or negative costs.
class OnlineScheduler {
 public:
  explicit OnlineScheduler(OnlineOptions options);

  // wall_time_s: producer's training clock, including the stalls of earlier publishes.
  void observe(std::int64_t step, double loss, double wall_time_s);

  // Decision for the latest observed step (must equal `step`). Returns true when publishing
  // now is the first move of the currently optimal plan; the publish is then recorded with
  // the current stall cost. Always false up to the warm-up step. Re-plans after each refit,
  // after set_costs, and when the previous plan's next publish step is reached.
  bool should_publish(std::int64_t step);

  // Update c and d from the producer's measured stall and delivery times.
  void set_costs(double stall_s, double delivery_s);

  const std::vector<std::int64_t>& published_steps() const { return published_; }
  // The forecast used for the latest decision (empty before the warm-up step).
  const Forecast& last_forecast() const { return forecast_; }

 private:
  bool refit_if_due();  // true when it refitted

  OnlineOptions options_;
  std::vector<CurvePoint> observed_;  // times with past stalls removed
  std::vector<std::int64_t> published_;
  double stall_total_s_ = 0.0;
  double warmup_time_s_ = std::numeric_limits<double>::quiet_NaN();
  double window_end_s_ = std::numeric_limits<double>::quiet_NaN();  // on the stall-free clock
  double origin_loss_ = 0.0;
  double origin_servable_s_ = 0.0;  // on the producer's clock
  std::size_t points_at_last_fit_ = 0;
  Forecast forecast_;
  // Next publish step of the last plan; re-planning is skipped before it unless the forecast
  // was refitted (the plan stays optimal for an unchanged forecast).
  std::int64_t planned_next_publish_ = -1;
};

}  // namespace modelcast::predictor
