#include "progress_axis.h"
#include "modelcast/error.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace modelcast::predictor::detail {

ProgressAxis::ProgressAxis(std::int64_t total_steps, const std::optional<LrSchedule>& schedule)
    : total_steps_(total_steps), schedule_(schedule) {
  if (total_steps <= 0) throw Error(ErrorCode::kInvalidArgument, "total_steps must be positive");
  if (total_steps > kMaxCurveStep) throw Error(ErrorCode::kInvalidArgument, "total_steps is beyond 2^53, the largest step the predictor takes");
  if (!schedule) return;
  const auto& s = *schedule;
  if (s.steps.empty() || s.steps.size() != s.lr.size())
    throw Error(ErrorCode::kInvalidArgument, "lr_schedule: steps and lr must be non-empty and the same length");
  for (std::size_t i = 0; i < s.lr.size(); ++i) {
    if (!std::isfinite(s.lr[i]) || s.lr[i] < 0)
      throw Error(ErrorCode::kInvalidArgument, "lr_schedule: learning rates must be finite and >= 0");
    if (i > 0 && s.steps[i] <= s.steps[i - 1])
      throw Error(ErrorCode::kInvalidArgument, "lr_schedule: steps must be strictly increasing");
    // Rates are interpolated between steps as doubles, which hold each step exactly up to 2^53.
    if (s.steps[i] > kMaxCurveStep || s.steps[i] < -kMaxCurveStep)
      throw Error(ErrorCode::kInvalidArgument, "lr_schedule: step " + std::to_string(s.steps[i]) +
                                                   " is beyond 2^53, the largest step the predictor takes");
    if (s.lr[i] > peak_lr_) {
      peak_lr_ = s.lr[i];
      peak_step_ = static_cast<double>(s.steps[i]);
    }
  }
  if (!(peak_lr_ > 0)) throw Error(ErrorCode::kInvalidArgument, "lr_schedule: the rate is zero everywhere");
  // Integrate on a grid of at most ~4096 cells; plenty for a smooth schedule. The rate relative
  // to its peak, in [0, 1]: progress is a ratio of integrals, and the rates themselves (1e305)
  // summed to infinity, made every progress NaN and the forecast a flat line said to be another.
  stride_ = std::max<std::int64_t>(1, total_steps / 4096);
  const std::int64_t cells = (total_steps + stride_ - 1) / stride_;
  cumulative_.assign(static_cast<std::size_t>(cells) + 1, 0.0);
  for (std::int64_t c = 0; c < cells; ++c) {
    const double a = static_cast<double>(c * stride_);
    const double b = static_cast<double>(std::min(total_steps, (c + 1) * stride_));
    cumulative_[static_cast<std::size_t>(c) + 1] =
        cumulative_[static_cast<std::size_t>(c)] + 0.5 * (lr_at(a) / peak_lr_ + lr_at(b) / peak_lr_) * (b - a);
  }
  // Progress is the share of the run's cumulative rate: with none, every forecast was NaN.
  if (!(cumulative_.back() > 0)) {
    throw Error(ErrorCode::kInvalidArgument, "lr_schedule: the rate is zero over the whole run (steps 0 to " +
                                                 std::to_string(total_steps) + ")");
  }
}

double ProgressAxis::lr_at(double step) const {
  const auto& s = *schedule_;
  if (step <= static_cast<double>(s.steps.front())) return s.lr.front();
  if (step >= static_cast<double>(s.steps.back())) return s.lr.back();
  const auto it = std::upper_bound(s.steps.begin(), s.steps.end(), step,
                                   [](double v, std::int64_t k) { return v < static_cast<double>(k); });
  const auto i = static_cast<std::size_t>(it - s.steps.begin());
  const double x0 = static_cast<double>(s.steps[i - 1]), x1 = static_cast<double>(s.steps[i]);
  const double f = (step - x0) / (x1 - x0);
  return s.lr[i - 1] + f * (s.lr[i] - s.lr[i - 1]);
}

double ProgressAxis::progress(std::int64_t step) const {
  const double clamped = static_cast<double>(std::clamp<std::int64_t>(step, 0, total_steps_));
  if (cumulative_.empty()) return std::max(clamped, 0.5) / static_cast<double>(total_steps_);
  const double pos = clamped / static_cast<double>(stride_);
  const auto cell = std::min(static_cast<std::size_t>(pos), cumulative_.size() - 2);
  const double frac = pos - static_cast<double>(cell);
  const double value = cumulative_[cell] + frac * (cumulative_[cell + 1] - cumulative_[cell]);
  // Floor keeps x > 0 (families use x^-a, 1/x) even during a zero-rate warm-up.
  return std::max(value / cumulative_.back(), 0.5 / static_cast<double>(total_steps_));
}

double ProgressAxis::anneal_level(std::int64_t step) const {
  if (cumulative_.empty()) return 0.0;
  const double s = static_cast<double>(step);
  if (s <= peak_step_) return 0.0;
  return std::clamp(1.0 - lr_at(s) / peak_lr_, 0.0, 1.0);
}

bool ProgressAxis::anneals_after(std::int64_t step) const {
  if (cumulative_.empty()) return false;
  const double now = anneal_level(step);
  if (anneal_level(total_steps_) > now) return true;
  for (auto k : schedule_->steps)
    if (k > step && k <= total_steps_ && anneal_level(k) > now) return true;
  return false;
}

}  // namespace modelcast::predictor::detail
