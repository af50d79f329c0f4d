// Baseline schedules the plan is compared against (same workflow model, same code paths).
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "modelcast/predictor_planner.h"
#include "modelcast/error.h"

namespace modelcast::predictor {
namespace {

std::size_t publish_cap(const PublishCosts& costs, std::size_t n) {
  if (costs.stall_s > 0 && std::isfinite(costs.max_slowdown_s))
    return std::min(n, static_cast<std::size_t>(std::floor(costs.max_slowdown_s / costs.stall_s + 1e-9)));
  return n;
}

}  // namespace

std::vector<std::int64_t> every_candidate_schedule(const Trajectory& curve, std::size_t warmup_index) {
  if (warmup_index >= curve.steps.size()) throw Error(ErrorCode::kInvalidArgument, "warm-up index past the end of the curve");
  return {curve.steps.begin() + static_cast<std::ptrdiff_t>(warmup_index + 1), curve.steps.end()};
}

std::vector<std::int64_t> every_n_steps_schedule(const Trajectory& curve, std::size_t warmup_index,
                                                 std::int64_t every_steps) {
  if (every_steps <= 0) throw Error(ErrorCode::kInvalidArgument, "epoch steps must be positive, got " + std::to_string(every_steps));
  if (warmup_index >= curve.steps.size()) throw Error(ErrorCode::kInvalidArgument, "warm-up index past the end of the curve");
  std::vector<std::int64_t> boundaries;
  const std::int64_t w = curve.steps[warmup_index];
  for (std::int64_t b = (w / every_steps + 1) * every_steps; b <= curve.steps.back(); b += every_steps) boundaries.push_back(b);
  return snap_to_candidates(boundaries, curve, warmup_index);
}

std::vector<std::int64_t> fixed_interval_schedule(const Trajectory& predicted, std::size_t warmup_index,
                                                  const PublishCosts& costs) {
  validate_problem(predicted, warmup_index, costs);
  const std::size_t n = predicted.steps.size() - warmup_index - 1;
  const std::size_t cap = publish_cap(costs, n);
  std::vector<std::int64_t> best_steps;
  double best = evaluate_cil(predicted, warmup_index, costs, best_steps);
  for (std::size_t k = 1; k <= n; ++k) {
    std::vector<std::int64_t> steps;
    for (std::size_t i = warmup_index + k; i < predicted.steps.size() && steps.size() < cap; i += k)
      steps.push_back(predicted.steps[i]);
    const double cil = evaluate_cil(predicted, warmup_index, costs, steps);
    if (cil < best - 1e-12 * std::abs(best)) {
      best = cil;
      best_steps = std::move(steps);
    }
  }
  return best_steps;
}

std::vector<std::int64_t> threshold_schedule(const Trajectory& predicted, std::size_t warmup_index,
                                             const PublishCosts& costs) {
  validate_problem(predicted, warmup_index, costs);
  const std::size_t cap = publish_cap(costs, predicted.steps.size());
  const double base = predicted.loss[warmup_index];
  double total_drop = 0.0;
  for (std::size_t i = warmup_index + 1; i < predicted.steps.size(); ++i) total_drop = std::max(total_drop, base - predicted.loss[i]);
  std::vector<std::int64_t> best_steps;
  if (!(total_drop > 0)) return best_steps;  // a flat forecast: Viper publishes nothing
  double best = evaluate_cil(predicted, warmup_index, costs, best_steps);
  for (int g = 0; g <= 40; ++g) {
    // Thresholds from 0.1 % to 100 % of the predicted drop, geometric.
    const double threshold = total_drop * std::pow(10.0, -3.0 + 3.0 * g / 40.0);
    std::vector<std::int64_t> steps;
    double last = base;
    for (std::size_t i = warmup_index + 1; i < predicted.steps.size() && steps.size() < cap; ++i) {
      if (last - predicted.loss[i] >= threshold) {
        steps.push_back(predicted.steps[i]);
        last = predicted.loss[i];
      }
    }
    const double cil = evaluate_cil(predicted, warmup_index, costs, steps);
    if (cil < best - 1e-12 * std::abs(best)) {
      best = cil;
      best_steps = std::move(steps);
    }
  }
  return best_steps;
}

}  // namespace modelcast::predictor
