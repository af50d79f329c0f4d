#include "core/wire/zmq_context.h"

#include "common/library_thread.h"

namespace modelcast::wire {

zmq::context_t context_with_threads(const std::string& owner) {
  zmq::context_t context;
  const int io_threads = zmq_ctx_get(context.handle(), ZMQ_IO_THREADS);
  // The I/O threads and the one reaper thread libzmq starts.
  check_threads_can_start(static_cast<std::size_t>(io_threads > 0 ? io_threads : 1) + 1, owner + "'s ZeroMQ");
  return context;
}

}  // namespace modelcast::wire
