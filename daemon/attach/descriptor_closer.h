// Closes descriptors off the attach server's thread. A client can send descriptors (SCM_RIGHTS)
// the daemon never asked for, and the last close of one runs whatever its file does on close,
// in the thread that closes it: a TCP socket with unsent data and SO_LINGER set held the attach
// thread for the linger time (every reader stalled, and SIGTERM waited), a file on a FUSE mount
// can hold it until its server answers. So the attach server hands every descriptor a client
// sent here. Nothing about the file is changed (a socket's SO_LINGER belongs to the socket, which
// the client may still hold and use). A connection is shut down by the attach thread and the
// connection itself handed here (close_connection): this thread reads what is still queued in
// it, closes each descriptor its messages carried, and then the connection.
//
// Threads: close_later() and close_connection() from any thread; one closing thread of its own, detached at
// destruction, so a close that never returns holds neither the attach thread nor shutdown. Past
// max_pending waiting descriptors and connections (a closing thread held for good, and clients
// sending more), close_later and close_connection close on the caller's thread: without
// SO_PASSRIGHTS (Linux 6.16) a descriptor sent cannot be refused, only closed somewhere. A
// connection takes one place, however many descriptors its messages carry.
#pragma once

#include <cstddef>
#include <memory>

namespace modelcastd::attach {

class DescriptorCloser {
 public:
  // At most `max_pending` descriptors wait (0: an eighth of the open-file limit, at most 4096);
  // past that, close_later closes on the caller's thread (a closing thread held for good would
  // otherwise gather descriptors until the daemon had none left).
  explicit DescriptorCloser(std::size_t max_pending = 0);
  ~DescriptorCloser();  // what is queued is still closed, by the thread; does not wait for it
  DescriptorCloser(const DescriptorCloser&) = delete;
  DescriptorCloser& operator=(const DescriptorCloser&) = delete;

  // Takes `fd` (owned from here) and closes it soon. Never blocks but past max_pending.
  // Thread-safe.
  void close_later(int fd);
  // Ends the connection `fd` (a SOCK_SEQPACKET socket, owned from here): shuts it down (the
  // client sees its end at once) and queues it, to be read to its end (each descriptor that
  // messages carry closed) and closed. Never blocks but past max_pending.
  void close_connection(int fd);

 private:
  bool enqueue(int fd, bool connection);  // false where max_pending wait already

  struct Queue;
  std::shared_ptr<Queue> queue_;  // shared with the thread, which may outlive this object
};

}  // namespace modelcastd::attach
