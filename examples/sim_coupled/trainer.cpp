// The trainer of the simulation-coupled workflow: it runs the Lorenz-63 simulation, trains the
// surrogate on the samples as they stream out of it, and publishes the surrogate's parameters
// through modelcast when its publish policy says so (see publish_policy.h).
//
// Threads: main owns the model, the optimiser, the simulation and the policy; the producer's
// service thread only runs on_delivery, which writes DeliveryLog under its mutex.
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <cstring>
#include <map>
#include <optional>
#include <mutex>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "lorenz63.h"
#include "modelcast/error.h"
#include "modelcast/producer.h"
#include "publish_policy.h"
#include "snapshot_record.h"
#include "surrogate_mlp.h"

namespace {

using Clock = std::chrono::steady_clock;
double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Delivery times reported by the producer's service thread, read by the training thread.
class DeliveryLog {
 public:
  void record(const modelcast::Delivery& d) {
    std::lock_guard lock(mutex_);
    seconds_[d.version] = std::chrono::duration<double>(d.since_publish).count();
    changed_.notify_all();
  }
  // Seconds from publish to the consumer's ack of `version`; false if not acked within timeout.
  bool wait(std::uint64_t version, std::chrono::seconds timeout, double* out) {
    std::unique_lock lock(mutex_);
    if (!changed_.wait_for(lock, timeout, [&] { return seconds_.count(version) > 0; })) return false;
    *out = seconds_[version];
    return true;
  }
  double latest() {
    std::lock_guard lock(mutex_);
    return seconds_.empty() ? 0.0 : seconds_.rbegin()->second;
  }
  std::vector<double> all() {
    std::lock_guard lock(mutex_);
    std::vector<double> out;
    for (const auto& [version, s] : seconds_) out.push_back(s);
    return out;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::uint64_t, double> seconds_;
};

struct Settings {
  std::string endpoint, policy = "online", eval_log, summary, record, work_mode = "background";
  std::uint64_t seed = 1;
  std::int64_t steps = 6000, eval_every = 20, warmup_steps = 600, every_n = 100;
  int batch = 64, buffer = 10240, samples_per_step = 2, hidden = 128, horizon = 10, validation = 512;
  double lr = 1e-3, request_rate = 200, window_s = 20, timeout_s = 60;
  bool hold_until_eof = false;
};

// Samples the simulation has streamed so far: a ring of the newest `capacity` (input, target).
struct SampleBuffer {
  explicit SampleBuffer(int capacity) : data(static_cast<std::size_t>(capacity) * 6) {}
  void push(const std::array<float, 3>& in, const std::array<float, 3>& target) {
    float* row = &data[(next % capacity()) * 6];
    for (int i = 0; i < 3; ++i) row[i] = in[i], row[3 + i] = target[i];
    ++next;
  }
  std::size_t capacity() const { return data.size() / 6; }
  std::size_t size() const { return std::min(next, capacity()); }
  std::vector<float> data;
  std::size_t next = 0;
};

// JSON has no NaN or infinity: a diverged run's loss is null (it printed -nan, which report.py
// and every JSON reader refuse).
std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  std::ostringstream out;
  out << v;
  return out.str();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

void check_settings(const Settings& s) {
  if (s.endpoint.empty()) throw std::invalid_argument("--endpoint is required");
  if (s.steps <= 0 || s.eval_every <= 0 || s.steps % s.eval_every != 0)
    throw std::invalid_argument("--steps must be a positive multiple of --eval-every");
  if (s.batch <= 0 || s.buffer < s.batch || s.buffer % s.batch != 0)
    throw std::invalid_argument("--buffer must be a positive multiple of --batch");
  if (s.samples_per_step <= 0 || s.hidden <= 0 || s.horizon <= 0 || s.validation <= 0)
    throw std::invalid_argument("--samples-per-step, --hidden, --horizon and --validation must be > 0");
  // Adam refused it from inside LibTorch, with a C++ backtrace.
  if (!(std::isfinite(s.lr) && s.lr > 0)) throw std::invalid_argument("--lr must be a finite number > 0, got " + std::to_string(s.lr));
  // Whole seconds, as the waits take them: 0.5 became 0 s, -1 and 1e19 (past a long) were taken.
  if (!(s.timeout_s >= 1 && s.timeout_s <= 86400))
    throw std::invalid_argument("--timeout-s must be 1 to 86400 seconds, got " + std::to_string(s.timeout_s));
}

}  // namespace

int main(int argc, char** argv) try {
  Settings s;
  CLI::App app{"Lorenz-63 surrogate trainer that publishes through modelcast"};
  app.add_option("--endpoint", s.endpoint, "producer control endpoint (ipc://PATH or tcp://127.0.0.1:PORT)");
  app.add_option("--policy", s.policy, "online, every_epoch, every_n, viper_fixed or viper_greedy")->capture_default_str();
  app.add_option("--work-mode", s.work_mode, "online: where the scheduler refits and plans (inline, refits_in_background, background)")
      ->capture_default_str();
  // Checked as text: -1 became 18446744073709551615, and a step count past int64 was "not a
  // positive multiple of --eval-every".
  app.add_option("--seed", s.seed, "seed of the simulation, the weights and the batches")
      ->check([](const std::string& v) {
        return !v.empty() && v.size() <= 19 && v.find_first_not_of("0123456789") == std::string::npos
                   ? std::string()
                   : "must be a whole number from 0 to 10^19 - 1, got '" + v + "'";
      })
      ->capture_default_str();
  app.add_option("--steps", s.steps, "training steps (optimiser updates)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--eval-every", s.eval_every, "validation loss every this many steps")->capture_default_str();
  app.add_option("--warmup-steps", s.warmup_steps, "first publish; serving starts on it")->capture_default_str();
  app.add_option("--every-n", s.every_n, "every_n: publish every this many steps")->capture_default_str();
  app.add_option("--batch", s.batch, "samples per step")->capture_default_str();
  app.add_option("--buffer", s.buffer,
                 "newest streamed samples kept; an epoch is buffer/batch steps (one buffer's worth drawn)")
      ->capture_default_str();
  app.add_option("--samples-per-step", s.samples_per_step, "simulation steps streamed per training step")->capture_default_str();
  app.add_option("--hidden", s.hidden, "MLP width")->capture_default_str();
  app.add_option("--horizon", s.horizon, "integration steps between input and target")->capture_default_str();
  app.add_option("--validation", s.validation, "held-out samples for the validation loss")->capture_default_str();
  app.add_option("--lr", s.lr, "Adam learning rate")->capture_default_str();
  app.add_option("--request-rate", s.request_rate, "the server's requests per second")->capture_default_str();
  app.add_option("--window-s", s.window_s, "the server's window in seconds")->capture_default_str();
  app.add_option("--timeout-s", s.timeout_s, "bound on waits for the server")->capture_default_str();
  app.add_option("--eval-log", s.eval_log, "CSV of evaluations and publishes");
  app.add_option("--summary", s.summary, "JSON summary of the run");
  app.add_option("--record", s.record, "record every evaluation's parameters and bare training clock for the replay");
  app.add_flag("--hold-until-eof", s.hold_until_eof, "after training, keep serving versions until stdin closes");
  CLI11_PARSE(app, argc, argv);
  check_settings(s);

  // One thread, fixed seeds: the parameters after every step are the same in every run of a
  // seed, whatever the policy, so policies differ only in when they publish.
  torch::set_num_threads(1);
  torch::manual_seed(s.seed);
  sim_coupled::Surrogate model(s.hidden);
  torch::optim::Adam optimiser(model->parameters(), torch::optim::AdamOptions(s.lr));

  sim_coupled::PolicySettings ps;
  ps.kind = sim_coupled::parse_policy(s.policy);
  ps.total_steps = s.steps;
  ps.eval_every = s.eval_every;
  ps.warmup_step = s.warmup_steps;
  ps.epoch_steps = s.buffer / s.batch;
  ps.every_n = s.every_n;
  ps.request_rate = s.request_rate;
  ps.window_s = s.window_s;
  // The scheduler's refits and plans off the training thread being timed (--work-mode).
  ps.work_mode = sim_coupled::parse_work_mode(s.work_mode);
  sim_coupled::PublishPolicy policy(ps);

  DeliveryLog deliveries;
  modelcast::ProducerOptions options;
  options.model_name = "lorenz_surrogate";
  options.control_endpoint = s.endpoint;
  options.on_delivery = [&deliveries](const modelcast::Delivery& d) { deliveries.record(d); };
  modelcast::Producer producer(options);
  // The parameters' own memory, no copy: the optimiser updates them in place, so they stay at
  // these addresses (checked after training).
  std::vector<std::pair<torch::Tensor, const void*>> registered;
  for (const auto& item : model->named_parameters()) {
    const torch::Tensor& p = item.value();
    if (!p.is_contiguous() || p.scalar_type() != torch::kFloat32 || !p.device().is_cpu())
      throw std::runtime_error("parameter " + item.key() + " is not a contiguous CPU float32 tensor");
    producer.register_tensor({{.name = item.key(), .dtype = modelcast::DType::kF32, .shape = p.sizes().vec()},
                              p.data_ptr()});
    registered.emplace_back(p, p.data_ptr());
  }
  const auto timeout = std::chrono::seconds(static_cast<long>(s.timeout_s));
  std::optional<sim_coupled::RecordWriter> recorder;
  std::vector<float> flat;
  producer.prepare();
  if (!producer.wait_for_consumers(1, timeout)) throw std::runtime_error("no inference server joined in time");
  if (!s.record.empty()) {
    std::size_t count = 0;
    for (const auto& [tensor, address] : registered) count += static_cast<std::size_t>(tensor.numel());
    recorder.emplace(s.record, count);
    flat.resize(count);
  }

  sim_coupled::Trajectory stream(sim_coupled::training_seed(s.seed), s.horizon);
  sim_coupled::Trajectory held_out(sim_coupled::validation_seed(s.seed), s.horizon);
  torch::Tensor val_x = torch::empty({s.validation, 3}), val_y = torch::empty({s.validation, 3});
  for (int i = 0; i < s.validation; ++i) {
    std::array<float, 3> in, target;
    for (int k = 0; k < 7; ++k) held_out.next(&in, &target);  // spread along the attractor
    for (int j = 0; j < 3; ++j) val_x[i][j] = in[j], val_y[i][j] = target[j];
  }
  SampleBuffer samples(s.buffer);
  std::mt19937_64 draw(s.seed);
  auto stream_samples = [&](int n) {
    std::array<float, 3> in, target;
    for (int i = 0; i < n; ++i) stream.next(&in, &target), samples.push(in, target);
  };
  stream_samples(s.batch);

  std::ofstream eval_log;
  if (!s.eval_log.empty()) {
    eval_log.open(s.eval_log);
    if (!eval_log) throw std::runtime_error("cannot write --eval-log " + s.eval_log);
    eval_log << "step,time_s,val_loss,published,version,stall_s\n";
  }
  std::vector<std::int64_t> publish_steps;
  double stall_total = 0, decide_total = 0, excluded = 0, warmup_stall = 0;  // excluded: waiting for the server
  std::uint64_t last_version = 0;
  double final_val_loss = 0;
  std::vector<double> stalls;  // of the publishes after warm-up
  const auto start = Clock::now();
  torch::Tensor x = torch::empty({s.batch, 3}), y = torch::empty({s.batch, 3});
  for (std::int64_t step = 1; step <= s.steps; ++step) {
    stream_samples(s.samples_per_step);
    std::uniform_int_distribution<std::size_t> pick(0, samples.size() - 1);
    float* xs = x.data_ptr<float>();
    float* ys = y.data_ptr<float>();
    for (int b = 0; b < s.batch; ++b) {
      const float* row = &samples.data[pick(draw) * 6];
      std::copy(row, row + 3, xs + 3 * b);
      std::copy(row + 3, row + 6, ys + 3 * b);
    }
    optimiser.zero_grad();
    torch::mse_loss(model->forward(x), y).backward();
    optimiser.step();

    const bool evaluated = step % s.eval_every == 0;
    double val_loss = 0;
    if (evaluated) {
      torch::NoGradGuard no_grad;
      val_loss = torch::mse_loss(model->forward(val_x), val_y).item<double>();
      final_val_loss = val_loss;
      const auto t0 = Clock::now();
      const double clock = seconds(t0 - start) - excluded;  // publish stalls and decisions included
      if (recorder) {
        std::size_t at = 0;
        for (const auto& [tensor, address] : registered) {
          std::memcpy(&flat[at], address, static_cast<std::size_t>(tensor.numel()) * sizeof(float));
          at += static_cast<std::size_t>(tensor.numel());
        }
        // The replay adds each policy's own stalls and decisions to the bare training clock.
        recorder->append(step, clock - warmup_stall - stall_total - decide_total, val_loss, flat.data());
        excluded += seconds(Clock::now() - t0);  // recording is not training time
      }
      const auto t1 = Clock::now();
      policy.observe(step, val_loss, clock);
      decide_total += seconds(Clock::now() - t1);
    }
    bool publish = step == s.warmup_steps;
    if (!publish) {
      const auto t0 = Clock::now();
      publish = policy.should_publish(step, evaluated);
      decide_total += seconds(Clock::now() - t0);
    }
    double stall = 0;
    if (publish) {
      // The horizon travels with the model: a server set to another one scored every answer
      // against the wrong target (CIL 53.7 against 1.06) without a word.
      const auto ticket =
          producer.publish(step, {{"val_loss", std::to_string(val_loss)}, {"horizon", std::to_string(s.horizon)}});
      stall = seconds(ticket.stall);
      last_version = ticket.version;
      publish_steps.push_back(step);
      if (step == s.warmup_steps) {
        // Serving starts on the warm-up model: every policy waits for it the same way, and
        // this wait is not training time.
        const auto t0 = Clock::now();
        double delivery = 0;
        if (!deliveries.wait(ticket.version, timeout, &delivery))
          throw std::runtime_error("the inference server did not receive the warm-up version in time");
        excluded += seconds(Clock::now() - t0);
        warmup_stall = stall;
        const auto t1 = Clock::now();
        policy.start_serving(stall, delivery);
        decide_total += seconds(Clock::now() - t1);
        if (!policy.viper_reason().empty())
          std::fprintf(stderr, "trainer: %s: %s\n", s.policy.c_str(), policy.viper_reason().c_str());
      } else {
        stall_total += stall;
        stalls.push_back(stall);
        policy.update_costs(stall, deliveries.latest());
      }
    }
    if (evaluated && eval_log)
      eval_log << step << ',' << seconds(Clock::now() - start) - excluded << ',' << val_loss << ',' << publish << ','
               << (publish ? last_version : 0) << ',' << stall << '\n';
  }
  const double train_s = seconds(Clock::now() - start) - excluded;
  for (const auto& [tensor, address] : registered)
    if (tensor.data_ptr() != address) throw std::runtime_error("a registered parameter moved during training");

  const double overhead = stall_total + decide_total;
  const double slowdown_pct = 100.0 * overhead / (train_s - overhead);
  // null without a publish after warm-up (a median of nothing is no stall of 0 s), which
  // run_workflow.sh leaves out of the stall it charges in the replay; else as every other figure
  // (6 significant digits; std::to_string's 6 decimals kept 2 of a 50 us stall).
  std::ostringstream stall_median;
  if (stalls.empty()) {
    stall_median << "null";
  } else {
    stall_median << median(stalls);
  }
  std::ostringstream json;
  json << "{\"policy\": \"" << s.policy << "\", \"seed\": " << s.seed << ", \"steps\": " << s.steps
       << ", \"epoch_steps\": " << ps.epoch_steps << ", \"publishes\": " << publish_steps.size()
       << ", \"train_s\": " << train_s << ", \"stall_s\": " << stall_total << ", \"decide_s\": " << decide_total
       << ", \"training_slowdown_pct\": " << slowdown_pct << ", \"final_val_loss\": " << json_number(final_val_loss)
       << ", \"nonfinite_evaluations\": " << policy.nonfinite_evaluations()
       << ", \"stall_median_s\": " << stall_median.str()
       << ", \"warmup_stall_s\": " << warmup_stall << ", \"delivery_median_s\": " << median(deliveries.all())
       << ", \"work_mode\": \"" << s.work_mode << "\", \"worker_s\": " << policy.online_stats().worker_s
       << ", \"answered_ahead\": " << policy.online_stats().answered_ahead
       << ", \"answered_late\": " << policy.online_stats().answered_late
       << ", \"publish_steps\": [";
  for (std::size_t i = 0; i < publish_steps.size(); ++i) json << (i ? ", " : "") << publish_steps[i];
  json << "]}";
  std::printf("%s\n", json.str().c_str());
  if (!s.summary.empty()) {
    std::ofstream out(s.summary);
    if (!(out << json.str() << '\n')) throw std::runtime_error("cannot write --summary " + s.summary);
  }
  // The producer must outlive the serving window, or the last versions would never arrive.
  // A launcher that knows when the server is done says so by closing our stdin; run alone, the
  // trainer waits (bounded) for the last version to be delivered.
  if (s.hold_until_eof) {
    while (std::cin.get() != EOF) {
    }
  } else if (double delivered = 0; !deliveries.wait(last_version, timeout, &delivered)) {
    std::fprintf(stderr, "trainer: the last version (%llu) was not delivered within --timeout-s\n",
                 static_cast<unsigned long long>(last_version));
    return 1;  // the server did not get the model: a launcher must see it
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "trainer: %s\n", e.what());
  return 1;
}
