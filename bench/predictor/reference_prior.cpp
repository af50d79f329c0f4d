#include "reference_prior.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace modelcast::bench {
namespace {

double interp(const std::vector<double>& xs, const std::vector<double>& ys, double x) {
  if (x <= xs.front()) return ys.front();
  if (x >= xs.back()) return ys.back();
  const auto i = static_cast<std::size_t>(std::upper_bound(xs.begin(), xs.end(), x) - xs.begin());
  const double f = (x - xs[i - 1]) / (xs[i] - xs[i - 1]);
  return ys[i - 1] + f * (ys[i] - ys[i - 1]);
}

}  // namespace

ReferencePrior::ReferencePrior(const std::vector<predictor::LossLog>& runs, int grid_points) {
  for (int i = 0; i < grid_points; ++i) grid_.push_back(static_cast<double>(i) / (grid_points - 1));
  for (const auto& run : runs) {
    if (!run.total_steps || run.points.size() < 3) continue;
    const double total = static_cast<double>(*run.total_steps);
    // Only runs logged to (nearly) their planned end describe the whole shape.
    if (static_cast<double>(run.points.back().step) < 0.95 * total) continue;
    const double t_end = run.points.back().time_s;
    if (!(t_end > 0)) continue;
    std::vector<double> u, loss, tf;
    for (const auto& p : run.points) {
      u.push_back(static_cast<double>(p.step) / total);
      loss.push_back(p.loss);
      tf.push_back(p.time_s / t_end);
    }
    Profile prof;
    prof.key = run.track + "/" + run.record;
    for (double g : grid_) {
      prof.loss.push_back(interp(u, loss, g));
      prof.time.push_back(interp(u, tf, g));
    }
    profiles_.push_back(std::move(prof));
  }
}

double ReferencePrior::at(const std::vector<double>& v, double u) const {
  const double pos = std::clamp(u, 0.0, 1.0) * static_cast<double>(grid_.size() - 1);
  const auto i = std::min(static_cast<std::size_t>(pos), grid_.size() - 2);
  return v[i] + (pos - static_cast<double>(i)) * (v[i + 1] - v[i]);
}

predictor::ReferenceCurve ReferencePrior::for_prefix(const predictor::LossLog& run, std::size_t observed_points,
                                                     std::size_t neighbours) const {
  const std::string own = run.track + "/" + run.record;
  const double total = static_cast<double>(*run.total_steps);
  const auto& pts = run.points;
  const std::size_t k = std::min(observed_points, pts.size());
  const double u_last = static_cast<double>(pts[k - 1].step) / total;
  const double t_last = pts[k - 1].time_s;
  std::vector<std::pair<double, std::size_t>> scored;
  for (std::size_t r = 0; r < profiles_.size(); ++r) {
    const auto& p = profiles_[r];
    if (p.key == own) continue;
    // Loss match on the informative points (step > 0), recent points weighted more; time
    // match on the shape t(u) / t(u_last), which does not need the unknown end time.
    double loss_d = 0, time_d = 0, wsum = 0;
    const double ref_t_last = at(p.time, u_last);
    for (std::size_t i = 0; i < k; ++i) {
      if (pts[i].step <= 0) continue;
      const double u = static_cast<double>(pts[i].step) / total;
      const double w = u / u_last;
      const double dl = std::log(pts[i].loss) - std::log(at(p.loss, u));
      loss_d += w * dl * dl;
      if (ref_t_last > 0 && t_last > 0) {
        const double dt = pts[i].time_s / t_last - at(p.time, u) / ref_t_last;
        time_d += w * dt * dt;
      }
      wsum += w;
    }
    if (wsum <= 0) continue;
    scored.emplace_back(loss_d / wsum + 0.25 * time_d / wsum, r);
  }
  predictor::ReferenceCurve ref;
  if (scored.empty()) return ref;
  const std::size_t take = std::min(neighbours, scored.size());
  std::partial_sort(scored.begin(), scored.begin() + static_cast<std::ptrdiff_t>(take), scored.end());
  ref.progress = grid_;
  ref.loss.assign(grid_.size(), 0.0);
  ref.time_fraction.assign(grid_.size(), 0.0);
  for (std::size_t j = 0; j < take; ++j) {
    const auto& p = profiles_[scored[j].second];
    for (std::size_t g = 0; g < grid_.size(); ++g) {
      ref.loss[g] += p.loss[g] / static_cast<double>(take);
      ref.time_fraction[g] += p.time[g] / static_cast<double>(take);
    }
  }
  return ref;
}

}  // namespace modelcast::bench
