// Exact publish planning: dynamic programming over (last publish, number of publishes).
//
// With the j-th publish (1-based) at candidate i, the version becomes servable at
//   s(i, j) = t_i + j·c + d
// (j stalls have delayed step i's completion by (j-1)·c, its own stall adds c, delivery d).
// The served loss is a staircase, so CIL/r = sum over versions of loss x (next servable time,
// clipped to the window end, minus this version's servable time). For consecutive publishes
// i -> i' (j -> j+1) the segment length is t_i' - t_i + c, independent of j, which gives
//   f(i', j+1) = min_{i < i'} f(i, j) + L_i·(t_i' - t_i + c),
// closed by L_i·(E - s(i, j)) at the window end E. Publishes servable after E change nothing
// but cost slowdown, so they are never part of an optimum and are pruned.
// The inner minimum is a lower envelope of lines y = L_i·x + (f(i, j) - L_i·(t_i - c)) queried at
// x = t_i', so each layer is O(n log n) with a Li Chao tree: O(n log n x publishes) in all,
// fast enough for exact plans on logs with a point per step.
#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>

#include "modelcast/predictor_planner.h"
#include "modelcast/error.h"

namespace modelcast::predictor {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Minimum of a set of lines at fixed, sorted query abscissae (Li Chao segment tree).
class LowerEnvelope {
 public:
  explicit LowerEnvelope(const std::vector<double>& xs) : xs_(xs), lines_(4 * std::max<std::size_t>(1, xs.size())) {}

  void insert(double slope, double intercept, int id) { insert(1, 0, xs_.size() - 1, {slope, intercept, id}); }

  // Minimum value at xs[k] and the id of the line achieving it (-1 when empty).
  std::pair<double, int> query(std::size_t k) const {
    std::size_t node = 1, lo = 0, hi = xs_.size() - 1;
    std::pair<double, int> best{kInf, -1};
    while (true) {
      const auto& line = lines_[node];
      if (line.id >= 0) {
        const double v = line.at(xs_[k]);
        if (v < best.first) best = {v, line.id};
      }
      if (lo == hi) break;
      const std::size_t mid = (lo + hi) / 2;
      if (k <= mid) node = 2 * node, hi = mid;
      else node = 2 * node + 1, lo = mid + 1;
    }
    return best;
  }

 private:
  struct Line {
    double slope = 0, intercept = 0;
    int id = -1;
    double at(double x) const { return slope * x + intercept; }
  };
  void insert(std::size_t node, std::size_t lo, std::size_t hi, Line line) {
    while (true) {
      auto& here = lines_[node];
      if (here.id < 0) {
        here = line;
        return;
      }
      const std::size_t mid = (lo + hi) / 2;
      const bool better_mid = line.at(xs_[mid]) < here.at(xs_[mid]);
      if (better_mid) std::swap(here, line);
      if (lo == hi) return;
      // The loser can only win on one side of mid.
      if (line.at(xs_[lo]) < here.at(xs_[lo])) node = 2 * node, hi = mid;
      else if (line.at(xs_[hi]) < here.at(xs_[hi])) node = 2 * node + 1, lo = mid + 1;
      else return;
    }
  }
  const std::vector<double>& xs_;
  std::vector<Line> lines_;
};

double window_end(const Trajectory& curve, std::size_t w, const PublishCosts& costs) {
  const double h = std::isfinite(costs.window_s) ? costs.window_s : curve.time_s.back() - curve.time_s[w];
  return curve.time_s[w] + h;
}

void validate_trajectory(const Trajectory& t) {
  if (t.steps.size() != t.loss.size() || t.steps.size() != t.time_s.size())
    throw Error(ErrorCode::kInvalidArgument, "trajectory: steps, loss and time_s must have the same length");
  for (std::size_t i = 0; i < t.steps.size(); ++i) {
    if (!std::isfinite(t.loss[i]) || !std::isfinite(t.time_s[i]))
      throw Error(ErrorCode::kInvalidArgument, "trajectory: non-finite loss or time at step " + std::to_string(t.steps[i]));
    if (t.steps[i] > kMaxCurveStep || t.steps[i] < -kMaxCurveStep)
      throw Error(ErrorCode::kInvalidArgument, "trajectory: step " + std::to_string(t.steps[i]) +
                                                   " is beyond 2^53, the largest step the predictor takes");
    if (i > 0 && t.steps[i] <= t.steps[i - 1])
      throw Error(ErrorCode::kInvalidArgument, "trajectory: steps must be strictly increasing at step " + std::to_string(t.steps[i]));
    if (i > 0 && t.time_s[i] < t.time_s[i - 1])
      throw Error(ErrorCode::kInvalidArgument, "trajectory: time must not decrease at step " + std::to_string(t.steps[i]));
  }
}

}  // namespace

