// Closes descriptors off the attach server's thread. A client can send descriptors (SCM_RIGHTS)
// the daemon never asked for, and the last close of one runs whatever its file does on close,
// in the thread that closes it: a TCP socket with unsent data and SO_LINGER set held the attach
// thread for the linger time (every reader stalled, and SIGTERM waited), a file on a FUSE mount
// can hold it until its server answers. A connection's own close counts too: the descriptors
// still queued in it are released then. So the attach server hands every such close here.
//
// Threads: close_later() from any thread; one closing thread of its own, detached at
// destruction, so a close that never returns holds neither the attach thread nor shutdown.
#pragma once

#include <cstddef>
#include <memory>

namespace modelcastd::attach {

class DescriptorCloser {
 public:
  // At most `max_pending` descriptors wait; past that, close_later closes on the caller's thread
  // (a closing thread held for good by one descriptor would otherwise gather them without end).
  explicit DescriptorCloser(std::size_t max_pending = 4096);
  ~DescriptorCloser();  // what is queued is still closed, by the thread; does not wait for it
  DescriptorCloser(const DescriptorCloser&) = delete;
  DescriptorCloser& operator=(const DescriptorCloser&) = delete;

  // Takes `fd` (owned from here) and closes it soon; a socket is reset rather than left to
  // linger. Never blocks but past max_pending. Thread-safe.
  void close_later(int fd);

 private:
  struct Queue;
  std::shared_ptr<Queue> queue_;  // shared with the thread, which may outlive this object
};

}  // namespace modelcastd::attach
