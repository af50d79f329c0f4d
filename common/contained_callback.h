// A callback of the user's, run on a thread of modelcast's (a service thread, the persister's
// writer): what it throws is logged and dropped, neither taken for a peer's fault nor let out of
// the thread, where it would end the process (the trainer's, or the inference server's).
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include <spdlog/spdlog.h>

namespace modelcast {

// `serial`, when given, is shared by callbacks that must never run at the same time (one
// consumer's, whose producer ranks each report from their own thread). An empty callback stays
// empty, so callers still test it before building an argument.
template <typename... Args>
std::function<void(Args...)> contained(std::function<void(Args...)> callback, std::string name,
                                       std::shared_ptr<spdlog::logger> log,
                                       std::shared_ptr<std::mutex> serial = nullptr) {
  if (!callback) return callback;
  return [callback = std::move(callback), name = std::move(name), log = std::move(log),
          serial = std::move(serial)](Args... args) {
    std::unique_lock<std::mutex> one_at_a_time;
    if (serial) one_at_a_time = std::unique_lock(*serial);
    try {
      callback(std::forward<Args>(args)...);
    } catch (const std::exception& e) {
      log->error("{} threw: {}; ignored", name, e.what());
    } catch (...) {
      log->error("{} threw something that is not a std::exception; ignored", name);
    }
  };
}

}  // namespace modelcast
