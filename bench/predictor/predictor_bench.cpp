// Evaluation harness for the predictor over real learning curves:
// warm-up at 10/20/30 % of the logged points; publish cost c = 0.5/2/8 x the run's median time
// between eval points, delivery d = c/2; offline plan and online replay; regret against the
// exact optimum on the true curve, win rates against the baselines, forecast error.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "modelcast/predictor.h"
#include "reference_prior.h"

namespace mp = modelcast::predictor;
using Json = nlohmann::json;

namespace {

std::vector<double> kWarmups = {0.1, 0.2, 0.3};  // --warmup-pct may narrow it
const std::vector<double> kCostMultipliers = {0.5, 2.0, 8.0};
const std::vector<std::string> kModes = {"plan", "replay"};
const std::vector<std::string> kBaselines = {"every_candidate", "every_e_steps", "viper_fixed_interval", "viper_threshold"};

struct Outcome {  // one (run, warm-up, cost, mode)
  bool has_gain = false;
  double regret = 0.0;
  std::map<std::string, int> vs;  // +1 better, 0 tie, -1 worse than baseline
};
struct RunResult {
  std::string run;
  std::map<std::tuple<int, int, int>, Outcome> outcomes;  // (warm-up, cost, mode)
  std::map<int, double> mae, integral_err_pct;             // per warm-up
};



double median_gap(const std::vector<mp::CurvePoint>& pts) {
  std::vector<double> gaps;
  for (std::size_t i = 1; i < pts.size(); ++i) gaps.push_back(pts[i].time_s - pts[i - 1].time_s);
  std::nth_element(gaps.begin(), gaps.begin() + static_cast<std::ptrdiff_t>(gaps.size() / 2), gaps.end());
  return gaps[gaps.size() / 2];
}

double interp_step(const std::vector<std::int64_t>& xs, const std::vector<double>& ys, std::int64_t x) {
  if (x <= xs.front()) return ys.front();
  if (x >= xs.back()) return ys.back();
  const auto i = static_cast<std::size_t>(std::upper_bound(xs.begin(), xs.end(), x) - xs.begin());
  const double f = static_cast<double>(x - xs[i - 1]) / static_cast<double>(xs[i] - xs[i - 1]);
  return ys[i - 1] + f * (ys[i] - ys[i - 1]);
}

int compare(double ours, double theirs) {
  const double tol = 1e-9 * std::max(std::abs(ours), std::abs(theirs));
  return ours < theirs - tol ? 1 : (ours > theirs + tol ? -1 : 0);
}

RunResult evaluate_run(const mp::LossLog& run, const modelcast::bench::ReferencePrior& prior, bool use_reference) {
  RunResult result;
  result.run = run.run;
  const auto truth = mp::trajectory_of(run.points);
  const std::size_t n = run.points.size();
  const std::int64_t total = *run.total_steps;
  const double gap = median_gap(run.points);
  for (std::size_t wi = 0; wi < kWarmups.size(); ++wi) {
    const std::size_t k = std::max<std::size_t>(2, static_cast<std::size_t>(std::ceil(kWarmups[wi] * static_cast<double>(n))));
    if (k + 2 > n) continue;
    const std::size_t w = k - 1;
    const std::vector<mp::CurvePoint> prefix(run.points.begin(), run.points.begin() + static_cast<std::ptrdiff_t>(k));
    mp::ForecastOptions fo;
    fo.total_steps = std::max(total, run.points.back().step);
    if (use_reference) {
      auto reference = prior.for_prefix(run, k);
      if (!reference.progress.empty()) fo.reference = std::move(reference);
    }
    const auto forecast = mp::forecast_curve(prefix, fo);
    if (std::getenv("PREDICTOR_BENCH_DEBUG")) {
      std::cerr << run.run << " warmup " << kWarmups[wi] << " note: " << forecast.note << "\n  members:";
      for (const auto& m : forecast.members) std::cerr << " " << m.family << "(w=" << m.weight << ",bt=" << m.backtest_rmse << ")";
      std::cerr << "\n  forecast:";
      for (std::size_t i = 0; i < forecast.steps.size(); ++i) std::cerr << " " << forecast.steps[i] << ":" << forecast.loss[i] << "@" << forecast.time_s[i];
      std::cerr << "\n  truth:   ";
      for (std::size_t i = k; i < n; ++i) std::cerr << " " << run.points[i].step << ":" << run.points[i].loss << "@" << run.points[i].time_s;
      std::cerr << "\n";
    }
    const auto viper = mp::forecast_viper(prefix, fo);
    const auto planned = mp::extend_with_forecast(prefix, forecast);
    const auto viper_planned = mp::extend_with_forecast(prefix, viper);

    // Forecast error over the true remaining points.
    double abs_err = 0, int_true = 0, int_pred = 0;
    for (std::size_t i = k; i < n; ++i) {
      const double pred = interp_step(planned.steps, planned.loss, run.points[i].step);
      abs_err += std::abs(pred - run.points[i].loss);
      const double prev_pred = i == k ? run.points[w].loss : interp_step(planned.steps, planned.loss, run.points[i - 1].step);
      const double ds = static_cast<double>(run.points[i].step - run.points[i - 1].step);
      int_true += 0.5 * (run.points[i].loss + run.points[i - 1].loss) * ds;
      int_pred += 0.5 * (pred + prev_pred) * ds;
    }
    result.mae[static_cast<int>(wi)] = abs_err / static_cast<double>(n - k);
    result.integral_err_pct[static_cast<int>(wi)] = 100.0 * std::abs(int_pred - int_true) / int_true;

    // Replay forecasts depend only on the observed prefix, not on the costs: fit once per length.
    std::map<std::size_t, mp::Forecast> replay_cache;
    // As more points arrive the analogue runs are re-matched on everything seen so far.
    const auto cached_forecaster = [&](std::span<const mp::CurvePoint> seen, const mp::ForecastOptions& o) {
      auto it = replay_cache.find(seen.size());
      if (it == replay_cache.end()) {
        mp::ForecastOptions now = o;
        if (use_reference) {
          auto reference = prior.for_prefix(run, seen.size());
          if (!reference.progress.empty()) now.reference = std::move(reference);
        }
        it = replay_cache.emplace(seen.size(), mp::forecast_curve(seen, now)).first;
      }
      return it->second;
    };
    for (std::size_t ci = 0; ci < kCostMultipliers.size(); ++ci) {
      mp::PublishCosts costs;
      costs.stall_s = kCostMultipliers[ci] * gap;
      costs.delivery_s = 0.5 * costs.stall_s;
      const double best = mp::plan_optimal(truth, w, costs).cil;
      const double none = mp::evaluate_cil(truth, w, costs, {});
      // The planner does not know the true window; it plans over its forecast of the run.
      const auto plan = mp::plan_optimal(planned, w, costs);
      const auto plan_steps = mp::snap_to_candidates(plan.publish_steps, truth, w);
      std::map<std::string, double> baseline_cil;
      baseline_cil["every_candidate"] = mp::evaluate_cil(truth, w, costs, mp::every_candidate_schedule(truth, w));
      baseline_cil["every_e_steps"] = mp::evaluate_cil(truth, w, costs, mp::every_n_steps_schedule(truth, w, std::max<std::int64_t>(1, total / 10)));
      baseline_cil["viper_fixed_interval"] = mp::evaluate_cil(
          truth, w, costs, mp::snap_to_candidates(mp::fixed_interval_schedule(viper_planned, w, costs), truth, w));
      baseline_cil["viper_threshold"] = mp::evaluate_cil(
          truth, w, costs, mp::snap_to_candidates(mp::threshold_schedule(viper_planned, w, costs), truth, w));

      // Online replay: the scheduler sees each point as it is logged, on a clock with its stalls.
      mp::OnlineOptions oo;
      oo.forecast = fo;
      oo.costs = costs;
      oo.warmup_step = run.points[w].step;
      oo.forecaster = cached_forecaster;
      mp::OnlineScheduler scheduler(oo);
      for (std::size_t i = 0; i < n; ++i) {
        const double wall = run.points[i].time_s + costs.stall_s * static_cast<double>(scheduler.published_steps().size());
        scheduler.observe(run.points[i].step, run.points[i].loss, wall);
        scheduler.should_publish(run.points[i].step);
      }
      const std::map<int, double> ours = {{0, mp::evaluate_cil(truth, w, costs, plan_steps)},
                                          {1, mp::evaluate_cil(truth, w, costs, scheduler.published_steps())}};
      for (const auto& [mode, cil] : ours) {
        Outcome o;
        const double gain = none - best;
        o.has_gain = gain > 1e-9 * none;
        o.regret = o.has_gain ? 100.0 * (cil - best) / gain : 0.0;
        for (const auto& [name, b] : baseline_cil) o.vs[name] = compare(cil, b);
        result.outcomes[{static_cast<int>(wi), static_cast<int>(ci), mode}] = o;
      }
    }
  }
  return result;
}

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const auto hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"modelcast predictor benchmark over real learning curves"};
  std::string data = "bench/data/nanogpt_val_loss.csv";
  int per_record = 3;
  int threads = 2;
  bool json = false, no_reference = false;
  std::string only_run;
  app.add_option("--data", data, "curves file (run,track,record,step,total_steps,val_loss,train_time_s)");
  app.add_option("--runs-per-record", per_record, "deterministic sample: at most this many runs per record (0 = all)");
  app.add_option("--threads", threads, "worker threads");
  app.add_option("--run", only_run, "evaluate a single run id");
  std::vector<double> warmup_pct;
  app.add_option("--warmup-pct", warmup_pct, "warm-ups to evaluate, in % of the logged points (default 10 20 30)");
  std::string json_out;
  app.add_flag("--json", json, "print JSON");
  app.add_option("--json-out", json_out, "also write the JSON to this file");
  app.add_flag("--no-reference", no_reference, "ablation: no cross-record reference prior");
  CLI11_PARSE(app, argc, argv);

  if (!warmup_pct.empty()) {
    kWarmups.clear();
    for (double p : warmup_pct) kWarmups.push_back(p / 100.0);
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::ifstream in(data);
  if (!in) {
    std::cerr << "cannot open " << data << "\n";
    return 1;
  }
  const auto collection = mp::read_curve_collection(in, data, "val_loss");
  const modelcast::bench::ReferencePrior prior(collection.runs);

  // Deterministic sample grouped by record: runs evenly spread over each record's list.
  std::map<std::string, std::vector<const mp::LossLog*>> by_record;
  for (const auto& r : collection.runs)
    if (r.points.size() >= 5 && r.total_steps) by_record[r.track + "/" + r.record].push_back(&r);
  std::vector<const mp::LossLog*> selected;
  for (auto& [rec, runs] : by_record) {
    const std::size_t take = per_record <= 0 ? runs.size() : std::min<std::size_t>(runs.size(), static_cast<std::size_t>(per_record));
    for (std::size_t i = 0; i < take; ++i) {
      const auto* r = runs[i * runs.size() / take];
      if (only_run.empty() || r->run == only_run) selected.push_back(r);
    }
  }

  std::vector<RunResult> results(selected.size());
  std::atomic<std::size_t> next{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < std::max(1, threads); ++t)
    pool.emplace_back([&] {
      for (std::size_t i; (i = next++) < selected.size();)
        results[i] = evaluate_run(*selected[i], prior, !no_reference);
    });
  for (auto& th : pool) th.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  Json out;
  out["data"] = data;
  out["runs_in_file"] = collection.runs.size() + collection.skipped_runs.size();
  out["runs_skipped_not_increasing"] = collection.skipped_runs.size();
  out["runs_evaluated"] = selected.size();
  out["runs_per_record"] = per_record;
  out["reference_prior"] = !no_reference;
  out["seconds"] = seconds;
  out["settings"] = Json::array();
  for (std::size_t wi = 0; wi < kWarmups.size(); ++wi) {
    std::vector<double> mae, integ;
    for (const auto& r : results) {
      if (r.mae.count(static_cast<int>(wi))) {
        mae.push_back(r.mae.at(static_cast<int>(wi)));
        integ.push_back(r.integral_err_pct.at(static_cast<int>(wi)));
      }
    }
    // One row per cost setting, then one pooling every cost setting (ci = -1).
    for (int ci = 0; ci <= static_cast<int>(kCostMultipliers.size()); ++ci)
      for (std::size_t mi = 0; mi < kModes.size(); ++mi) {
        const bool pooled = ci == static_cast<int>(kCostMultipliers.size());
        std::vector<double> regrets;
        std::map<std::string, int> wins, strict;
        int runs = 0, no_gain = 0;
        for (const auto& r : results)
          for (int c = 0; c < static_cast<int>(kCostMultipliers.size()); ++c) {
            if (!pooled && c != ci) continue;
            const auto it = r.outcomes.find({static_cast<int>(wi), c, static_cast<int>(mi)});
            if (it == r.outcomes.end()) continue;
            ++runs;
            if (it->second.has_gain) regrets.push_back(it->second.regret);
            else ++no_gain;
            for (const auto& [b, v] : it->second.vs) {
              wins[b] += v >= 0;
              strict[b] += v > 0;
            }
          }
        Json s;
        s["warmup_pct"] = 100 * kWarmups[wi];
        s["cost_x_median_interval"] = pooled ? Json("all") : Json(kCostMultipliers[static_cast<std::size_t>(ci)]);
        s["mode"] = kModes[mi];
        s["runs"] = runs;
        s["runs_without_achievable_gain"] = no_gain;
        s["median_regret_pct"] = quantile(regrets, 0.5);
        s["p90_regret_pct"] = quantile(regrets, 0.9);
        s["win_rate"] = Json::object();
        s["strict_win_rate"] = Json::object();
        for (const auto& b : kBaselines) {
          s["win_rate"][b] = runs ? static_cast<double>(wins[b]) / runs : 0.0;
          s["strict_win_rate"][b] = runs ? static_cast<double>(strict[b]) / runs : 0.0;
        }
        s["median_mae"] = quantile(mae, 0.5);
        s["median_integral_err_pct"] = quantile(integ, 0.5);
        out["settings"].push_back(s);
      }
  }
  if (!json_out.empty()) std::ofstream(json_out) << out.dump(2) << "\n";
  if (json) {
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::cout << "runs evaluated: " << selected.size() << " (<= " << per_record << " per record; "
            << collection.skipped_runs.size() << " runs with restarts skipped), reference prior: "
            << (no_reference ? "off" : "leave-record-out analogues") << ", " << std::fixed << std::setprecision(1) << seconds << " s\n";
  std::cout << "regret % over runs with an achievable gain; win = CIL <= baseline's (ties count), in parentheses strictly lower\n";
  std::cout << "warmup cost mode   runs nogain  med_regret p90_regret | win every_cand  every_E      viper_fixed  viper_thr   | MAE    integral_err%\n";
  for (const auto& s : out["settings"]) {
    const auto cost = s["cost_x_median_interval"].is_string() ? std::string("all") : ([&] {
      std::ostringstream c;
      c << std::setprecision(1) << std::fixed << s["cost_x_median_interval"].get<double>() << "x";
      return c.str();
    })();
    std::cout << std::setw(5) << std::setprecision(0) << s["warmup_pct"].get<double>() << "% " << std::setw(5) << cost << " "
              << std::setw(6) << s["mode"].get<std::string>() << std::setw(6) << s["runs"].get<int>() << std::setw(7)
              << s["runs_without_achievable_gain"].get<int>() << std::setprecision(2) << std::setw(11) << s["median_regret_pct"].get<double>()
              << std::setw(11) << s["p90_regret_pct"].get<double>() << " |    ";
    for (const auto& b : kBaselines)
      std::cout << std::setprecision(2) << s["win_rate"][b].get<double>() << " (" << s["strict_win_rate"][b].get<double>() << ")  ";
    std::cout << "| " << std::setprecision(4) << s["median_mae"].get<double>() << std::setw(8) << std::setprecision(2)
              << s["median_integral_err_pct"].get<double>() << "\n";
  }
  return 0;
}
