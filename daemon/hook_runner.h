// Tells the inference server that a version is in: an HTTP POST to a URL template or a command,
// with {model}, {version} and {path} replaced. Each model's hooks run on a thread of their own
// (a lane, started at the model's first hook), one at a time, keeping one pending call per model,
// so a slow server makes its model skip to the newest. A hook that hangs holds back only its own
// model's: with one thread for all, it held every other model's hooks up to its timeout.
//
// Threads: submit() from any thread; each lane's thread runs its model's hooks and calls
// `on_result` (so `on_result` is called from several threads at once). A lane lives until the
// runner is destroyed: a model removed by a reload leaves an idle thread. The destructor (the
// daemon stopping) ends the hooks in progress rather than wait out their timeouts, which may be
// an hour: systemd kills a daemon that takes longer than its stop timeout to exit.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "daemon/config.h"

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
  // Stops the hooks in progress: a command gets SIGTERM (its process group), SIGKILL after
  // kStopGrace; a POST's socket is shut down, whether it is connecting or transferring. Pending
  // calls are dropped.
  ~HookRunner();
  static constexpr std::chrono::seconds kStopGrace{2};
  HookRunner(const HookRunner&) = delete;
  HookRunner& operator=(const HookRunner&) = delete;

  // Never blocks on a hook; thread-safe. A lane's thread that cannot be started is reported
  // through `on_result` as a failed hook (on the caller's thread).
  void submit(HookCall call);
  // Whether a hook running or waiting to run was given `directory` as its {path}: the repository
  // writer keeps it past `keep` meanwhile (a hook that loaded or copied it found it pruned
  // mid-way when versions came faster than it ran). Thread-safe.
  bool uses(const std::string& directory) const;

 private:
  struct Lane {
    std::condition_variable wake;
    std::optional<HookCall> pending;  // the newest call not yet started; mutex_
    std::string running_path;         // the {path} of the call in progress ("": none); mutex_
    // The socket of the POST in progress, a duplicate of httplib's descriptor (-1: none): shut
    // down by the stopping daemon or at the call's deadline, it ends a connect or a transfer at
    // once. httplib's own stop() waits for a connect to time out (it holds the lock the connect
    // holds), and its timeouts restart with every byte read. Being a duplicate, it can never name
    // a descriptor that httplib closed and something else opened again. Set by the lane thread
    // (from httplib's socket callback), closed by it after the POST; mutex_.
    int http_socket = -1;
    bool http_cut = false;  // the deadline shut the socket; mutex_
    std::condition_variable* http_watchdog = nullptr;  // wakes the POST's watchdog (stop); mutex_
    std::thread thread;
  };
  // Shuts down the lane's POST socket, if any (mutex_ held).
  static void shut(Lane& lane);
  void run(Lane& lane);
  bool run_http(Lane& lane, const HookCall& call, std::string& detail);
  bool run_command(const HookCall& call, std::string& detail);

  const Result on_result_;
  mutable std::mutex mutex_;
  bool stop_ = false;  // mutex_
  const int stop_fd_;  // an eventfd the destructor signals: every running command's wait ends on it
  std::map<std::string, std::unique_ptr<Lane>> lanes_;  // by model; mutex_
};

}  // namespace modelcastd
