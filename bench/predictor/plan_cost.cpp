// Cost of the exact plan (plan_optimal) on per-step loss logs: what modelcast-tune evaluate and
// replay compute as the optimum in hindsight, and what the harness scores every schedule against.
// Synthetic logs with a point per step: "noisy" (a falling curve plus evaluation noise, as
// training losses are logged) and "smooth" (the same curve without noise, as a smoothed export:
// every point is a record low, the planner's worst case). Each row is the median of --runs
// timed calls, next to the time of one linear pass over the same log (evaluate_cil of publishing
// at every point: reading every point once), the floor a plan cannot go below; the ratio says
// how far above linear the plan is.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "modelcast/predictor_planner.h"

namespace mp = modelcast::predictor;
using Json = nlohmann::json;

namespace {

// 2 + e^(-3 i / n), logged every 0.1 s; noisy adds N(0, 0.02), about a tenth of the fall.
mp::Trajectory per_step_log(std::size_t n, bool noisy, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(0.0, 0.02);
  mp::Trajectory t;
  for (std::size_t i = 0; i < n; ++i) {
    t.steps.push_back(static_cast<std::int64_t>(i));
    t.loss.push_back(2.0 + std::exp(-3.0 * static_cast<double>(i) / static_cast<double>(n)) + (noisy ? noise(rng) : 0.0));
    t.time_s.push_back(0.1 * static_cast<double>(i));
  }
  return t;
}

std::size_t record_lows(const mp::Trajectory& t, std::size_t w) {
  std::size_t count = 0;
  double lowest = t.loss[w];
  for (std::size_t i = w + 1; i < t.loss.size(); ++i) {
    if (t.loss[i] < lowest) {
      lowest = t.loss[i];
      ++count;
    }
  }
  return count;
}

template <typename F>
double seconds_of(F&& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Cost of the exact publish plan (plan_optimal) on per-step loss logs"};
  std::vector<std::size_t> points{10000, 100000, 1000000};
  std::size_t smooth_max = 100000;
  std::vector<double> cost_ratios{0.5, 8.0};
  unsigned runs = 3;
  bool json = false;
  // Bounded: a bad list ended in an uncaught exception, a negative length wrapped and hung.
  app.add_option("--points", points, "log lengths, comma-separated (10 to 10^8)")
      ->delimiter(',')
      ->check(CLI::Range(10, 100'000'000));
  app.add_option("--smooth-max-points", smooth_max,
                 "longest smooth log planned (the worst case: minutes beyond 10^5; 0 to 10^8)")
      ->check(CLI::Range(0, 100'000'000));
  app.add_option("--cost-ratio", cost_ratios, "publish stall in logging intervals (delivery half of it; 0.001 to 1000)")
      ->check(CLI::Range(0.001, 1000.0));
  app.add_option("--runs", runs, "timed calls per row (median)")->check(CLI::Range(1u, 100u));
  app.add_flag("--json", json, "print JSON");
  CLI11_PARSE(app, argc, argv);

  Json rows = Json::array();
  for (const bool noisy : {true, false}) {
    for (const auto n : points) {
      if (!noisy && n > smooth_max) continue;
      const auto log = per_step_log(n, noisy, 1);
      const std::size_t w = n / 5;
      for (const double ratio : cost_ratios) {
        mp::PublishCosts costs;
        costs.stall_s = 0.1 * ratio;
        costs.delivery_s = costs.stall_s / 2;
        std::vector<double> plan_s, pass_s;
        mp::ScheduleResult plan;
        const auto every = mp::every_candidate_schedule(log, w);
        for (unsigned r = 0; r < runs; ++r) {
          plan_s.push_back(seconds_of([&] { plan = mp::plan_optimal(log, w, costs); }));
          double sink = 0.0;
          pass_s.push_back(seconds_of([&] { sink = mp::evaluate_cil(log, w, costs, every); }));
          if (!(sink > 0)) std::cerr << "unexpected CIL " << sink << "\n";
        }
        rows.push_back({{"shape", noisy ? "noisy" : "smooth"},
                        {"points", n},
                        {"cost_ratio", ratio},
                        {"record_lows", record_lows(log, w)},
                        {"publishes", plan.publish_steps.size()},
                        {"plan_ms", 1e3 * median(plan_s)},
                        {"linear_pass_ms", 1e3 * median(pass_s)},
                        {"plan_over_linear_pass", median(plan_s) / median(pass_s)}});
      }
    }
  }
  if (json) {
    std::cout << Json{{"benchmark", "plan"}, {"runs", runs}, {"rows", rows}}.dump(2) << "\n";
    return 0;
  }
  std::cout << "plan_optimal on per-step logs (median of " << runs << " calls; linear pass = evaluate_cil of every point)\n";
  std::printf("%-7s %9s %6s %11s %10s %12s %16s %12s\n", "shape", "points", "cost", "record_lows", "publishes", "plan_ms",
              "linear_pass_ms", "plan/linear");
  for (const auto& r : rows) {
    std::printf("%-7s %9zu %5.1fx %11zu %10zu %12.2f %16.3f %12.0f\n", r["shape"].get<std::string>().c_str(),
                r["points"].get<std::size_t>(), r["cost_ratio"].get<double>(), r["record_lows"].get<std::size_t>(),
                r["publishes"].get<std::size_t>(), r["plan_ms"].get<double>(), r["linear_pass_ms"].get<double>(),
                r["plan_over_linear_pass"].get<double>());
  }
  return 0;
}
