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
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include "cil_ties.h"
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
  // An empty window scores nothing: every schedule, publishing or not, came out at CIL 0, and a
  // plan on it published nothing without a word.
  if (!std::isnan(costs.window_s) && (!std::isfinite(costs.window_s) || costs.window_s <= 0))
    refuse(names.window_s, "finite and > 0 (or NaN: not given)", costs.window_s);
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
  // A window too short to move the warm-up's time scores nothing, as an empty one would (which
  // validate_costs refuses): every schedule came out at CIL 0, "no gain achievable".
  const double from = curve.time_s[warmup_index];
  if (std::isfinite(costs.window_s) && !(from + costs.window_s > from)) {
    std::ostringstream why;
    why << "window_s " << costs.window_s << " s is lost in rounding when added to the warm-up's time (" << from
        << " s): the window would score no time at all";
    throw Error(ErrorCode::kInvalidArgument, why.str());
  }
}

double evaluate_cil(const Trajectory& curve, std::size_t warmup_index, const PublishCosts& costs,
                    std::span<const std::int64_t> publish_steps) {
  validate_problem(curve, warmup_index, costs);
  const double start = curve.time_s[warmup_index];
  const double end = window_end(curve, warmup_index, costs);
  // Every step is checked before any is scored: the scoring stops at the first version servable
  // after the window, and a step after it that was never logged was taken without a word.
  std::vector<std::size_t> indices;
  indices.reserve(publish_steps.size());
  std::size_t search_from = warmup_index + 1;
  for (std::size_t j = 0; j < publish_steps.size(); ++j) {
    const auto step = publish_steps[j];
    const auto it = std::lower_bound(curve.steps.begin() + static_cast<std::ptrdiff_t>(search_from), curve.steps.end(), step);
    if (it == curve.steps.end() || *it != step) {
      const std::string named = "publish step " + std::to_string(step);
      if (!std::binary_search(curve.steps.begin(), curve.steps.end(), step))
        throw Error(ErrorCode::kInvalidArgument, named + " is not a logged step");
      if (step <= curve.steps[warmup_index])
        throw Error(ErrorCode::kInvalidArgument, named + " is not after the warm-up step " + std::to_string(curve.steps[warmup_index]));
      throw Error(ErrorCode::kInvalidArgument, named + " is not after the one before it (" + std::to_string(publish_steps[j - 1]) +
                                                   "): publish steps must increase");
    }
    indices.push_back(static_cast<std::size_t>(it - curve.steps.begin()));
    search_from = indices.back() + 1;
  }
  double served_loss = curve.loss[warmup_index];
  double served_since = start;
  double integral = 0.0;
  for (std::size_t j = 0; j < indices.size(); ++j) {
    const std::size_t i = indices[j];
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

// plan_on_record_lows without a stall. A free publish delays nothing after it, so each record low
// servable in the window can only lower the CIL: publishing every one is optimal. Of those, the
// publishes whose gains are ties (served for no time, or for a rounding's worth before the window
// ends, or a nearly flat curve's) go, the smallest gain first, while the CIL stays within a tie of
// the optimum: fewer publishes on ties, as the search prefers them, though on near-ties not
// always the same ones it would keep. The search took up to n layers of O(n log n) time and a
// row of memory each for this: minutes and gigabytes on a smooth log of 10^5 points, and 20 ms
// per decision for an online scheduler whose publishes are free.
ScheduleResult plan_free_publishes(double origin_loss, double origin_servable_s, double end, const Trajectory& lows,
                                   const PublishCosts& costs) {
  const double d = costs.delivery_s;
  // The publishes, linked in order; node 0 is the origin, node k + 1 the k-th publish.
  std::vector<double> loss{origin_loss}, servable{origin_servable_s};
  std::vector<std::int64_t> steps{0};
  for (std::size_t i = 0; i < lows.steps.size(); ++i) {
    const double s = lows.time_s[i] + d;
    if (!(s < end)) break;  // times never decrease: no later one is servable in the window either
    if (s < origin_servable_s) continue;
    loss.push_back(lows.loss[i]);
    servable.push_back(s);
    steps.push_back(lows.steps[i]);
  }
  const std::size_t m = loss.size();
  std::vector<std::size_t> prev(m), next(m);
  for (std::size_t k = 0; k < m; ++k) {
    prev[k] = k - 1;  // node 0's is never read
    next[k] = k + 1;  // m: the window's end
  }
  const auto until = [&](std::size_t k) { return next[k] < m ? servable[next[k]] : end; };
  // What letting publish k go costs: its predecessor serves on until its successor.
  // (Losses near the double's limit overflow the difference, and infinity times a zero interval
  // is NaN, which no ordered set may hold: such a publish is never let go.)
  const auto gain = [&](std::size_t k) {
    const double g = (loss[prev[k]] - loss[k]) * (until(k) - servable[k]);
    return std::isnan(g) ? kInf : g;
  };
  double cil = 0.0;
  for (std::size_t k = 0; k < m; ++k) cil += loss[k] * std::max(0.0, until(k) - servable[k]);
  const double optimum = cil;
  std::set<std::pair<double, std::size_t>> by_gain;
  for (std::size_t k = 1; k < m; ++k) by_gain.emplace(gain(k), k);
  std::vector<bool> kept(m, true);
  while (!by_gain.empty()) {
    const auto [g, k] = *by_gain.begin();
    if (detail::cil_below(optimum, cil + g)) break;
    by_gain.erase(by_gain.begin());
    cil += g;
    kept[k] = false;
    const std::size_t p = prev[k], q = next[k];
    // Their gains change with their neighbours: the predecessor's interval now runs to q, and q
    // replaces the predecessor's loss instead of k's.
    if (p != 0) by_gain.erase({gain(p), p});
    if (q < m) by_gain.erase({gain(q), q});
    next[p] = q;
    if (q < m) prev[q] = p;
    if (p != 0) by_gain.emplace(gain(p), p);
    if (q < m) by_gain.emplace(gain(q), q);
  }
  ScheduleResult result;
  for (std::size_t k = 1; k < m; ++k) {
    if (kept[k]) result.publish_steps.push_back(steps[k]);
  }
  result.cil = costs.request_rate * cil;
  return result;
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

  const auto& t = future.time_s;
  const auto& loss = future.loss;

  if (c == 0.0) return plan_free_publishes(origin_loss, origin_servable_s, window_end_s, future, costs);

  const long max_publishes = static_cast<long>(publishes_allowed(costs, n + static_cast<std::size_t>(publishes_done))) - publishes_done;
  auto beaten = [&](double bound) { return !detail::cil_below(bound, best); };

  // Branch and bound. After the publish at candidate i as publish j (servable at
  // s = t_i + j·c + d), no schedule serves less than free publishing of every later candidate
  // with no stall beyond the j already made: candidate k servable at t_k + j·c + d, and, losses
  // falling, the newest of them served. So the rest of the window costs at least the integral of
  // that staircase, stair(E - j·c - d) - stair(t_i), where stair(x) integrates from t_0 to x the
  // loss of the newest candidate at or before x. A state whose cost so far plus that bound
  // cannot beat the best schedule found is dropped, and the layers end when none is left: on a
  // smooth per-step curve (all candidates record lows) this keeps the layers and the states in
  // each to a band around the optimum (ties go to fewer publishes, so "cannot beat" includes
  // the tie tolerance).
  std::vector<double> stair(n, 0.0);
  for (std::size_t k = 1; k < n; ++k) stair[k] = stair[k - 1] + loss[k - 1] * (t[k] - t[k - 1]);
  auto rest_bound = [&](std::size_t i, long j) {
    const double x = end - static_cast<double>(j) * c - d;
    if (!(x > t[i])) return 0.0;
    const auto k = static_cast<std::size_t>(std::upper_bound(t.begin(), t.end(), x) - t.begin()) - 1;
    return stair[k] + loss[k] * (x - t[k]) - stair[i];
  };

  // parent[j]: for the states (k, j+1) left after the bound, (k, previous candidate of the
  // optimal path to it; -1 = origin), by k. Only those are kept: dense rows (publishes x n) took
  // gigabytes on long smooth curves.
  std::vector<std::vector<std::pair<int, int>>> parent;
  std::vector<double> f(n, kInf), next(n, kInf);
  std::vector<std::pair<int, int>> first_layer;
  for (std::size_t i = 0; i < n; ++i) {
    const double s = t[i] + c + d;
    if (s < end && s >= origin_servable_s) {
      f[i] = origin_loss * (s - origin_servable_s);
      first_layer.emplace_back(static_cast<int>(i), -1);
    }
  }
  parent.push_back(std::move(first_layer));
  for (long j = 1; j <= max_publishes; ++j) {
    for (std::size_t i = 0; i < n; ++i) {
      if (f[i] == kInf) continue;
      const double s = t[i] + static_cast<double>(j) * c + d;
      const double total = f[i] + loss[i] * (end - s);
      if (detail::cil_below(total, best)) {
        best = total;
        best_j = static_cast<int>(j);
        best_i = i;
      }
    }
    if (j == max_publishes) break;
    bool any = false;
    for (std::size_t i = 0; i < n; ++i) {
      if (f[i] == kInf) continue;
      if (beaten(f[i] + rest_bound(i, j))) {
        f[i] = kInf;
      } else {
        any = true;
      }
    }
    if (!any) break;
    std::vector<std::pair<int, int>> par;
    std::fill(next.begin(), next.end(), kInf);
    LowerEnvelope envelope(t);
    for (std::size_t k = 1; k < n; ++k) {
      // Line of predecessor k-1: f(i, j) + L_i·(t_k - t_i + c) = L_i·t_k + (f(i, j) - L_i·(t_i - c)).
      if (f[k - 1] != kInf) envelope.insert(loss[k - 1], f[k - 1] - loss[k - 1] * (t[k - 1] - c), static_cast<int>(k - 1));
      if (t[k] + static_cast<double>(j + 1) * c + d >= end) continue;
      const auto [v, arg] = envelope.query(k);
      if (arg < 0 || beaten(v + rest_bound(k, j + 1))) continue;
      next[k] = v;
      par.emplace_back(static_cast<int>(k), arg);
    }
    parent.push_back(std::move(par));
    std::swap(f, next);
  }
  if (best_j > 0) {
    std::vector<std::int64_t> steps;
    int i = static_cast<int>(best_i);
    for (int j = best_j; j >= 1 && i >= 0; --j) {
      steps.push_back(future.steps[static_cast<std::size_t>(i)]);
      const auto& layer = parent[static_cast<std::size_t>(j - 1)];
      const auto it = std::lower_bound(layer.begin(), layer.end(), std::pair<int, int>{i, std::numeric_limits<int>::min()});
      // Every state on the best schedule's path was kept when it was made (it led to the best).
      if (it == layer.end() || it->first != i) throw std::logic_error("plan: a state on the best path was not kept");
      i = it->second;
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

ScheduleResult plan_in_hindsight(const Trajectory& curve, std::size_t warmup_index, const PublishCosts& costs) {
  validate_problem(curve, warmup_index, costs);
  const double lowest = *std::min_element(curve.loss.begin() + static_cast<std::ptrdiff_t>(warmup_index), curve.loss.end());
  Trajectory measured = curve;
  for (double& loss : measured.loss) loss -= lowest;
  // Losses at both ends of the double's range overflow their difference: planned as given.
  const bool finite = std::all_of(measured.loss.begin(), measured.loss.end(), [](double l) { return std::isfinite(l); });
  auto best = plan_optimal(finite ? measured : curve, warmup_index, costs);
  best.cil = evaluate_cil(curve, warmup_index, costs, best.publish_steps);
  return best;
}

std::vector<std::int64_t> snap_to_candidates(std::span<const std::int64_t> planned, const Trajectory& curve,
                                             std::size_t warmup_index) {
  validate_trajectory(curve);  // sorted steps, which the search below takes for granted
  if (warmup_index >= curve.steps.size())
    throw Error(ErrorCode::kInvalidArgument, "warm-up index " + std::to_string(warmup_index) + " is past the end of the curve");
  // A schedule is in order: one that is not was silently cut to its rising part ({200, 100, 150}
  // gave {200}).
  for (std::size_t i = 1; i < planned.size(); ++i) {
    if (planned[i] < planned[i - 1])
      throw Error(ErrorCode::kInvalidArgument, "planned steps must be in order: step " + std::to_string(planned[i]) +
                                                   " (at " + std::to_string(i) + ") comes after " +
                                                   std::to_string(planned[i - 1]));
  }
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
