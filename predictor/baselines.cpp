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
  // Each boundary snaps to the first logged step at or after it, so only boundaries past the
  // last step taken can add one: walked over the log's points, not over every boundary (one
  // step per boundary over 1e10 steps allocated gigabytes, then failed).
  std::vector<std::int64_t> taken;
  const auto first = curve.steps.begin() + static_cast<std::ptrdiff_t>(warmup_index + 1);
  const std::int64_t last = curve.steps.back();
  std::int64_t b = (curve.steps[warmup_index] / every_steps + 1) * every_steps;
  while (b <= last) {
    const auto it = std::lower_bound(first, curve.steps.end(), b);
    if (it == curve.steps.end()) break;
    taken.push_back(*it);
    const std::int64_t skip = (*it - b) / every_steps + 1;  // to the first boundary past *it
    if (skip > (last - b) / every_steps) break;
    b += skip * every_steps;
  }
  return snap_to_candidates(taken, curve, warmup_index);  // checks the curve as every baseline does
}

}  // namespace modelcast::predictor
