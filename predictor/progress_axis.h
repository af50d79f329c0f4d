// The independent variable the curve families are fitted against. Without a learning-rate
// schedule it is step / total_steps. With one it is the cumulative learning rate (the
// "progress made" - loss follows it better than the step when the rate changes), normalised
// to 1 at total_steps, plus an annealing level in [0, 1] (how far the rate has decayed below
// its peak) that drives the extra drop real runs show when the rate decays.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "modelcast/predictor_forecast.h"

namespace modelcast::predictor::detail {

class ProgressAxis {
 public:
  // Throws Error(kInvalidArgument) on a malformed schedule (sizes differ, steps not increasing,
  // negative or non-finite rates, all-zero rate).
  ProgressAxis(std::int64_t total_steps, const std::optional<LrSchedule>& schedule);

  double progress(std::int64_t step) const;  // in (0, 1] for step > 0
  double anneal_level(std::int64_t step) const;  // 0 before/at the peak rate, 1 at rate 0
  bool schedule_aware() const { return !cumulative_.empty(); }
  // True when the rate will anneal further after `step` (a later step has a higher anneal level).
  bool anneals_after(std::int64_t step) const;

 private:
  double lr_at(double step) const;
  std::int64_t total_steps_;
  std::optional<LrSchedule> schedule_;
  double peak_lr_ = 0.0;
  double peak_step_ = 0.0;
  std::vector<double> cumulative_;  // cumulative rate at each integer step 0..total (sampled)
  std::int64_t stride_ = 1;
};

}  // namespace modelcast::predictor::detail
