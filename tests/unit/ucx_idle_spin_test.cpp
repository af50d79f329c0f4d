// The UCX progress thread's choice between polling and sleeping (transports/ucx/idle_spin.h):
// it polls for a span of time after its last progress, however many idle rounds fit in it (a
// round over TCP is a system call, one over shared memory a few loads), then sleeps.
#include <gtest/gtest.h>

#include "transports/ucx/idle_spin.h"

namespace {

using modelcast::transport::IdleSpin;
using namespace std::chrono_literals;

TEST(IdleSpin, PollsForItsBudgetAfterTheLastProgressThenSleeps) {
  IdleSpin spin(100us);
  const auto t0 = IdleSpin::Clock::now();
  spin.progressed(t0);
  EXPECT_TRUE(spin.keep_polling(t0));
  EXPECT_TRUE(spin.keep_polling(t0 + 99us));
  EXPECT_FALSE(spin.keep_polling(t0 + 100us));
  EXPECT_FALSE(spin.keep_polling(t0 + 5ms));
  // Progress renews the budget from that round on.
  spin.progressed(t0 + 5ms);
  EXPECT_TRUE(spin.keep_polling(t0 + 5ms + 50us));
  EXPECT_FALSE(spin.keep_polling(t0 + 5ms + 100us));
}

TEST(IdleSpin, IdleRoundsDoNotCountOnlyTimeDoes) {
  // A thread that counted idle rounds would sleep after enough of them, at whatever time; and
  // where rounds are system calls it would outlast the gaps of a slow link and never sleep.
  IdleSpin spin(100us);
  const auto t0 = IdleSpin::Clock::now();
  spin.progressed(t0);
  for (int round = 0; round < 1'000'000; ++round) ASSERT_TRUE(spin.keep_polling(t0 + 10us)) << round;
  EXPECT_FALSE(spin.keep_polling(t0 + 1ms));
}

TEST(IdleSpin, ABudgetOfZeroSleepsAtTheFirstIdleRound) {
  IdleSpin spin(0us);
  const auto t0 = IdleSpin::Clock::now();
  spin.progressed(t0);
  EXPECT_FALSE(spin.keep_polling(t0));
}

}  // namespace
