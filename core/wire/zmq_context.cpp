#include "core/wire/zmq_context.h"

#include <cerrno>

#include "common/free_descriptors.h"
#include "common/library_thread.h"
#include "modelcast/error.h"

namespace modelcast::wire {
namespace {

// A context of its own holds one descriptor (its termination mailbox): without it libzmq's
// zmq_ctx_new fails, and cppzmq throws zmq::error_t, not an error of ours.
zmq::context_t make_context(const std::string& owner) {
  try {
    return zmq::context_t();
  } catch (const zmq::error_t& e) {
    if (e.num() != EMFILE && e.num() != ENFILE) throw;
    check_descriptors_free(1, "the " + owner + "'s ZeroMQ");
    throw Error(ErrorCode::kResource, "cannot start the " + owner + "'s ZeroMQ: " + e.what());
  }
}

}  // namespace

zmq::context_t new_context(const std::string& owner) {
  zmq::context_t context = make_context(owner);
  int io_threads = zmq_ctx_get(context.handle(), ZMQ_IO_THREADS);
  if (io_threads < 1) io_threads = 1;
  check_threads_can_start(static_cast<std::size_t>(io_threads) + 1, owner + "'s ZeroMQ");  // and the reaper
  // The reaper's and each I/O thread's epoll and mailbox, and the first socket's own mailbox.
  check_descriptors_free(2 * (io_threads + 1) + 1, "the " + owner + "'s ZeroMQ");
  return context;
}

}  // namespace modelcast::wire
