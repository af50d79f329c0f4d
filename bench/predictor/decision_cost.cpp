// Cost of OnlineScheduler::should_publish on the caller's (training) thread, at 100, 1,000 and
// 10,000 observed points: the latency of each decision, median and p99, with the built-in
// forecaster and the library's default options. A synthetic noisy power-law run is fed one point
// at a time; the decisions up to the measured window are taken but not timed, so that the
// scheduler has its forecast and its refit schedule is in its steady state when timing starts.
// The window is repeated over several independent runs (seeds) so that p99 rests on enough
// decisions. Every decision is timed on its own (steady_clock around the call), so the figures
// include whatever the call does on the caller's thread: refits when they run inline, the
// hand-over of points to the worker when they run in the background, and the plans it cannot
// reuse. Points arrive back to back, so a background refit is usually still running several
// decisions later (a real run trains between evaluations); "fits" counts those adopted.
// --train-ms puts training between the timed decisions: a sleep (cores left idle) or, with
// --train-busy, the caller's thread spinning (a CPU-bound trainer), and --busy-threads keeps
// further cores spinning (the rest of a loaded machine: the inference server, torch's threads).
// With every core busy, a worker woken inside should_publish() can preempt the caller there,
// which is what OnlineOptions::batch_scheduled_workers prevents (--inherited-workers: without).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "modelcast/predictor_online.h"
#include "predictor/online_worker.h"

namespace mp = modelcast::predictor;
using Json = nlohmann::json;