void validate_costs(const PublishCosts& costs, const PublishCostNames& names) {
  auto refuse = [&](std::string_view field, const char* rule, double value) {
    std::ostringstream why;
    why << names.context << field << " must be " << rule << ", got " << value;
    throw Error(ErrorCode::kInvalidArgument, why.str());
  };
  if (!std::isfinite(costs.stall_s) || costs.stall_s < 0) refuse(names.stall_s, "finite and >= 0", costs.stall_s);
  if (!std::isfinite(costs.delivery_s) || costs.delivery_s < 0) refuse(names.delivery_s, "finite and >= 0", costs.delivery_s);
  if (!std::isfinite(costs.request_rate) || costs.request_rate <= 0) refuse(names.request_rate, "finite and > 0", costs.request_rate);
  if (!std::isnan(costs.window_s) && (!std::isfinite(costs.window_s) || costs.window_s < 0))
    refuse(names.window_s, "finite and >= 0 (or NaN: not given)", costs.window_s);
  if (std::isnan(costs.max_slowdown_s) || costs.max_slowdown_s < 0)
    refuse(names.max_slowdown_s, ">= 0 (infinity: no cap)", costs.max_slowdown_s);
}

std::size_t publishes_allowed(const PublishCosts& costs, std::size_t limit) {
  if (!(costs.stall_s > 0) || !std::isfinite(costs.max_slowdown_s)) return limit;
  // Compared as doubles: a cap of 1e20 s (or a denormal stall) is past every integer type, and
  // casting it was undefined (it came out as "no publish").
  const double fit = std::floor(costs.max_slowdown_s / costs.stall_s + 1e-9);
  return fit < static_cast<double>(limit) ? static_cast<std::size_t>(fit) : limit;
}

void validate_problem(const Trajectory& curve, std::size_t warmup_index, const PublishCosts& costs) {
  validate_trajectory(curve);
  if (warmup_index >= curve.steps.size())
    throw Error(ErrorCode::kInvalidArgument, "warm-up index " + std::to_string(warmup_index) + " is past the end of the curve");
  validate_costs(costs);
}

double evaluate_cil(const Trajectory& curve, std::size_t warmup_index, const PublishCosts& costs,
                    std::span<const std::int64_t> publish_steps) {
  validate_problem(curve, warmup_index, costs);
  const double start = curve.time_s[warmup_index];
  const double end = window_end(curve, warmup_index, costs);
  double served_loss = curve.loss[warmup_index];
  double served_since = start;
  double integral = 0.0;
  std::size_t search_from = warmup_index + 1;
  for (std::size_t j = 0; j < publish_steps.size(); ++j) {
    const auto step = publish_steps[j];
    const auto it = std::lower_bound(curve.steps.begin() + static_cast<std::ptrdiff_t>(search_from), curve.steps.end(), step);
    if (it == curve.steps.end() || *it != step)
      throw Error(ErrorCode::kInvalidArgument, "publish step " + std::to_string(step) +
                                  " is not a logged step after the warm-up step " +
                                  std::to_string(curve.steps[warmup_index]) + " (or steps are not increasing)");
    const auto i = static_cast<std::size_t>(it - curve.steps.begin());
    search_from = i + 1;
    const double servable = curve.time_s[i] + static_cast<double>(j + 1) * costs.stall_s + costs.delivery_s;
    if (servable >= end) break;  // later versions arrive even later
    integral += served_loss * (servable - served_since);
    served_loss = curve.loss[i];
    served_since = servable;
  }
  integral += served_loss * std::max(0.0, end - served_since);
  return costs.request_rate * integral;
}

