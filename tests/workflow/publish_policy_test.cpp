// The workflow's publish policies (examples/sim_coupled/publish_policy.h) on evaluations a
// diverged model gives.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "publish_policy.h"

namespace {

// The online scheduler refuses a loss that is not finite, and the exception stopped the trainer
// (every other policy trained on). The policy leaves such an evaluation out, counts it, and goes
// on deciding on the points it has.
TEST(PublishPolicy, AnEvaluationWithANonFiniteLossIsLeftOutAndTheOnlinePolicyGoesOn) {
  sim_coupled::PolicySettings settings;
  settings.kind = sim_coupled::PolicyKind::kOnline;
  settings.total_steps = 2000;
  settings.eval_every = 10;
  settings.warmup_step = 400;
  settings.window_s = 100.0;
  sim_coupled::PublishPolicy policy(settings);
  auto loss_at = [](std::int64_t step) { return 1.0 / std::sqrt(1.0 + static_cast<double>(step)); };
  for (std::int64_t step = 0; step <= settings.warmup_step; step += settings.eval_every) {
    policy.observe(step, loss_at(step), 0.01 * static_cast<double>(step));
  }
  policy.start_serving(0.01, 0.01);
  std::size_t publishes = 0;
  for (std::int64_t step = settings.warmup_step + 10; step <= settings.total_steps; step += settings.eval_every) {
    const bool diverged = step == 600 || step == 1200;
    const double loss = diverged ? std::numeric_limits<double>::quiet_NaN() : loss_at(step);
    ASSERT_NO_THROW(policy.observe(step, loss, 0.01 * static_cast<double>(step))) << "step " << step;
    bool publish = false;
    ASSERT_NO_THROW(publish = policy.should_publish(step, true)) << "step " << step;
    if (diverged) {
      EXPECT_FALSE(publish) << "a decision on an evaluation left out, at step " << step;
    }
    publishes += publish ? 1 : 0;
  }
  EXPECT_EQ(policy.nonfinite_evaluations(), 2u);
  EXPECT_GT(policy.online_stats().fits, 0u);
  (void)publishes;  // how many is the scheduler's to say; deciding on is the point
}

}  // namespace
