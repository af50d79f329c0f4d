// Tells the inference server that a version is in: an HTTP POST to a URL template or a command,
// with {model}, {version} and {path} replaced. Runs on its own thread, one hook at a time, the
// models in turn; like the repository writer it keeps one pending call per model, so a slow
// server makes it skip to the newest. A hook that hangs holds the others back up to its timeout.
//
// Threads: submit() from any thread; the hook thread runs hooks and `on_result`. The destructor
// (the daemon stopping) ends the hook in progress rather than wait out its timeout, which may be
// an hour: systemd kills a daemon that takes longer than its stop timeout to exit.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "daemon/config.h"

namespace httplib {
class Client;
}

namespace modelcastd {

struct HookCall {
  std::string model;
  std::uint64_t version = 0;
  std::string path;  // the version's repository directory, "" without a repository
  HookConfig hook;
};

// Replaces {model}, {version} and {path} in `text`; `encode` percent-encodes the values (URLs).
std::string expand_placeholders(const std::string& text, const HookCall& call, bool encode);

class HookRunner {
 public:
  using Result = std::function<void(const HookCall&, bool ok, const std::string& detail)>;
  explicit HookRunner(Result on_result);
  // Stops the hook in progress: a command gets SIGTERM (its process group), SIGKILL after
  // kStopGrace; a POST's connection is shut. Pending calls are dropped.
  ~HookRunner();
  static constexpr std::chrono::seconds kStopGrace{2};
  HookRunner(const HookRunner&) = delete;
  HookRunner& operator=(const HookRunner&) = delete;

  void submit(HookCall call);  // never blocks on the hook; thread-safe

 private:
  void run();
  bool run_http(const HookCall& call, std::string& detail);
  bool run_command(const HookCall& call, std::string& detail);

  const Result on_result_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;                       // mutex_
  httplib::Client* active_http_ = nullptr;  // the POST in progress (the hook thread's); mutex_
  const int stop_fd_;  // an eventfd the destructor signals: a running command's wait ends on it
  std::map<std::string, HookCall> pending_;  // by model; mutex_
  std::string last_model_;                   // whose hook ran last; mutex_
  std::thread thread_;
};

}  // namespace modelcastd
