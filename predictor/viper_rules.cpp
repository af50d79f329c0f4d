// Viper's fixed-interval and greedy publish rules (predictor_viper.h), and the planner's
// baseline entry points that return only their steps.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>

#include "modelcast/error.h"
#include "modelcast/predictor_viper.h"

namespace modelcast::predictor {
namespace {

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

}  // namespace

ViperSchedule viper_fixed_interval(const Trajectory& predicted, std::size_t warmup_index, const PublishCosts& costs) {
  validate_problem(predicted, warmup_index, costs);
  const std::size_t n = predicted.steps.size() - warmup_index - 1;
  const std::size_t cap = publishes_allowed(costs, n);
  const double nothing = evaluate_cil(predicted, warmup_index, costs, {});
  ViperSchedule best;
  best.predicted_cil = std::numeric_limits<double>::infinity();
  for (std::size_t k = 1; k <= n; ++k) {
    std::vector<std::int64_t> steps;
    for (std::size_t i = warmup_index + k; i < predicted.steps.size() && steps.size() < cap; i += k)
      steps.push_back(predicted.steps[i]);
    const double cil = evaluate_cil(predicted, warmup_index, costs, steps);
    if (cil < best.predicted_cil) {
      best.predicted_cil = cil;
      best.interval = k;
      best.publish_steps = std::move(steps);
    }
  }
  if (n == 0) {
    best = {};
    best.predicted_cil = nothing;
    best.reason = "fixed interval: no candidate step after the warm-up step, nothing to publish";
    return best;
  }
  if (cap == 0) {
    best = {};
    best.predicted_cil = nothing;
    best.reason = "fixed interval: max_slowdown_s allows no publish";
    return best;
  }
  if (nothing < best.predicted_cil) {
    best.reason = "fixed interval: publishing nothing has the lowest predicted CIL (" + num(nothing) +
                  "); the best interval, every " + std::to_string(best.interval) + " candidate(s) (" +
                  std::to_string(best.publish_steps.size()) + " publishes), predicts " + num(best.predicted_cil) +
                  ": on Viper's forecast no publish gains more than its stall and delivery cost";
    best.publish_steps.clear();
    best.interval = 0;
    best.predicted_cil = nothing;
    return best;
  }
  best.reason = "fixed interval: every " + std::to_string(best.interval) + " candidate(s), " +
                std::to_string(best.publish_steps.size()) + " publishes, predicted CIL " + num(best.predicted_cil) +
                " against " + num(nothing) + " publishing nothing";
  return best;
}

ViperThreshold viper_drop_threshold(const Trajectory& curve, std::size_t warmup_index) {
  if (warmup_index >= curve.loss.size())
    throw Error(ErrorCode::kInvalidArgument, "viper threshold: warm-up index " + std::to_string(warmup_index) +
                                                 " is past the end of the curve");
  for (std::size_t i = 0; i <= warmup_index; ++i) {  // a NaN was reported as "losses this large overflow"
    if (!std::isfinite(curve.loss[i])) {
      throw Error(ErrorCode::kInvalidArgument, "viper threshold: the loss at warm-up point " + std::to_string(i) +
                                                   " (step " + (i < curve.steps.size() ? std::to_string(curve.steps[i]) : "?") +
                                                   ") is not finite");
    }
  }
  ViperThreshold t;
  if (warmup_index < 1) return t;  // no drop to measure: every predicted fall counts (ours)
  t.drops = warmup_index;
  for (std::size_t i = 1; i <= warmup_index; ++i) t.mean_drop += curve.loss[i - 1] - curve.loss[i];
  t.mean_drop /= static_cast<double>(t.drops);
  double ss = 0.0;
  for (std::size_t i = 1; i <= warmup_index; ++i) {
    const double d = curve.loss[i - 1] - curve.loss[i] - t.mean_drop;
    ss += d * d;
  }
  t.sd_drop = std::sqrt(ss / static_cast<double>(t.drops));
  t.threshold = t.mean_drop + t.sd_drop;
  if (!std::isfinite(t.threshold)) {
    // Finite losses can still overflow here (drops of 1e308 squared): name the largest one.
    double largest = 0.0;
    for (std::size_t i = 0; i <= warmup_index; ++i) largest = std::max(largest, std::abs(curve.loss[i]));
    std::ostringstream why;
    why << "viper threshold: the loss drops of the warm-up (points 0-" << warmup_index
        << ") are not finite numbers: its largest |loss| is " << largest << "; losses this large overflow, rescale them";
    throw Error(ErrorCode::kInvalidArgument, why.str());
  }
  return t;
}

ViperSchedule viper_greedy(const Trajectory& predicted, std::size_t warmup_index, const PublishCosts& costs) {
  validate_problem(predicted, warmup_index, costs);
  const ViperThreshold t = viper_drop_threshold(predicted, warmup_index);
  const std::size_t cap = publishes_allowed(costs, predicted.steps.size());
  ViperSchedule out;
  out.threshold = t.threshold;
  double last = predicted.loss[warmup_index];
  for (std::size_t i = warmup_index + 1; i < predicted.steps.size() && out.publish_steps.size() < cap; ++i) {
    const double loss = predicted.loss[i];
    if (loss < last && last - loss > t.threshold) {
      out.publish_steps.push_back(predicted.steps[i]);
      last = loss;
    }
  }
  out.predicted_cil = evaluate_cil(predicted, warmup_index, costs, out.publish_steps);
  const std::string rule =
      t.drops == 0 ? "threshold 0 (one warm-up loss: no drop between consecutive warm-up losses to measure)"
                   : "threshold " + num(t.threshold) + " = mean " + num(t.mean_drop) + " + sd " + num(t.sd_drop) + " of the " +
                         std::to_string(t.drops) + " drops between consecutive warm-up losses";
  if (!out.publish_steps.empty()) {
    out.reason = "greedy: " + std::to_string(out.publish_steps.size()) +
                 " publishes, each where the forecast fell below the last published loss by more than the " + rule;
    return out;
  }
  const double w_loss = predicted.loss[warmup_index];
  double lowest = w_loss;
  for (std::size_t i = warmup_index + 1; i < predicted.loss.size(); ++i) lowest = std::min(lowest, predicted.loss[i]);
  if (warmup_index + 1 == predicted.steps.size())
    out.reason = "greedy: no candidate step after the warm-up step, nothing to publish";
  else if (cap == 0)
    out.reason = "greedy: max_slowdown_s allows no publish";
  else if (!(lowest < w_loss))
    out.reason = "greedy: publishes nothing: Viper's forecast never falls below the warm-up loss " + num(w_loss);
  else
    out.reason = "greedy: publishes nothing: Viper's forecast falls at most " + num(w_loss - lowest) +
                 " below the warm-up loss " + num(w_loss) + ", not more than the " + rule;
  return out;
}

std::vector<std::int64_t> fixed_interval_schedule(const Trajectory& predicted, std::size_t warmup_index,
                                                  const PublishCosts& costs) {
  return viper_fixed_interval(predicted, warmup_index, costs).publish_steps;
}

std::vector<std::int64_t> threshold_schedule(const Trajectory& predicted, std::size_t warmup_index,
                                             const PublishCosts& costs) {
  return viper_greedy(predicted, warmup_index, costs).publish_steps;
}

}  // namespace modelcast::predictor
