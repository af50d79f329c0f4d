// A user's callback run on a thread of modelcast's: what it throws stays there, and a thread it
// ends (pthread_exit, cancellation, a Python thread meeting the interpreter's finalization)
// unwinds through it, instead of ending the process.
#include <gtest/gtest.h>

#include <pthread.h>

#include <atomic>
#include <cstdlib>
#include <functional>
#include <stdexcept>
#include <string>

#include "common/contained_callback.h"
#include "common/log.h"

namespace {

TEST(ContainedCallback, WhatTheCallbackThrowsIsLoggedAndStaysThere) {
  int calls = 0;
  auto callback = modelcast::contained(std::function<void(int)>([&](int n) {
                                         ++calls;
                                         if (n == 1) throw std::runtime_error("metrics push failed");
                                         throw n;
                                       }),
                                       "on_test", modelcast::log::get("test"));
  EXPECT_NO_THROW(callback(1));
  EXPECT_NO_THROW(callback(2));
  EXPECT_EQ(calls, 2);
}

// The thread's unwind was caught by catch (...), which the runtime answers with std::terminate:
// the process aborted.
TEST(ContainedCallbackDeathTest, ACallbackThatEndsItsThreadEndsOnlyTheThread) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        static std::atomic<bool> after{false};
        static auto callback = modelcast::contained(std::function<void(int)>([](int) { pthread_exit(nullptr); }),
                                                    "on_test", modelcast::log::get("test"));
        pthread_t thread;
        if (pthread_create(&thread, nullptr, [](void*) -> void* {
              callback(1);
              after = true;  // never: the thread ended inside the callback
              return nullptr;
            }, nullptr) != 0) {
          std::exit(2);
        }
        pthread_join(thread, nullptr);
        std::exit(after ? 3 : 0);
      },
      testing::ExitedWithCode(0), "");
}

}  // namespace
