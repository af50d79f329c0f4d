// Viper's two publish rules, the baselines the scheduler is compared with, as their paper states
// them (Ye et al., "Viper: A High-Performance I/O Framework for Transparently Updating, Storing,
// and Transferring Deep Neural Network Models", ICPP 2024, section 4.3, Algorithms 2 and 3).
// Both plan once, at the end of the warm-up, on `predicted`: the logged losses up to
// warmup_index (the warm-up) followed by Viper's forecast of the rest (forecast_viper,
// extend_with_forecast). The candidates are predicted's steps after the warm-up step W (the
// paper's iterations; here the logged evaluation steps), and CIL is this project's workflow
// model (predictor_planner.h). Where the paper is silent the choices are ours and say so. Every
// result carries the reason for its schedule, in particular for an empty one. Pure functions;
// they throw Error(kInvalidArgument) on malformed input (validate_problem).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "modelcast/predictor_planner.h"

namespace modelcast::predictor {

struct ViperSchedule {
  std::vector<std::int64_t> publish_steps;
  double predicted_cil = 0.0;  // of publish_steps, on predicted
  std::size_t interval = 0;    // fixed interval: every interval-th candidate (0: publish nothing)
  double threshold = std::numeric_limits<double>::quiet_NaN();  // greedy: the loss drop it needs
  std::string reason;          // why these steps (why none, when empty)
};

// Algorithm 2, fixed interval: for every interval k = 1 .. n (n candidates after W) publish at
// the k-th, 2k-th, ... candidate, then try publishing nothing; keep the first schedule with the
// lowest predicted CIL. Ties therefore go to the shortest interval, as in the paper, where the
// first minimum found (strict <) is kept and "nothing" comes last: on a flat forecast it
// publishes at every candidate. Ours: publishes past max_slowdown_s's cap are dropped.
ViperSchedule viper_fixed_interval(const Trajectory& predicted, std::size_t warmup_index, const PublishCosts& costs);

// The greedy rule's threshold: the mean plus the standard deviation of the differences between
// consecutive warm-up losses (points 0 .. warmup_index of the curve). Assumptions where the paper
// is silent: a difference is the drop, earlier minus later loss (positive while the loss falls);
// the standard deviation is the population one (numpy's default; the paper's code is Python).
// With a single warm-up point there is no difference to measure and the threshold is 0 (ours).
struct ViperThreshold {
  double threshold = 0.0, mean_drop = 0.0, sd_drop = 0.0;
  std::size_t drops = 0;
};
ViperThreshold viper_drop_threshold(const Trajectory& curve, std::size_t warmup_index);

// Algorithm 3, greedy: walk the candidates after W and publish at each one whose predicted loss
// is below the last published one's (the warm-up loss at first) by more than the threshold
// (viper_drop_threshold on predicted's warm-up). Costs only cap the number of publishes
// (max_slowdown_s, ours); the rule itself does not weigh them.
ViperSchedule viper_greedy(const Trajectory& predicted, std::size_t warmup_index, const PublishCosts& costs);

}  // namespace modelcast::predictor
