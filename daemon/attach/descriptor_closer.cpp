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

namespace {

// Reads what is still queued in the connection `fd` (its reading shut down) and hands each
// descriptor a message carried to `close_fd`.
template <typename CloseFd>
void drain(int fd, CloseFd close_fd) {
  std::vector<char> message;
  std::vector<int> fds;
  for (;;) {
    const bool received = receive_request(fd, message, fds);
    const int why = errno;
    const bool carried = !fds.empty();
    for (int sent : fds) close_fd(sent);
    // An oversized message (EMSGSIZE) was taken all the same, and so was an empty one that
    // carried descriptors (recvmsg returns 0 for it, as at the end): more may follow either.
    if (received || why == EMSGSIZE || (why == ECONNRESET && carried)) continue;
    break;
  }
}

}  // namespace

struct DescriptorCloser::Queue {
  struct Item {
    int fd;
    bool connection;  // drained, then closed
  };
  std::mutex mutex;
  std::condition_variable wake;
  std::deque<Item> items;  // mutex
  bool stop = false;       // mutex
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
      queue->wake.wait(lock, [&] { return queue->stop || !queue->items.empty(); });
      if (queue->items.empty()) return;  // stopped, and nothing left
      const auto item = queue->items.front();
      queue->items.pop_front();
      lock.unlock();
      if (item.connection) drain(item.fd, [](int sent) { ::close(sent); });
      ::close(item.fd);
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

bool DescriptorCloser::enqueue(int fd, bool connection) {
  std::lock_guard lock(queue_->mutex);
  if (queue_->items.size() >= queue_->max_pending) return false;
  queue_->items.push_back({fd, connection});
  queue_->wake.notify_one();
  return true;
}

void DescriptorCloser::close_later(int fd) {
  if (fd < 0) return;
  if (!enqueue(fd, false)) ::close(fd);
}

void DescriptorCloser::close_connection(int fd) {
  if (fd < 0) return;
  // Shut down, the client sees its end at once and can queue nothing more (its sends fail with
  // EPIPE), and what it queued before stays readable: the closing thread reads it, closing what
  // it carried, then closes the connection. One place in the queue per connection, however many
  // descriptors its messages carry.
  ::shutdown(fd, SHUT_RDWR);
  if (enqueue(fd, true)) return;
  drain(fd, [this](int sent) { close_later(sent); });
  ::close(fd);
}

}  // namespace modelcastd::attach
