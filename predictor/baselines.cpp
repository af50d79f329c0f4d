// Baseline schedules the plan is compared against (same workflow model, same code paths);
// Viper's two rules are in viper_rules.cpp.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "modelcast/predictor_planner.h"
#include "modelcast/error.h"

namespace modelcast::predictor {

std::vector<std::int64_t> every_candidate_schedule(const Trajectory& curve, std::size_t warmup_index) {
  // Through snap_to_candidates, which checks the curve as every other baseline's path does: a
  // trajectory with fewer losses than steps gave a schedule here and an error everywhere else.
  return snap_to_candidates(curve.steps, curve, warmup_index);
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

}  // namespace modelcast::predictor
