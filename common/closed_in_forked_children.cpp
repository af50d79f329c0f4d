#include "common/closed_in_forked_children.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>

namespace modelcast {
namespace {

// Slots of atomics, not a container: the child's handler may do only what a signal handler may
// (no allocation, no locks), and a registration may come from any thread.
constexpr std::size_t kSlots = 256;
std::atomic<int> held[kSlots];

void close_held_in_child() {
  for (auto& slot : held) {
    const int fd = slot.exchange(-1);
    if (fd >= 0) close(fd);  // the parent's own descriptor keeps the open file
  }
}

bool registered() {
  static const bool done = [] {
    for (auto& slot : held) slot.store(-1);
    return pthread_atfork(nullptr, nullptr, close_held_in_child) == 0;
  }();
  return done;
}

}  // namespace

void close_in_forked_children(int fd) {
  if (fd < 0 || !registered()) return;
  for (auto& slot : held) {
    int empty = -1;
    if (slot.compare_exchange_strong(empty, fd)) return;
  }
}

void forget_in_forked_children(int fd) {
  if (fd < 0 || !registered()) return;
  for (auto& slot : held) {
    int expected = fd;
    if (slot.compare_exchange_strong(expected, -1)) return;
  }
}

}  // namespace modelcast
