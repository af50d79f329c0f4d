// Waiting, bounded, for a condition on state that another thread or process changes.
#pragma once

#include <chrono>
#include <thread>

namespace testing_support {

// True as soon as `condition()` holds, false if it still does not after `limit`. Looks again
// after each yield: it waits on the condition itself, never on the passing of time.
template <typename F>
bool eventually(F condition, std::chrono::steady_clock::duration limit = std::chrono::seconds(20)) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::yield();
  }
  return condition();
}

}  // namespace testing_support
