// Cross-record reference curves for the benchmark ("analogue runs"): for a run of record R
// observed up to its warm-up step, the mean loss curve and time profile of the k runs of
// OTHER records whose own curves best match the observed prefix (loss level and step-time
// profile), as functions of progress = step / total_steps. Runs of record R never inform
// their own prior, matching the data's rule of evaluating whole runs grouped by record.
#pragma once

#include <string>
#include <vector>

#include "modelcast/predictor.h"

namespace modelcast::bench {

class ReferencePrior {
 public:
  explicit ReferencePrior(const std::vector<predictor::LossLog>& runs, int grid_points = 201);
  predictor::ReferenceCurve for_prefix(const predictor::LossLog& run, std::size_t observed_points,
                                       std::size_t neighbours = 8) const;

 private:
  struct Profile {
    std::string key;           // track/record
    std::vector<double> loss;  // on the grid
    std::vector<double> time;  // time / end time, on the grid
  };
  double at(const std::vector<double>& v, double u) const;
  std::vector<double> grid_;
  std::vector<Profile> profiles_;
};

}  // namespace modelcast::bench
