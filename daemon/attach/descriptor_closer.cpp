#include "daemon/attach/descriptor_closer.h"

#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

namespace modelcastd::attach {
namespace {

// A socket (of any family) closed with SO_LINGER {on, 0} is reset at once, whatever it has
// unsent: its close cannot wait on a peer. Anything else is left as it is.
void without_linger(int fd) {
  int type = 0;
  socklen_t length = sizeof type;
  if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &length) != 0) return;  // not a socket
  const linger reset{1, 0};
  (void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
}

}  // namespace

struct DescriptorCloser::Queue {
  std::mutex mutex;
  std::condition_variable wake;
  std::deque<int> fds;  // mutex
  bool stop = false;    // mutex
  std::size_t max_pending = 0;
};

DescriptorCloser::DescriptorCloser(std::size_t max_pending) : queue_(std::make_shared<Queue>()) {
  queue_->max_pending = max_pending;
  std::thread([queue = queue_] {
    std::unique_lock lock(queue->mutex);
    for (;;) {
      queue->wake.wait(lock, [&] { return queue->stop || !queue->fds.empty(); });
      if (queue->fds.empty()) return;  // stopped, and nothing left
      const int fd = queue->fds.front();
      queue->fds.pop_front();
      lock.unlock();
      ::close(fd);
      lock.lock();
    }
  }).detach();
}

DescriptorCloser::~DescriptorCloser() {
  {
    std::lock_guard lock(queue_->mutex);
    queue_->stop = true;
  }
  queue_->wake.notify_one();
}

void DescriptorCloser::close_later(int fd) {
  if (fd < 0) return;
  without_linger(fd);
  {
    std::lock_guard lock(queue_->mutex);
    if (queue_->fds.size() < queue_->max_pending) {
      queue_->fds.push_back(fd);
      queue_->wake.notify_one();
      return;
    }
  }
  ::close(fd);
}

}  // namespace modelcastd::attach
