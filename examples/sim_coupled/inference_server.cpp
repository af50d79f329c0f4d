// The inference server of the simulation-coupled workflow: a separate process that answers a
// stream of requests at a fixed rate with the newest version of the surrogate, scores each
// answer against the simulation's ground truth (the same seeded Lorenz-63 run, recomputed here)
// and logs per request its loss and the version used.
//
// The serving window starts when the first version (the trainer's warm-up model) arrives and
// lasts --requests requests at --rate per second, whatever the trainer does meanwhile, so every
// publish policy is scored on the same requests over the same time.
//
// Threads: main answers the requests; the consumer's own threads install versions.
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>

#include "lorenz63.h"
#include "modelcast/consumer.h"
#include "modelcast/error.h"
#include "surrogate_mlp.h"

namespace {

// Tensors over the view's memory, no copy. The caller holds `view` while it uses them: the
// view keeps the bytes valid and unchanged. modelcast's bytes are read-only; nothing here
// writes into them (inference only, under NoGradGuard).
std::map<std::string, torch::Tensor> wrap(const modelcast::ModelView& view) {
  std::map<std::string, torch::Tensor> params;
  for (const modelcast::TensorView& t : view.tensors()) {
    if (t.dtype() != modelcast::DType::kF32)
      throw std::runtime_error("tensor " + t.name() + " is not float32");
    params[t.name()] = torch::from_blob(const_cast<void*>(t.data), t.shape(), torch::kFloat32);
  }
  return params;
}

}  // namespace

int main(int argc, char** argv) try {
  std::string endpoint, log_path;
  std::uint64_t seed = 1;
  int horizon = 10, stride = 7, requests = 4000;
  double rate = 200, timeout_s = 60;
  CLI::App app{"Inference server of the Lorenz-63 surrogate, fed by modelcast"};
  app.add_option("--endpoint", endpoint, "the trainer's control endpoint")->required();
  app.add_option("--seed", seed, "seed of the simulation (as the trainer's)")->capture_default_str();
  app.add_option("--horizon", horizon, "integration steps predicted (as the trainer's)")->capture_default_str();
  app.add_option("--stride", stride, "integration steps between requests")->capture_default_str();
  app.add_option("--requests", requests, "requests answered")->capture_default_str();
  app.add_option("--rate", rate, "requests per second")->capture_default_str();
  app.add_option("--timeout-s", timeout_s, "bound on the wait for the first version")->capture_default_str();
  app.add_option("--log", log_path, "CSV: request, time_s, version, step, loss")->required();
  CLI11_PARSE(app, argc, argv);
  if (horizon <= 0 || stride <= 0 || requests <= 0 || !(rate > 0))
    throw std::invalid_argument("--horizon, --stride, --requests and --rate must be > 0");
  if (!(timeout_s > 0 && timeout_s <= 86400)) throw std::invalid_argument("--timeout-s must be in (0, 86400]");

  torch::set_num_threads(1);
  torch::NoGradGuard no_grad;
  std::ofstream log(log_path);
  if (!log) throw std::runtime_error("cannot write --log " + log_path);
  log << "request,time_s,version,step,loss\n";

  modelcast::ConsumerOptions options;
  options.producer_endpoint = endpoint;
  options.model_name = "lorenz_surrogate";
  options.consumer_name = "inference-server";
  // The trainer may pause (a scheduler refit, a slow step on a busy machine) longer than the
  // default; only a dead trainer should count as gone.
  options.producer_timeout = std::chrono::milliseconds(10000);
  modelcast::Consumer consumer(options);
  const auto first = consumer.wait_for_version(1, std::chrono::milliseconds(static_cast<long>(timeout_s * 1000)));
  if (!first) {
    const auto stats = consumer.stats();
    throw std::runtime_error("no version arrived within --timeout-s (" + std::to_string(timeout_s) + " s): " +
                             (!stats.last_error.empty() ? stats.last_error
                              : stats.producer_connected ? "the trainer joined but published nothing"
                                                         : "no trainer answered at " + endpoint));
  }

  if (const auto it = first.metadata().find("horizon"); it != first.metadata().end() && it->second != std::to_string(horizon))
    throw std::invalid_argument("--horizon " + std::to_string(horizon) + " differs from the trainer's (" + it->second +
                                "): the model predicts " + it->second + " integration steps ahead");
  sim_coupled::Trajectory truth(sim_coupled::request_seed(seed), horizon);
  const auto start = std::chrono::steady_clock::now();
  const auto period = std::chrono::duration<double>(1.0 / rate);
  double total = 0;
  for (int i = 0; i < requests; ++i) {
    // Requests arrive on a fixed timetable; a late answer does not shift the later arrivals.
    std::this_thread::sleep_until(start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(period * i));
    std::array<float, 3> in, target;
    for (int k = 0; k < stride; ++k) truth.next(&in, &target);
    const modelcast::ModelView view = consumer.acquire();  // newest; held until the answer is scored
    const auto params = wrap(view);
    const torch::Tensor x = torch::from_blob(in.data(), {1, 3}, torch::kFloat32);
    const torch::Tensor y = torch::from_blob(target.data(), {1, 3}, torch::kFloat32);
    const double loss = torch::mse_loss(sim_coupled::surrogate_forward(params, x), y).item<double>();
    total += loss;
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    log << i << ',' << t << ',' << view.version() << ',' << view.step() << ',' << loss << '\n';
  }
  if (!log.flush()) throw std::runtime_error("cannot write --log " + log_path);
  std::printf("{\"requests\": %d, \"cumulative_inference_loss\": %.6f, \"last_version\": %llu}\n", requests, total,
              static_cast<unsigned long long>(consumer.stats().current_version));
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "inference server: %s\n", e.what());
  return 1;
}