namespace {

// Some optimal schedule publishes only candidates whose loss is below the origin's and below every
// earlier candidate's, so the search can skip the others (exactly, not as a heuristic):
//  - a publish whose loss is not below the version it replaces can be dropped: that version is
//    served instead, no worse, and every later publish becomes servable one stall earlier, where it
//    replaces a version that is worse than it once the last such publish is dropped first;
//  - in a schedule of decreasing losses, a publish with an earlier candidate q at or below its loss
//    has q after the publish before it (that one is a strict record low), and publishing q instead
//    serves a loss no higher, sooner, with the same count and the later publishes unmoved.
// On a noisy per-step log that leaves a few hundred of 10^5 points, which is what makes the exact
// plan affordable on such logs (the layers below cost O(n log n) each).
Trajectory record_lows(const Trajectory& future, double origin_loss) {
  Trajectory lows;
  double lowest = origin_loss;
  for (std::size_t i = 0; i < future.steps.size(); ++i) {
    if (!(future.loss[i] < lowest)) continue;
    lowest = future.loss[i];
    lows.steps.push_back(future.steps[i]);
    lows.loss.push_back(future.loss[i]);
    lows.time_s.push_back(future.time_s[i]);
  }
  return lows;
}

// The exact DP on candidates that are record lows (plan_from's search).
ScheduleResult plan_on_record_lows(double origin_loss, double origin_servable_s, int publishes_done,
                                   double window_end_s, const Trajectory& future, const PublishCosts& costs) {
  const std::size_t n = future.steps.size();
  const double c = costs.stall_s, d = costs.delivery_s, end = window_end_s;
  ScheduleResult result;
  double best = origin_loss * std::max(0.0, end - origin_servable_s);
  int best_j = 0;
  std::size_t best_i = 0;

  const long max_publishes = static_cast<long>(publishes_allowed(costs, n + static_cast<std::size_t>(publishes_done))) - publishes_done;

  // parent[j][i]: previous candidate of the optimal path to state (i, j+1); -1 = origin.
  std::vector<std::vector<int>> parent;
  std::vector<double> f(n, kInf), next(n, kInf);
  for (std::size_t i = 0; i < n; ++i) {
    const double s = future.time_s[i] + c + d;
    if (s < end && s >= origin_servable_s) f[i] = origin_loss * (s - origin_servable_s);
  }
  parent.emplace_back(n, -1);
  // suffix_min[i]: lowest loss among candidates i.. (a version served after the publish at i
  // is one of them), for a lower bound on every schedule that extends a state.
  std::vector<double> suffix_min(n, kInf);
  for (std::size_t i = n; i-- > 0;) suffix_min[i] = std::min(future.loss[i], i + 1 < n ? suffix_min[i + 1] : kInf);
  for (long j = 1; j <= max_publishes; ++j) {
    bool any = false;
    double lower_bound = kInf;  // no schedule extending a state of this layer costs less
    for (std::size_t i = 0; i < n; ++i) {
      if (f[i] == kInf) continue;
      any = true;
      const double s = future.time_s[i] + static_cast<double>(j) * c + d;
      const double total = f[i] + future.loss[i] * (end - s);
      if (total < best - 1e-12 * std::abs(best)) {
        best = total;
        best_j = static_cast<int>(j);
        best_i = i;
      }
      lower_bound = std::min(lower_bound, f[i] + suffix_min[i] * (end - s));
    }
    if (!any || j == max_publishes) break;
    // Branch and bound: the served loss after s is at least suffix_min[i] until the window
    // ends, so when no state can beat the best schedule by more than the tie tolerance, more
    // publishes cannot either (and ties go to fewer publishes).
    if (lower_bound >= best - 1e-12 * std::abs(best)) break;
    std::vector<int> par(n, -1);
    std::fill(next.begin(), next.end(), kInf);
    LowerEnvelope envelope(future.time_s);
    for (std::size_t k = 1; k < n; ++k) {
      // Line of predecessor k-1: f(i, j) + L_i·(t_k - t_i + c) = L_i·t_k + (f(i, j) - L_i·(t_i - c)).
      if (f[k - 1] != kInf)
        envelope.insert(future.loss[k - 1], f[k - 1] - future.loss[k - 1] * (future.time_s[k - 1] - c), static_cast<int>(k - 1));
      if (future.time_s[k] + static_cast<double>(j + 1) * c + d >= end) continue;
      const auto [v, arg] = envelope.query(k);
      next[k] = v;
      par[k] = arg;
    }
    parent.push_back(std::move(par));
    std::swap(f, next);
  }
  if (best_j > 0) {
    std::vector<std::int64_t> steps;
    int i = static_cast<int>(best_i);
    for (int j = best_j; j >= 1 && i >= 0; --j) {
      steps.push_back(future.steps[static_cast<std::size_t>(i)]);
      i = parent[static_cast<std::size_t>(j - 1)][static_cast<std::size_t>(i)];
    }
    std::reverse(steps.begin(), steps.end());
    result.publish_steps = std::move(steps);
  }
  result.cil = costs.request_rate * best;
  result.slowdown_s = c * static_cast<double>(result.publish_steps.size());
  return result;
}

}  // namespace

