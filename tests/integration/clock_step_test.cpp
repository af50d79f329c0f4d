// The wall clock stepped back while a sharded model trains (an NTP correction, a restored VM,
// `date -s`). This binary replaces clock_gettime for itself and the libraries it loads, so that
// CLOCK_REALTIME can be stepped here and nowhere else: a test binary of its own.
#include <dlfcn.h>
#include <time.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>

#include "eventually.h"
#include "ranked_model.h"
#include "modelcast/consumer.h"

namespace {

std::atomic<std::int64_t> realtime_offset_ns{0};

}  // namespace

// Found by the dynamic linker before libc's (the executable exports it): every CLOCK_REALTIME
// reading, std::chrono::system_clock's included, is moved by realtime_offset_ns.
extern "C" int clock_gettime(clockid_t id, struct timespec* ts) {
  using Real = int (*)(clockid_t, struct timespec*);
  static const Real real = reinterpret_cast<Real>(dlsym(RTLD_NEXT, "clock_gettime"));
  const int rc = real(id, ts);
  if (rc == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) {
    const std::int64_t ns = ts->tv_sec * 1'000'000'000LL + ts->tv_nsec + realtime_offset_ns.load();
    ts->tv_sec = ns / 1'000'000'000LL;
    ts->tv_nsec = ns % 1'000'000'000LL;
  }
  return rc;
}

namespace {

using namespace std::chrono_literals;

bool reaches(modelcast::Consumer& consumer, std::int64_t step) {
  return testing_support::eventually([&] {
    auto v = consumer.acquire();
    return v && v.step() == step;
  }, 60s);
}

// A rank's pieces carry their publish time and every rank's start, and a piece published before
// another rank started is of another run. Stamped from CLOCK_REALTIME, the pieces published after
// the clock went back an hour were all taken for an older run's: consumers stayed on the last
// step for the hour the clock took to catch up.
TEST(ClockStep, AWallClockSteppedBackStopsNoShardedModel) {
  rankedmodel::Ranks ranks(2, false, "tcp://127.0.0.1:0", 0, "job-1");
  modelcast::Consumer consumer(rankedmodel::options_for(ranks.endpoint()));
  ranks.publish(1);
  ASSERT_TRUE(reaches(consumer, 1)) << consumer.stats().last_error;
  realtime_offset_ns = -3600LL * 1'000'000'000LL;
  ranks.publish(2);
  EXPECT_TRUE(reaches(consumer, 2)) << consumer.stats().last_error;
  EXPECT_EQ(rankedmodel::check(consumer.acquire(), 2, [](const rankedmodel::Global&) { return std::nullopt; }), "");
}

}  // namespace
