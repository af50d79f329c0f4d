// A callback of the user's, run on a thread of modelcast's (a service thread, the persister's
// writer): what it throws is logged and dropped, neither taken for a peer's fault nor let out of
// the thread, where it would end the process (the trainer's, or the inference server's).
#pragma once

#include <cxxabi.h>

#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include <spdlog/spdlog.h>

#include "modelcast/error.h"

namespace modelcast {

// The name of the user's callback this thread is in (nullptr outside one). A wait made there
// (wait_for_version in on_update, wait_for_consumers in on_delivery) may wait for the very
// thread that runs it: it never ended, and the destructor joining that thread hung with it. A
// wait on another object may too (a producer's on_delivery waiting for a consumer that only
// this producer's thread feeds), so no callback blocks in a wait; one already satisfied answers.
inline thread_local const char* running_callback = nullptr;

// Whether this thread runs a callback of the user's: a wait must then only poll.
inline bool in_callback() { return running_callback != nullptr; }

// Throws Error(kState) naming `wait` and the callback: a wait from a callback that would block.
[[noreturn]] inline void refuse_blocking_wait_in_callback(const char* wait) {
  throw Error(ErrorCode::kState, std::string(wait) + " called from " + running_callback +
                                     " would block, on a thread of modelcast's that what it waits for may need "
                                     "(this object's own, or one that feeds it); wait on a thread of your own");
}

// `serial`, when given, is shared by callbacks that must never run at the same time (one
// consumer's, whose producer ranks each report from their own thread); `said` begins the lines
// logged ("model 'm': "). An empty callback stays empty, so callers still test it before
// building an argument.
template <typename... Args>
std::function<void(Args...)> contained(std::function<void(Args...)> callback, std::string name,
                                       std::shared_ptr<spdlog::logger> log,
                                       std::shared_ptr<std::mutex> serial = nullptr, std::string said = {}) {
  if (!callback) return callback;
  return [callback = std::move(callback), name = std::move(name), log = std::move(log), serial = std::move(serial),
          said = std::move(said)](Args... args) {
    std::unique_lock<std::mutex> one_at_a_time;
    if (serial) one_at_a_time = std::unique_lock(*serial);
    struct Running {  // restored however the callback ends
      const char* before = running_callback;
      explicit Running(const char* now) { running_callback = now; }
      ~Running() { running_callback = before; }
    } running(name.c_str());
    try {
      callback(std::forward<Args>(args)...);
    } catch (abi::__forced_unwind&) {
      // The thread is ending (pthread_exit or cancellation in the callback; Python ends threads
      // that run into its finalization so): the unwind must go on, or the runtime terminates.
      throw;
    } catch (const std::exception& e) {
      log->error("{}{} threw: {}; ignored", said, name, e.what());
    } catch (...) {
      log->error("{}{} threw something that is not a std::exception; ignored", said, name);
    }
  };
}

}  // namespace modelcast
