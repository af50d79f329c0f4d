#include "evaluate_run.h"

#include "known_curve.h"
#include "shape_prior_fit.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace mp = modelcast::predictor;

namespace modelcast::bench {
namespace {

double median_gap(const std::vector<mp::CurvePoint>& pts) {
  std::vector<double> gaps;
  for (std::size_t i = 1; i < pts.size(); ++i) gaps.push_back(pts[i].time_s - pts[i - 1].time_s);
  std::nth_element(gaps.begin(), gaps.begin() + static_cast<std::ptrdiff_t>(gaps.size() / 2), gaps.end());
  return gaps[gaps.size() / 2];
}

// The online scheduler fed the run's logged points one at a time, as a trainer would: each point
// observed at its logged time plus the stalls of the publishes before it, then the decision, then
// a wait for the scheduler's workers if it has any (a trainer whose workers keep up). Returns the
// steps it published at.
std::vector<std::int64_t> replay(const mp::LossLog& run, const mp::OnlineOptions& options) {
  mp::OnlineScheduler scheduler(options);
  for (const auto& p : run.points) {
    const double wall = p.time_s + options.costs.stall_s * static_cast<double>(scheduler.published_steps().size());
    scheduler.observe(p.step, p.loss, wall);
    scheduler.should_publish(p.step);
    scheduler.wait_for_background();
  }
  return scheduler.published_steps();
}

int compare(double ours, double theirs) {
  const double tol = 1e-9 * std::max(std::abs(ours), std::abs(theirs));
  return ours < theirs - tol ? 1 : (ours > theirs + tol ? -1 : 0);
}

}  // namespace

std::size_t warmup_points(std::size_t n, double warmup_fraction) {
  return std::max<std::size_t>(2, static_cast<std::size_t>(std::ceil(warmup_fraction * static_cast<double>(n))));
}

mp::ForecastOptions plan_forecast_options(const mp::LossLog& run, const EvalSettings& settings) {
  mp::ForecastOptions fo;
  fo.total_steps = std::max(*run.total_steps, run.points.back().step);
  if (settings.lr_schedules) {
    // Configuration known before the run starts (not its future): plan and replay both get it.
    const auto it = settings.lr_schedules->find(run.run);
    if (it != settings.lr_schedules->end()) fo.lr_schedule = it->second;
    if (!std::isnan(settings.anneal_noise_prior)) fo.anneal_noise_prior = settings.anneal_noise_prior;
  }
  return fo;
}

RunEval evaluate_run(const mp::LossLog& run, const std::string& family, const EvalSettings& settings) {
  RunEval result;
  result.run = run.run;
  result.family = family;
  const auto truth = mp::trajectory_of(run.points);
  const std::size_t n = run.points.size();
  const std::int64_t total = std::max(*run.total_steps, run.points.back().step);
  const double gap = median_gap(run.points);
  const std::size_t k = warmup_points(n, settings.warmup_fraction);
  if (k + 2 > n) return result;
  result.evaluated = true;
  const std::size_t w = k - 1;
  const std::vector<mp::CurvePoint> prefix(run.points.begin(), run.points.begin() + static_cast<std::ptrdiff_t>(k));
  mp::ForecastOptions fo = plan_forecast_options(run, settings);
  result.forecast_cuts = forecast_cuts(run, fo, [](std::span<const mp::CurvePoint> seen, const mp::ForecastOptions& o) {
    return mp::forecast_curve(seen, o);
  });
  if (settings.prior) {
    auto reference = settings.prior->for_prefix(run, k);
    if (!reference.progress.empty()) fo.reference = std::move(reference);
  }
  mp::ForecastOptions plan_fo = fo;  // cross-family priors are for plans made in advance only
  plan_fo.member_prior = settings.member_prior;
  auto point = mp::forecast_curve(prefix, plan_fo);
  if (settings.shape_prior) point = apply_shape_prior(prefix, point, *settings.shape_prior);
  if (!settings.shape_mixture.empty()) {
    const auto raw = point;
    const auto add = [](std::vector<double>& acc, const std::vector<double>& v, double weight) {
      for (std::size_t i = 0; i < acc.size() && i < v.size(); ++i) acc[i] += weight * v[i];
    };
    const auto zero = [](std::vector<double>& v) { std::fill(v.begin(), v.end(), 0.0); };
    zero(point.loss), zero(point.lower), zero(point.upper);
    for (auto& m : point.members) zero(m.loss);
    for (const auto& [prior, weight] : settings.shape_mixture) {
      const auto f = apply_shape_prior(prefix, raw, prior);
      add(point.loss, f.loss, weight), add(point.lower, f.lower, weight), add(point.upper, f.upper, weight);
      for (std::size_t m = 0; m < point.members.size(); ++m) add(point.members[m].loss, f.members[m].loss, weight);
    }
  }
  const auto viper_planned = mp::extend_with_forecast(prefix, mp::forecast_viper(prefix, fo));
  {
    const auto planned = mp::extend_with_forecast(prefix, point);
    double abs_err = 0;
    for (std::size_t i = k; i < n; ++i) abs_err += std::abs(interpolate_at(planned.steps, planned.loss, run.points[i].step) - run.points[i].loss);
    result.mae = abs_err / static_cast<double>(n - k);
  }
  // The hedge gets the run's schedule (when it has one and hedge_schedule is on).
  const auto with_schedule = [&](mp::HedgeOptions h) {
    h.lr_schedule = settings.hedge_schedule ? fo.lr_schedule : std::nullopt;
    return h;
  };
  std::vector<mp::HedgedForecast> hedged;
  for (const auto& v : settings.variants) {
    if (!v.mixture_of.empty()) {
      mp::HedgedForecast mix;
      const double share = 1.0 / static_cast<double>(v.mixture_of.size());
      for (const auto& o : v.mixture_of) {
        auto h = mp::hedge_forecast(prefix, point, with_schedule(o));
        if (mix.scenarios.empty()) {
          mix = h;
          mix.scenarios.clear();
          std::fill(mix.forecast.loss.begin(), mix.forecast.loss.end(), 0.0);
        }
        for (auto& sc : h.scenarios) {
          sc.weight *= share;
          mix.scenarios.push_back(std::move(sc));
        }
        for (std::size_t i = 0; i < mix.forecast.loss.size(); ++i) mix.forecast.loss[i] += share * h.forecast.loss[i];
        mix.hedged = mix.hedged || h.hedged;
      }
      hedged.push_back(std::move(mix));
    } else if (v.hedge) {
      hedged.push_back(mp::hedge_forecast(prefix, point, with_schedule(v.library_defaults ? mp::HedgeOptions{} : v.hedge_options)));
    } else {
      // The point forecast alone, on its own time axis.
      hedged.push_back({point, {{"forecast", 1.0, point.loss}}, {{"forecast", 1.0, point.time_s}}, false});
    }
  }
  // Replay forecasts depend only on the points the scheduler fits (its current regime, whose
  // times on the stall-free clock are the logged ones), not on the costs or the variant: fit
  // once per (first step, length).
  std::map<std::pair<std::int64_t, std::size_t>, mp::Forecast> cache;
  const auto forecaster = [&](std::span<const mp::CurvePoint> seen, const mp::ForecastOptions& o) {
    const auto key = std::make_pair(seen.front().step, seen.size());
    auto it = cache.find(key);
    if (it == cache.end()) {
      mp::ForecastOptions now = o;
      if (settings.prior) {
        // Analogue runs are re-matched on everything seen so far.
        const auto last = std::lower_bound(run.points.begin(), run.points.end(), seen.back().step,
                                           [](const mp::CurvePoint& p, std::int64_t s) { return p.step < s; });
        auto reference = settings.prior->for_prefix(run, static_cast<std::size_t>(last - run.points.begin()) + 1);
        if (!reference.progress.empty()) now.reference = std::move(reference);
      }
      it = cache.emplace(key, mp::forecast_curve(seen, now)).first;
    }
    return it->second;
  };

  // The true curve denoised by a 5-point running median: the noise floor's plan is made on it,
  // the trend-known replay forecasts with it, and every schedule is also scored on it
  // (Outcome::regret_denoised).
  const mp::Trajectory smooth = running_median(truth, 2);
  result.outcome.resize(settings.cost_multipliers.size());
  result.plan_choice.resize(settings.cost_multipliers.size());
  for (std::size_t ci = 0; ci < settings.cost_multipliers.size(); ++ci) {
    mp::PublishCosts costs;
    costs.stall_s = settings.cost_multipliers[ci] * gap;
    costs.delivery_s = 0.5 * costs.stall_s;
    const auto optimal_steps = mp::plan_in_hindsight(truth, w, costs).publish_steps;
    const double best = mp::evaluate_cil(truth, w, costs, optimal_steps);
    const double none = mp::evaluate_cil(truth, w, costs, {});
    std::map<std::string, double> baseline;
    baseline["every_candidate"] = mp::evaluate_cil(truth, w, costs, mp::every_candidate_schedule(truth, w));
    const auto every_e_steps = mp::every_n_steps_schedule(truth, w, std::max<std::int64_t>(1, total / 10));
    baseline["every_e_steps"] = mp::evaluate_cil(truth, w, costs, every_e_steps);
    baseline["viper_fixed_interval"] =
        mp::evaluate_cil(truth, w, costs, mp::snap_to_candidates(mp::fixed_interval_schedule(viper_planned, w, costs), truth, w));
    baseline["viper_threshold"] =
        mp::evaluate_cil(truth, w, costs, mp::snap_to_candidates(mp::threshold_schedule(viper_planned, w, costs), truth, w));
    const auto oracle = mp::plan_in_hindsight(smooth, w, costs);
    const double smooth_none = mp::evaluate_cil(smooth, w, costs, {});
    const auto score_cil = [&](double cil) {
      Outcome o;
      const double gain = none - best;
      o.has_gain = gain > 1e-9 * none;
      o.regret = o.has_gain ? 100.0 * (cil - best) / gain : 0.0;
      for (const auto& [name, b] : baseline) o.vs[name] = compare(cil, b);
      return o;
    };
    const auto score = [&](const std::vector<std::int64_t>& schedule) {
      Outcome o = score_cil(mp::evaluate_cil(truth, w, costs, schedule));
      o.publishes = static_cast<int>(schedule.size());
      o.publish_steps = schedule;
      o.optimal_publish_steps = optimal_steps;
      o.optimal_publishes = static_cast<int>(optimal_steps.size());
      for (std::size_t i = 1; i < schedule.size(); ++i) {
        const auto at = std::lower_bound(truth.steps.begin(), truth.steps.end(), schedule[i - 1]);
        o.consecutive += at != truth.steps.end() && at + 1 != truth.steps.end() && *(at + 1) == schedule[i];
      }
      if (!schedule.empty() && !optimal_steps.empty()) {
        o.first_earlier = schedule.front() < optimal_steps.front();
        o.first_later = schedule.front() > optimal_steps.front();
      }
      const double gain = smooth_none - oracle.cil;
      o.has_gain_denoised = gain > 1e-9 * smooth_none;
      o.regret_denoised = o.has_gain_denoised ? 100.0 * (mp::evaluate_cil(smooth, w, costs, schedule) - oracle.cil) / gain : 0.0;
      return o;
    };
    result.every_e.push_back(score(every_e_steps));
    const Outcome floor = score_cil(mp::evaluate_cil(truth, w, costs, oracle.publish_steps));
    result.smooth_oracle_regret.push_back(floor.regret);
    result.smooth_oracle_vs_every_e.push_back(floor.vs.at("every_e_steps"));
    if (!score_cil(0).has_gain) result.smooth_oracle_regret.back() = std::nan("");
    {
      // The online scheduler with the library's defaults, its forecaster replaced by the denoised
      // true curve: its decisions still meet each logged point as it comes, noise included.
      mp::OnlineOptions known;
      known.forecast = fo;
      known.costs = costs;
      known.warmup_step = run.points[w].step;
      known.forecaster = [&smooth](std::span<const mp::CurvePoint> seen, const mp::ForecastOptions&) {
        return forecast_from_curve(smooth, seen.back().step);
      };
      const Outcome trend_known = score_cil(mp::evaluate_cil(truth, w, costs, replay(run, known)));
      result.trend_known_replay_regret.push_back(trend_known.has_gain ? trend_known.regret : std::nan(""));
      result.trend_known_replay_vs_every_e.push_back(trend_known.vs.at("every_e_steps"));
    }
    result.outcome[ci].resize(2);
    for (std::size_t vi = 0; vi < settings.variants.size(); ++vi) {
      const auto& v = settings.variants[vi];
      // The planner does not know the true window; it plans over its forecast of the run.
      const auto plan = mp::plan_hedged(prefix, w, hedged[vi], costs);
      result.outcome[ci][0].push_back(score(mp::snap_to_candidates(plan.publish_steps, truth, w)));
      // The plan's decision again, from its candidate (plan_hedged keeps only the outcome).
      auto unguarded = hedged[vi];
      unguarded.depart_confidence = 0.0;
      const auto candidate = mp::plan_hedged(prefix, w, unguarded, costs).publish_steps;
      const auto choice = mp::explain_plan(prefix, w, hedged[vi], costs, candidate);
      result.plan_choice[ci].push_back({choice.picked, choice.picked == "evenly_spaced" && candidate == plan.publish_steps,
                                        choice.win_probability, choice.expected_margin_pct,
                                        score(mp::snap_to_candidates(candidate, truth, w)),
                                        score(mp::snap_to_candidates(choice.best_evenly_spaced, truth, w))});
      if (settings.skip_replay) continue;

      mp::OnlineOptions oo;
      oo.forecast = fo;
      if (settings.member_prior_replay) oo.forecast.member_prior = settings.member_prior;
      oo.costs = costs;
      oo.warmup_step = run.points[w].step;
      oo.forecaster = forecaster;
      oo.hedge_options = with_schedule(oo.hedge_options);
      if (!v.library_defaults) {
        oo.hedge = v.hedge;
        oo.hedge_options = with_schedule(v.hedge_options);
        oo.refit_band_points = v.refit_band_points;
        oo.hindsight_check = v.hindsight_check;
        oo.band_trigger_width = v.band_trigger_width;
      }
      oo.work_mode = settings.work_mode;
      const auto t0 = std::chrono::steady_clock::now();
      const auto published = replay(run, oo);
      result.replay_seconds = std::max(result.replay_seconds, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      result.outcome[ci][1].push_back(score(published));
    }
  }
  return result;
}

}  // namespace modelcast::bench
