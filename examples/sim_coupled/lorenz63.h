// The simulation of the workflow: Lorenz-63 integrated with classic RK4, and the surrogate task
// built on it (predict the state `horizon` integration steps ahead from the current state).
// Header-only and free of LibTorch so that the trainer and the inference server compute exactly
// the same trajectories from the same seed: the server's ground truth is this code, rerun.
#pragma once

#include <array>
#include <cstdint>
#include <random>
#include <vector>

namespace sim_coupled {

using State = std::array<double, 3>;

struct Lorenz63 {
  double sigma = 10.0, rho = 28.0, beta = 8.0 / 3.0;
  double dt = 0.01;

  State derivative(const State& s) const {
    return {sigma * (s[1] - s[0]), s[0] * (rho - s[2]) - s[1], s[0] * s[1] - beta * s[2]};
  }
  State step(const State& s) const {
    auto add = [](const State& a, const State& b, double h) {
      return State{a[0] + h * b[0], a[1] + h * b[1], a[2] + h * b[2]};
    };
    const State k1 = derivative(s);
    const State k2 = derivative(add(s, k1, dt / 2));
    const State k3 = derivative(add(s, k2, dt / 2));
    const State k4 = derivative(add(s, k3, dt));
    State next;
    for (int i = 0; i < 3; ++i) next[i] = s[i] + dt / 6 * (k1[i] + 2 * k2[i] + 2 * k3[i] + k4[i]);
    return next;
  }
};

// Network inputs and targets are the state scaled to roughly [-1, 1] (z is centred on the
// attractor's middle), so one MSE weighs the three coordinates alike.
inline std::array<float, 3> normalise(const State& s) {
  return {static_cast<float>(s[0] / 20.0), static_cast<float>(s[1] / 20.0), static_cast<float>((s[2] - 25.0) / 20.0)};
}

// One trajectory on the attractor: a seeded random start, a burn-in that lands it on the
// attractor, then `horizon` steps between an input and its target.
class Trajectory {
 public:
  Trajectory(std::uint64_t seed, int horizon) : horizon_(horizon) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> start(-10.0, 10.0);
    state_ = {start(rng), start(rng), 25.0 + start(rng)};
    for (int i = 0; i < 1000; ++i) state_ = model_.step(state_);
    for (int i = 0; i < horizon_; ++i) ahead_.push_back(i == 0 ? model_.step(state_) : model_.step(ahead_.back()));
  }
  // The next (input, target) sample; the trajectory advances one integration step.
  void next(std::array<float, 3>* input, std::array<float, 3>* target) {
    *input = normalise(state_);
    *target = normalise(ahead_.back());
    state_ = ahead_.front();
    ahead_.erase(ahead_.begin());
    ahead_.push_back(model_.step(ahead_.back()));
  }

 private:
  Lorenz63 model_;
  int horizon_;
  State state_{};
  std::vector<State> ahead_;  // the next `horizon` states, oldest first
};

// Seeds: the training stream, the inference requests and the validation set come from
// different trajectories of the same seeded run, so neither the server nor the validation loss
// is scored on states the trainer saw.
inline std::uint64_t training_seed(std::uint64_t seed) { return seed * 2 + 1; }
inline std::uint64_t request_seed(std::uint64_t seed) { return seed * 2 + 2; }
// The trainer's held-out samples for its validation loss: a third trajectory.
inline std::uint64_t validation_seed(std::uint64_t seed) { return seed * 2 + 1000003; }

}  // namespace sim_coupled
