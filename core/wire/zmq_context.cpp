#include "core/wire/zmq_context.h"

#include "common/free_descriptors.h"
#include "common/library_thread.h"

namespace modelcast::wire {

zmq::context_t new_context(const std::string& owner) {
  zmq::context_t context;
  int io_threads = zmq_ctx_get(context.handle(), ZMQ_IO_THREADS);
  if (io_threads < 1) io_threads = 1;
  check_threads_can_start(static_cast<std::size_t>(io_threads) + 1, owner + "'s ZeroMQ");  // and the reaper
  // The reaper's and each I/O thread's epoll and mailbox, and the first socket's own mailbox.
  check_descriptors_free(2 * (io_threads + 1) + 1, "the " + owner + "'s ZeroMQ");
  return context;
}

}  // namespace modelcast::wire
