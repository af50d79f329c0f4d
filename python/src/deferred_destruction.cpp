#include "deferred_destruction.h"

#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <thread>

#include <pthread.h>

namespace modelcast::python {
namespace {

// Process-wide: how many destroy_later threads have not finished. Guarded by pending_mutex().
std::mutex& pending_mutex() {
  static std::mutex m;
  return m;
}
std::condition_variable& pending_done() {
  static std::condition_variable cv;
  return cv;
}
std::size_t pending = 0;

}  // namespace

// A child made by fork() has none of the parent's destroy_later threads: it would wait for them
// at its exit for ever. The count is taken consistent across the fork (held in prepare) and is
// 0 in the child (what those threads destroy there is the parent's, left as it is).
void count_nothing_pending_in_forked_children() {
  static std::once_flag registered;
  std::call_once(registered, [] {
    pthread_atfork([] { pending_mutex().lock(); }, [] { pending_mutex().unlock(); },
                   [] {
                     pending = 0;
                     pending_mutex().unlock();
                   });
  });
}

void destroy_later(std::function<void()> destroy) {
  count_nothing_pending_in_forked_children();
  {
    std::lock_guard lock(pending_mutex());
    ++pending;
  }
  // Detached: the thread that dropped the reference (a library thread inside a callback) must
  // not wait for it; wait_for_later_destructions does, at exit.
  std::thread([destroy = std::move(destroy)] {
    destroy();
    std::lock_guard lock(pending_mutex());
    if (--pending == 0) pending_done().notify_all();
  }).detach();
}

void wait_for_later_destructions() {
  std::unique_lock lock(pending_mutex());
  pending_done().wait(lock, [] { return pending == 0; });
}

}  // namespace modelcast::python