namespace {

struct Sample {
  std::size_t points = 0;
  std::string mode;
  std::vector<double> latency_us;
  std::size_t fits = 0;       // forecasts adopted while timing
  std::size_t publishes = 0;  // publishes decided while timing
  std::size_t plans = 0;      // exact plans while timing (the others reused the previous plan)
  std::size_t ahead = 0;      // kBackground: decisions answered by the threshold prepared for them
  double worker_s = 0.0;      // time the scheduler's workers spent (whole runs)
  std::size_t worker_jobs = 0;  // refits and plans the workers ran (whole runs)
  std::size_t batch_workers = 0;  // workers the kernel ran under SCHED_BATCH (most in one run)
};

// What happens between two timed decisions, and how the workers are scheduled.
struct Workload {
  double train_ms = 0.0;
  bool train_busy = false;  // spin for train_ms rather than sleep
  bool batch_workers = true;  // OnlineOptions::batch_scheduled_workers
};

void train(const Workload& w) {
  const auto length = std::chrono::duration<double, std::milli>(w.train_ms);
  if (!w.train_busy) {
    std::this_thread::sleep_for(length);
    return;
  }
  const auto until = std::chrono::steady_clock::now() + length;
  while (std::chrono::steady_clock::now() < until) {
  }
}

double mean(const std::vector<double>& v) {
  if (v.empty()) return std::nan("");
  double sum = 0.0;
  for (double x : v) sum += x;
  return sum / static_cast<double>(v.size());
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const double rank = p / 100.0 * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(rank));
  const auto hi = std::min(v.size() - 1, lo + 1);
  return v[lo] + (rank - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

// One run: `points` observed before the timed window, `window` timed decisions after it.
void measure(std::size_t points, std::size_t window, unsigned seed, mp::OnlineOptions::WorkMode mode, bool reuse_plans,
             double cost_ratio, const Workload& workload, Sample& out) {
  const std::size_t total = points + window;
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(0.0, 0.01);
  const double dt = 2.0;  // seconds between logged points
  mp::OnlineOptions o;
  o.forecast.total_steps = static_cast<std::int64_t>(2 * total);  // the run goes on after the window
  o.warmup_step = static_cast<std::int64_t>(points / 2);           // decisions from half-way to the window
  o.costs.stall_s = cost_ratio * dt;
  o.costs.delivery_s = 0.5 * o.costs.stall_s;
  o.work_mode = mode;
  o.reuse_plans = reuse_plans;
  o.batch_scheduled_workers = workload.batch_workers;
  mp::OnlineScheduler s(o);
  double stalls = 0.0;
  std::size_t fits_before = 0, published_before = 0, plans_before = 0, ahead_before = 0;
  for (std::size_t i = 0; i < total; ++i) {
    const auto step = static_cast<std::int64_t>(i + 1);
    const double x = static_cast<double>(step) / static_cast<double>(o.forecast.total_steps);
    const double loss = 2.0 + 1.5 * std::pow(x, -0.3) * 0.2 + noise(rng);
    s.observe(step, loss, dt * static_cast<double>(step) + stalls);
    if (i == points) {
      fits_before = s.stats().fits;
      published_before = s.published_steps().size();
      plans_before = s.stats().plans;
      ahead_before = s.stats().answered_ahead;
    }
    const auto t0 = std::chrono::steady_clock::now();
    const bool publish = s.should_publish(step);
    const auto t1 = std::chrono::steady_clock::now();
    if (publish) stalls += o.costs.stall_s;
    if (i >= points) out.latency_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    // The training between two logged points, in the timed window only: the time the workers
    // have to answer before the next decision (a workload model, not synchronisation).
    if (i >= points && workload.train_ms > 0) train(workload);
  }
  s.wait_for_background();
  out.batch_workers = std::max(out.batch_workers, s.stats().batch_scheduled_workers);
  out.worker_s += s.stats().worker_s;
  out.worker_jobs += s.stats().background_plans + (mode == mp::OnlineOptions::WorkMode::kRefitsInBackground ? s.stats().background_fits : 0);
  out.fits += s.stats().fits - fits_before;
  out.publishes += s.published_steps().size() - published_before;
  out.plans += s.stats().plans - plans_before;
  out.ahead += s.stats().answered_ahead - ahead_before;
}

// The floor of a background decision on this machine, under the same workload: the scheduler's
// own hand-over (OnlineWorker::submit) of an empty job to its worker, asleep since it finished
// the job before, timed on the caller; `decisions` of them, each after the training between two
// decisions, the worker scheduled as the scheduler's are.
std::vector<double> handover_floor_us(std::size_t decisions, const Workload& workload) {
  modelcast::predictor::detail::OnlineWorker<int, int> worker([](int&) { return 0; }, workload.batch_workers);
  std::vector<double> us;
  for (std::size_t i = 0; i < decisions; ++i) {
    if (workload.train_ms > 0) train(workload);
    if (i > 0) worker.wait();  // the job before, done during the training: the worker is asleep again
    const auto t0 = std::chrono::steady_clock::now();
    worker.submit(0);
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  worker.wait();
  return us;
}

std::vector<std::size_t> parse_sizes(const std::string& text) {
  std::vector<std::size_t> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    std::size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || v < 10) throw CLI::ValidationError("--points", "'" + item + "' is not an integer >= 10");
    out.push_back(static_cast<std::size_t>(v));
  }
  if (out.empty()) throw CLI::ValidationError("--points", "no sizes given");
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Latency of OnlineScheduler::should_publish on the calling thread"};
  std::string sizes_text = "100,1000,10000", modes_text = "all";
  std::size_t window = 200;
  unsigned runs = 5;
  double cost_ratio = 2.0;
  Workload workload;
  bool json = false, replan_every = false, inherited_workers = false;
  unsigned busy_threads = 0;
  app.add_option("--points", sizes_text, "observed points before the timed window, comma-separated");
  app.add_option("--window", window, "timed decisions per run")->check(CLI::Range(1, 100000));
  app.add_option("--runs", runs, "independent runs (seeds) per size")->check(CLI::Range(1, 1000));
  app.add_option("--cost-ratio", cost_ratio, "publish stall in units of the time between logged points")
      ->check(CLI::Range(0.0, 1000.0));
  app.add_option("--train-ms", workload.train_ms,
                 "training time between two timed decisions (the workers' time to answer before the next one); "
                 "default 0: points back to back")
      ->check(CLI::Range(0.0, 10000.0));
  app.add_flag("--train-busy", workload.train_busy, "the training between decisions spins the caller's CPU instead of sleeping");
  app.add_option("--busy-threads", busy_threads, "threads spinning for the whole run beside the caller (a loaded machine)")
      ->check(CLI::Range(0, 256));
  app.add_flag("--inherited-workers", inherited_workers,
               "OnlineOptions::batch_scheduled_workers off: the workers keep the caller's scheduling policy");
  app.add_option("--mode", modes_text, "OnlineOptions::work_mode: inline, refits_in_background, background or all")
      ->check(CLI::IsMember({"inline", "refits_in_background", "background", "all"}));
  app.add_flag("--replan-every-decision", replan_every,
               "reuse_plans off: an exact plan at every decision (the scheduler's behaviour before plan reuse)");
  app.add_flag("--json", json, "print JSON");
  CLI11_PARSE(app, argc, argv);
  std::vector<std::size_t> sizes;
  try {
    sizes = parse_sizes(sizes_text);
  } catch (const CLI::Error& e) {
    return app.exit(e);
  }
  std::vector<std::pair<std::string, mp::OnlineOptions::WorkMode>> modes;
  for (const auto& [name, mode] : {std::pair{"inline", mp::OnlineOptions::WorkMode::kInline},
                                   {"refits_in_background", mp::OnlineOptions::WorkMode::kRefitsInBackground},
                                   {"background", mp::OnlineOptions::WorkMode::kBackground}})
    if (modes_text == "all" || modes_text == name) modes.emplace_back(name, mode);

  workload.batch_workers = !inherited_workers;
  // The rest of a loaded machine: a workload model running beside the measurement, stopped at the end.
  std::vector<std::jthread> spinners;  // stopped and joined on every way out of main
  for (unsigned i = 0; i < busy_threads; ++i)
    spinners.emplace_back([](std::stop_token stop) {
      while (!stop.stop_requested()) {
      }
    });
  // The least a hand-over costs here, measured first under the same workload (busy threads included).
  const std::vector<double> floor_us = handover_floor_us(window * runs, workload);
  const double floor_mean = mean(floor_us);
  std::vector<Sample> samples;
  for (const auto& [name, mode] : modes)
    for (std::size_t n : sizes) {
      Sample s;
      s.points = n;
      s.mode = name;
      for (unsigned r = 0; r < runs; ++r) measure(n, window, 1000 + r, mode, !replan_every, cost_ratio, workload, s);
      samples.push_back(std::move(s));
    }
  spinners.clear();

  Json out = Json::array();
  for (const auto& s : samples)
    out.push_back({{"points", s.points},
                   {"work_mode", s.mode},
                   {"decisions", s.latency_us.size()},
                   {"mean_us", mean(s.latency_us)},
                   {"median_us", percentile(s.latency_us, 50)},
                   {"p99_us", percentile(s.latency_us, 99)},
                   {"max_us", percentile(s.latency_us, 100)},
                   {"fits_in_window", s.fits},
                   {"publishes_in_window", s.publishes},
                   {"plans_in_window", s.plans},
                   {"answered_ahead_in_window", s.ahead},
                   {"worker_ms_per_job", s.worker_jobs ? 1e3 * s.worker_s / static_cast<double>(s.worker_jobs) : 0.0},
                   {"batch_scheduled_workers", s.batch_workers},
                   {"mean_over_handover_floor", mean(s.latency_us) / floor_mean}});
  if (json) {
    std::cout << Json{{"benchmark", "decision_cost"}, {"window", window},         {"runs", runs},
                      {"cost_ratio", cost_ratio},    {"reuse_plans", !replan_every}, {"train_ms", workload.train_ms},
                      {"train_busy", workload.train_busy}, {"busy_threads", busy_threads},
                      {"batch_scheduled_workers_asked", workload.batch_workers},
                      {"handover_floor", {{"decisions", floor_us.size()}, {"mean_us", floor_mean},
                                          {"median_us", percentile(floor_us, 50)}, {"p99_us", percentile(floor_us, 99)}}},
                      {"results", out}}
                     .dump(2)
              << "\n";
    return 0;
  }
  std::printf("should_publish latency on the calling thread (%u runs x %zu timed decisions, cost %.1fx, %s)\n", runs,
              window, cost_ratio, replan_every ? "an exact plan at every decision" : "plans reused while they hold");
  std::printf("between decisions: %.1f ms of training, %s; %u busy threads beside; workers %s\n", workload.train_ms,
              workload.train_busy ? "spinning" : "sleeping", busy_threads,
              workload.batch_workers ? "batch-scheduled" : "with the caller's policy");
  std::printf("hand-over floor (an empty job to a sleeping thread, same workload): mean %.1f us, median %.1f us, "
              "p99 %.1f us\n",
              floor_mean, percentile(floor_us, 50), percentile(floor_us, 99));
  std::printf("%-20s %8s %10s %9s %12s %12s %12s %6s %10s %6s %6s %14s\n", "mode", "points", "mean_us", "/floor",
              "median_us", "p99_us", "max_us", "fits", "publishes", "plans", "ahead", "worker_ms/job");
  for (const auto& r : out)
    std::printf("%-20s %8zu %10.1f %9.2f %12.1f %12.1f %12.1f %6zu %10zu %6zu %6zu %14.2f\n",
                r["work_mode"].get<std::string>().c_str(), r["points"].get<std::size_t>(), r["mean_us"].get<double>(),
                r["mean_over_handover_floor"].get<double>(),
                r["median_us"].get<double>(), r["p99_us"].get<double>(),
                r["max_us"].get<double>(), r["fits_in_window"].get<std::size_t>(),
                r["publishes_in_window"].get<std::size_t>(), r["plans_in_window"].get<std::size_t>(),
                r["answered_ahead_in_window"].get<std::size_t>(), r["worker_ms_per_job"].get<double>());
  return 0;
}
