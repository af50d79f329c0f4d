// A thread-safe FIFO whose readiness is an eventfd, so a service thread can wait on it and on
// ZeroMQ sockets in one zmq_poll.
#pragma once

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <utility>

#include "modelcast/error.h"

namespace modelcast {

template <typename Event>
class EventQueue {
 public:
  // Throws Error(kResource) if no event descriptor can be had (the process's limit of open files).
  EventQueue() : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    if (fd_ < 0) {
      throw Error(ErrorCode::kResource,
                  std::string("cannot make the service thread's event descriptor: ") + std::strerror(errno));
    }
  }
  ~EventQueue() { close(fd_); }
  EventQueue(const EventQueue&) = delete;
  EventQueue& operator=(const EventQueue&) = delete;

  // Any thread.
  void push(Event event) {
    {
      std::lock_guard lock(mutex_);
      events_.push_back(std::move(event));
    }
    std::uint64_t one = 1;
    [[maybe_unused]] auto n = write(fd_, &one, sizeof one);
  }

  // The consuming thread: takes everything queued so far and clears readiness.
  std::deque<Event> drain() {
    std::uint64_t count = 0;
    [[maybe_unused]] auto n = read(fd_, &count, sizeof count);
    std::lock_guard lock(mutex_);
    return std::exchange(events_, {});
  }

  int fd() const noexcept { return fd_; }

 private:
  int fd_;
  std::mutex mutex_;
  std::deque<Event> events_;
};

}  // namespace modelcast
