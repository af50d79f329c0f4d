// When the trainer publishes: the online scheduler or one of the baselines it is compared with.
// Free of LibTorch. Not thread-safe: one thread (the trainer's, or the replay's) drives it.
//
// Every policy publishes the warm-up model (the server's window starts on it); after that:
//  online        OnlineScheduler, asked after every evaluation;
//  every_epoch   at the end of every epoch (epoch_steps steps, see the trainer's --help);
//  every_n       every n steps;
//  viper_fixed   Viper's best fixed interval, planned once at warm-up on Viper's forecast;
//  viper_greedy  Viper's loss-drop threshold rule, planned the same way.
// The Viper rules pick among the evaluation steps, as the online scheduler does.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "modelcast/predictor.h"

namespace sim_coupled {

enum class PolicyKind { kOnline, kEveryEpoch, kEveryN, kViperFixed, kViperGreedy };

// Throws std::invalid_argument naming the value and the accepted names.
PolicyKind parse_policy(const std::string& name);
// inline, refits_in_background or background (OnlineOptions::WorkMode); std::invalid_argument
// naming the value otherwise.
modelcast::predictor::OnlineOptions::WorkMode parse_work_mode(const std::string& name);
std::string policy_name(PolicyKind kind);

struct PolicySettings {
  PolicyKind kind = PolicyKind::kOnline;
  std::int64_t total_steps = 0;   // the last training step (always evaluated)
  std::int64_t eval_every = 0;    // evaluations at every multiple of it, and at total_steps
  std::int64_t warmup_step = 0;   // an evaluation step
  std::int64_t epoch_steps = 0;   // every_epoch
  std::int64_t every_n = 0;       // every_n
  double request_rate = 1.0;      // the server's requests per second
  double window_s = 0.0;          // the server's window, from the warm-up version on
  // online: where the scheduler refits and plans (OnlineOptions::WorkMode). Replays fed points
  // back to back call settle() after each decision, so that a worker's lag is exactly one
  // evaluation whatever its speed.
  modelcast::predictor::OnlineOptions::WorkMode work_mode = modelcast::predictor::OnlineOptions::WorkMode::kInline;
};

class PublishPolicy {
 public:
  // Throws std::invalid_argument on inconsistent settings (warm-up outside the run, zero epoch).
  explicit PublishPolicy(const PolicySettings& settings);
  ~PublishPolicy();

  // Every evaluation, in step order, from the first on (the forecasters need the whole log).
  // time_s: the training clock, publish stalls included.
  void observe(std::int64_t step, double loss, double time_s);
  // After the warm-up publish, with its measured stall and delivery time: the Viper rules plan
  // their schedule here, on Viper's forecast from the log so far.
  void start_serving(double stall_s, double delivery_s);
  // Whether to publish after `step` (> warm-up); `evaluated`: observe() was called for it.
  bool should_publish(std::int64_t step, bool evaluated);
  // Waits for the online scheduler's workers, if it has any.
  void settle();
  // Costs measured by later publishes (the online scheduler re-plans with them).
  void update_costs(double stall_s, double delivery_s);

  const std::vector<std::int64_t>& viper_plan() const { return viper_plan_; }
  // Evaluations observe() left out: their loss was not finite (a diverged run).
  std::size_t nonfinite_evaluations() const { return nonfinite_; }
  // The online scheduler's counters (all zero for the other policies).
  modelcast::predictor::OnlineStats online_stats() const;
  // Why the Viper rule chose its plan (in particular why it publishes nothing); empty for the
  // other policies and before start_serving().
  const std::string& viper_reason() const { return viper_reason_; }

 private:
  PolicySettings settings_;
  std::unique_ptr<modelcast::predictor::OnlineScheduler> online_;
  std::vector<modelcast::predictor::CurvePoint> log_;
  std::vector<std::int64_t> viper_plan_;
  std::string viper_reason_;
  std::set<std::int64_t> viper_pending_;
  std::size_t nonfinite_ = 0;
  std::int64_t last_left_out_ = -1;  // a step below every step there is
};

}  // namespace sim_coupled
