// Replay of the workflow: scores every publish policy on one recorded training run (trainer
// --record), so that all policies see the same parameters at the same training times and differ
// only in when they publish and what publishing costs them. The costs are measured, not chosen:
// each publish stalls training by --stall-s and becomes servable --delivery-s later (both
// measured by the live runs), and each policy's own decision time is measured here as it runs
// and added to the training clock. The online policy is the exception when --online-decide-s
// gives its live run's decision time on the training thread: the live trainer refits in the
// background (--work-mode), while the replay refits inline by default (its decisions then do
// not depend on thread timing) and would otherwise charge the whole refit, four times the live
// cost here; that time is then spread evenly over its decisions. With --work-mode other than
// inline the replay waits for the scheduler's workers after each decision, outside the timed
// region, so that a worker's lag is exactly one evaluation. Requests and their ground truth are the inference server's
// (same seed, rate, stride, window); outputs have the live runs' format (server.csv,
// trainer.json) so the report reads both alike.
//
// One thread drives everything; the online policy's scheduler owns its two worker threads.
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "lorenz63.h"
#include "publish_policy.h"
#include "snapshot_record.h"
#include "surrogate_mlp.h"

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Per-request losses of each recorded snapshot, computed when a policy first serves it.
class LossTable {
 public:
  LossTable(const std::vector<sim_coupled::Snapshot>& snaps, int hidden, torch::Tensor x, torch::Tensor y)
      : snaps_(snaps), model_(hidden), x_(std::move(x)), y_(std::move(y)) {}
  const std::vector<double>& of(std::size_t index) {
    auto it = cache_.find(index);
    if (it != cache_.end()) return it->second;
    torch::NoGradGuard no_grad;
    const auto& params = snaps_[index].params;
    std::size_t at = 0;
    for (auto& p : model_->parameters()) {
      const auto n = static_cast<std::size_t>(p.numel());
      if (at + n > params.size()) throw std::runtime_error("record has fewer parameters than --hidden implies");
      p.copy_(torch::from_blob(const_cast<float*>(&params[at]), p.sizes(), torch::kFloat32));
      at += n;
    }
    if (at != params.size()) throw std::runtime_error("record has more parameters than --hidden implies");
    const torch::Tensor loss = (model_->forward(x_) - y_).pow(2).mean(1).to(torch::kFloat64).contiguous();
    const double* l = loss.data_ptr<double>();
    return cache_[index] = std::vector<double>(l, l + loss.numel());
  }

 private:
  const std::vector<sim_coupled::Snapshot>& snaps_;
  sim_coupled::Surrogate model_;
  torch::Tensor x_, y_;
  std::map<std::size_t, std::vector<double>> cache_;
};

struct Published {
  std::size_t snapshot;
  double servable_s;  // training clock of the replayed policy
};

}  // namespace