ScheduleResult plan_from(double origin_loss, double origin_servable_s, int publishes_done, double window_end_s,
                         const Trajectory& future, const PublishCosts& costs) {
  validate_trajectory(future);
  validate_costs(costs);
  // A NaN here made every schedule's CIL NaN (or the window empty: "publish nothing", CIL 0).
  for (auto [name, value] : {std::pair{"origin_loss", origin_loss}, std::pair{"origin_servable_s", origin_servable_s},
                             std::pair{"window_end_s", window_end_s}}) {
    if (!std::isfinite(value)) {
      throw Error(ErrorCode::kInvalidArgument, std::string("plan_from: ") + name + " must be finite, got " + std::to_string(value));
    }
  }
  if (publishes_done < 0) {
    throw Error(ErrorCode::kInvalidArgument, "plan_from: publishes_done must be >= 0, got " + std::to_string(publishes_done));
  }
  const Trajectory lows = record_lows(future, origin_loss);
  return plan_on_record_lows(origin_loss, origin_servable_s, publishes_done, window_end_s, lows, costs);
}

ScheduleResult plan_optimal(const Trajectory& curve, std::size_t warmup_index, const PublishCosts& costs) {
  validate_problem(curve, warmup_index, costs);
  Trajectory future;
  for (std::size_t i = warmup_index + 1; i < curve.steps.size(); ++i) {
    future.steps.push_back(curve.steps[i]);
    future.loss.push_back(curve.loss[i]);
    future.time_s.push_back(curve.time_s[i]);
  }
  auto r = plan_from(curve.loss[warmup_index], curve.time_s[warmup_index], 0,
                     window_end(curve, warmup_index, costs), future, costs);
  return r;
}

std::vector<std::int64_t> snap_to_candidates(std::span<const std::int64_t> planned, const Trajectory& curve,
                                             std::size_t warmup_index) {
  validate_trajectory(curve);  // sorted steps, which the search below takes for granted
  if (warmup_index >= curve.steps.size())
    throw Error(ErrorCode::kInvalidArgument, "warm-up index " + std::to_string(warmup_index) + " is past the end of the curve");
  std::vector<std::int64_t> out;
  for (auto p : planned) {
    const auto first = curve.steps.begin() + static_cast<std::ptrdiff_t>(warmup_index + 1);
    const auto it = std::lower_bound(first, curve.steps.end(), p);
    if (it == curve.steps.end()) continue;
    if (out.empty() || *it > out.back()) out.push_back(*it);
  }
  return out;
}

Trajectory trajectory_of(std::span<const CurvePoint> points) {
  Trajectory t;
  for (const auto& p : points) {
    t.steps.push_back(p.step);
    t.loss.push_back(p.loss);
    t.time_s.push_back(p.time_s);
  }
  return t;
}

Trajectory extend_with_forecast(std::span<const CurvePoint> prefix, const Forecast& forecast) {
  if (forecast.loss.size() != forecast.steps.size() || forecast.time_s.size() != forecast.steps.size()) {
    throw Error(ErrorCode::kInvalidArgument, "forecast: " + std::to_string(forecast.steps.size()) + " steps, " +
                                                 std::to_string(forecast.loss.size()) + " losses and " +
                                                 std::to_string(forecast.time_s.size()) + " times; they must be as many");
  }
  auto t = trajectory_of(prefix);
  for (std::size_t i = 0; i < forecast.steps.size(); ++i) {
    t.steps.push_back(forecast.steps[i]);
    t.loss.push_back(forecast.loss[i]);
    t.time_s.push_back(t.time_s.empty() ? forecast.time_s[i] : std::max(forecast.time_s[i], t.time_s.back()));
  }
  return t;
}

}  // namespace modelcast::predictor
