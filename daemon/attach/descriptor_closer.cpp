#include "daemon/attach/descriptor_closer.h"

#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "daemon/attach/seqpacket.h"

namespace modelcastd::attach {

struct DescriptorCloser::Queue {
  std::mutex mutex;
  std::condition_variable wake;
  std::deque<int> fds;  // mutex
  bool stop = false;    // mutex
  std::size_t max_pending = 0;
};

DescriptorCloser::DescriptorCloser(std::size_t max_pending) : queue_(std::make_shared<Queue>()) {
  if (max_pending == 0) {
    rlimit limit{};
    const rlim_t open_files = getrlimit(RLIMIT_NOFILE, &limit) == 0 ? limit.rlim_cur : 1024;
    max_pending = static_cast<std::size_t>(std::clamp<rlim_t>(open_files / 8, 16, 4096));
  }
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

void DescriptorCloser::close_connection(int fd) {
  if (fd < 0) return;
  // Reading shut down, the client can queue nothing more (its sends fail with EPIPE), and what
  // it queued before stays readable.
  ::shutdown(fd, SHUT_RD);
  std::vector<char> message;
  std::vector<int> fds;
  for (;;) {
    const bool received = receive_request(fd, message, fds);
    const int why = errno;
    const bool carried = !fds.empty();
    for (int sent : fds) close_later(sent);
    // An oversized message (EMSGSIZE) was taken all the same, and so was an empty one that
    // carried descriptors (recvmsg returns 0 for it, as at the end): more may follow either.
    if (received || why == EMSGSIZE || (why == ECONNRESET && carried)) continue;
    break;
  }
  // An empty message without descriptors reads as the end too, and what may follow it is
  // released with the connection: the client is told it ends now, and the descriptor itself is
  // closed off this thread.
  ::shutdown(fd, SHUT_RDWR);
  close_later(fd);
}

}  // namespace modelcastd::attach
