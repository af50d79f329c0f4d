// Descriptors a forked child closes as it starts. A child forked from a trainer (a DataLoader
// worker, a helper process) shares every open file of its parent and may outlive what owns it:
// a repository lock's open file kept the persist directory locked after the producer let it go,
// and a listening socket kept the control endpoint's port, so a producer made again on it could
// not bind while the child lived, and consumers connecting meanwhile waited in the child's
// accept queue instead of being refused.
#pragma once

namespace modelcast {

// Has every child this process forks from now on close `fd` (pthread_atfork). Call
// forget_in_forked_children(fd) before closing it: a child forked after the close would close
// whatever reuses the number. Thread-safe; never throws. At most 256 descriptors are held this
// way; past that a descriptor stays open in children, as it would without this.
void close_in_forked_children(int fd);

// Undoes close_in_forked_children(fd) (once, for one call of it). Thread-safe; never throws.
void forget_in_forked_children(int fd);

// close_in_forked_children(fd) for as long as it lives: destroy it before closing `fd`.
class ClosedInForkedChildren {
 public:
  explicit ClosedInForkedChildren(int fd) : fd_(fd) { close_in_forked_children(fd); }
  ~ClosedInForkedChildren() { forget_in_forked_children(fd_); }
  ClosedInForkedChildren(const ClosedInForkedChildren&) = delete;
  ClosedInForkedChildren& operator=(const ClosedInForkedChildren&) = delete;

 private:
  int fd_;
};

}  // namespace modelcast