int main(int argc, char** argv) try {
  std::string record, out, policies = "online,every_epoch,every_n,viper_fixed,viper_greedy";
  std::uint64_t seed = 1;
  int horizon = 10, stride = 7, hidden = 128;
  std::int64_t warmup_steps = 600, every_n = 100, epoch_steps = 160;
  double rate = 200, window_s = 20, stall_s = -1, delivery_s = -1, online_decide_s = -1;
  std::string work_mode = "inline";
  CLI::App app{"Scores publish policies on a recorded training run of the Lorenz-63 surrogate"};
  app.add_option("--record", record, "the trainer's --record file")->required();
  app.add_option("--out", out, "directory for <policy>/server.csv and <policy>/trainer.json")->required();
  app.add_option("--policies", policies, "comma-separated policies")->capture_default_str();
  app.add_option("--stall-s", stall_s, "measured training stall per publish (s)")->required();
  app.add_option("--delivery-s", delivery_s, "measured publish-to-servable time (s)")->required();
  app.add_option("--online-decide-s", online_decide_s,
                 "the live online run's decision time on the training thread (s), charged to the replayed "
                 "online policy instead of its inline time; negative (default): measure here");
  app.add_option("--work-mode", work_mode,
                 "online: where the scheduler refits and plans (inline, refits_in_background, background); the replay "
                 "waits for its workers after each decision")
      ->capture_default_str();
  app.add_option("--seed", seed, "as the trainer's and the server's")->capture_default_str();
  app.add_option("--horizon", horizon, "as the trainer's")->capture_default_str();
  app.add_option("--hidden", hidden, "as the trainer's")->capture_default_str();
  app.add_option("--warmup-steps", warmup_steps, "as the trainer's")->capture_default_str();
  app.add_option("--every-n", every_n, "as the trainer's")->capture_default_str();
  app.add_option("--epoch-steps", epoch_steps, "the trainer's --buffer / --batch")->capture_default_str();
  app.add_option("--stride", stride, "as the server's")->capture_default_str();
  app.add_option("--rate", rate, "as the server's")->capture_default_str();
  app.add_option("--window-s", window_s, "as the server's (--requests / --rate)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (!(stall_s >= 0) || !(delivery_s >= 0)) throw std::invalid_argument("--stall-s and --delivery-s must be >= 0");
  // --horizon 0 built an empty trajectory, read past its end (SIGSEGV).
  if (!(rate > 0) || !(window_s > 0) || stride <= 0 || horizon <= 0)
    throw std::invalid_argument("--rate, --window-s, --stride and --horizon must be > 0");

  torch::set_num_threads(1);
  const auto snaps = sim_coupled::read_record(record);
  const std::int64_t eval_every = snaps.front().step, total = snaps.back().step;
  for (std::size_t i = 0; i < snaps.size(); ++i)
    if (snaps[i].step != eval_every * static_cast<std::int64_t>(i + 1))
      throw std::runtime_error(record + ": snapshots are not at every multiple of " + std::to_string(eval_every));
  // The replay knows the parameters at evaluation steps only, so every policy must publish there.
  for (auto [name, value] : {std::pair{"--epoch-steps", epoch_steps}, {"--every-n", every_n}, {"--warmup-steps", warmup_steps}})
    if (value <= 0 || value % eval_every != 0)
      throw std::invalid_argument(std::string(name) + " must be a positive multiple of the record's evaluation interval " +
                                  std::to_string(eval_every));

  const int requests = static_cast<int>(window_s * rate);
  sim_coupled::Trajectory truth(sim_coupled::request_seed(seed), horizon);
  torch::Tensor x = torch::empty({requests, 3}), y = torch::empty({requests, 3});
  for (int r = 0; r < requests; ++r) {
    std::array<float, 3> in, target;
    for (int k = 0; k < stride; ++k) truth.next(&in, &target);
    for (int j = 0; j < 3; ++j) x[r][j] = in[j], y[r][j] = target[j];
  }
  LossTable losses(snaps, hidden, x, y);
  const double record_train_s = snaps.back().time_s;

  std::stringstream names(policies);
  for (std::string name; std::getline(names, name, ',');) {
    sim_coupled::PolicySettings ps{.kind = sim_coupled::parse_policy(name), .total_steps = total, .eval_every = eval_every,
                                   .warmup_step = warmup_steps, .epoch_steps = epoch_steps, .every_n = every_n,
                                   .request_rate = rate, .window_s = window_s};
    ps.work_mode = sim_coupled::parse_work_mode(work_mode);
    sim_coupled::PublishPolicy policy(ps);
    double extra = 0, decide = 0;  // clock added by stalls and decisions; decisions alone
    const bool charged = ps.kind == sim_coupled::parse_policy("online") && online_decide_s >= 0;
    const auto decisions = static_cast<double>(std::count_if(
        snaps.begin(), snaps.end(), [&](const sim_coupled::Snapshot& s) { return s.step > warmup_steps; }));
    std::vector<Published> published;
    auto publish = [&](std::size_t i) {
      extra += stall_s;
      published.push_back({i, snaps[i].time_s + extra + delivery_s});
    };
    for (std::size_t i = 0; i < snaps.size(); ++i) {
      const auto& snap = snaps[i];
      auto t0 = Clock::now();
      policy.observe(snap.step, snap.val_loss, snap.time_s + extra);
      bool now = false;
      if (snap.step == warmup_steps) {
        publish(i);
        policy.start_serving(stall_s, delivery_s);
      } else if (snap.step > warmup_steps) {
        now = policy.should_publish(snap.step, true);
      }
      const double spent = !charged ? seconds_since(t0) : snap.step > warmup_steps ? online_decide_s / decisions : 0.0;
      policy.settle();
      decide += spent;
      extra += spent;
      if (now) {
        publish(i);
        policy.update_costs(stall_s, delivery_s);
      }
    }
    if (published.empty()) throw std::runtime_error("--warmup-steps " + std::to_string(warmup_steps) + " is not in the record");
    if (!policy.viper_reason().empty()) std::fprintf(stderr, "replay: %s: %s\n", name.c_str(), policy.viper_reason().c_str());

    const auto dir = std::filesystem::path(out) / name;
    std::filesystem::create_directories(dir);
    std::ofstream csv(dir / "server.csv");
    csv << "request,time_s,version,step,loss\n";
    const double start = published.front().servable_s;
    std::size_t serving = 0;
    for (int r = 0; r < requests; ++r) {
      const double t = start + r / rate;
      while (serving + 1 < published.size() && published[serving + 1].servable_s <= t) ++serving;
      const auto& snap = snaps[published[serving].snapshot];
      csv << r << ',' << t - start << ',' << serving + 1 << ',' << snap.step << ','
          << losses.of(published[serving].snapshot)[static_cast<std::size_t>(r)] << '\n';
    }
    const double overhead = stall_s * static_cast<double>(published.size() - 1) + decide;
    std::ofstream json(dir / "trainer.json");
    json << "{\"policy\": \"" << name << "\", \"mode\": \"replay\", \"seed\": " << seed << ", \"steps\": " << total
         << ", \"epoch_steps\": " << epoch_steps << ", \"publishes\": " << published.size()
         << ", \"train_s\": " << record_train_s + extra << ", \"stall_s\": " << stall_s * static_cast<double>(published.size() - 1)
         << ", \"decide_s\": " << decide << ", \"training_slowdown_pct\": " << 100.0 * overhead / record_train_s
         << ", \"final_val_loss\": " << snaps.back().val_loss << ", \"publish_steps\": [";
    for (std::size_t i = 0; i < published.size(); ++i) json << (i ? ", " : "") << snaps[published[i].snapshot].step;
    json << "]}\n";
    if (!csv.flush() || !json.flush()) throw std::runtime_error("cannot write under --out " + out);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "replay: %s\n", e.what());
  return 1;
}
