// Waiting, bounded, for a child a test made with fork() (not ChildProcess: the child runs the
// test's own code).
#pragma once

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <chrono>

#include "eventually.h"

namespace testing_support {

// Whether the forked `child` ended within `within` (its wait status in `status`); one that did
// not is killed, and reaped, so that no test leaves it behind.
inline bool child_ended(pid_t child, std::chrono::seconds within, int& status) {
  const bool ended = eventually([&] { return waitpid(child, &status, WNOHANG) == child; }, within);
  if (!ended) {
    kill(child, SIGKILL);
    waitpid(child, &status, 0);
  }
  return ended;
}

}  // namespace testing_support
