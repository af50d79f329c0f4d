// The daemon's parts wired together: one ModelService per configured model, the attach server
// clients use, the repository writer, hooks, metrics and the ops endpoint; and reconfiguration.
//
// Threads: the main thread constructs, reloads and destroys the Daemon. Consumers' service
// threads, and each model's copy thread for shaped versions, report installs (on_installed); the writer and hook threads report results; the
// attach server's and HTTP threads read status. `models_` is what they share (`mutex_`).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "daemon/attach/attach_server.h"
#include "daemon/config.h"
#include "daemon/hook_runner.h"
#include "daemon/metrics.h"
#include "daemon/model_service.h"
#include "daemon/ops_http.h"
#include "core/repository/repository_writer.h"

namespace modelcastd {

class Daemon {
 public:
  // Recovers each model's newest stored version (with a repository), starts every model,
  // listens for clients and serves HTTP. Throws modelcast::Error if the socket or the HTTP
  // address cannot be had. A model that cannot start (bad key file, no memory) is logged and
  // skipped.
  explicit Daemon(DaemonConfig config);
  ~Daemon();  // stop()
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Applies a re-read config: models added are started, removed ones stopped, changed ones
  // restarted (serving what they served until their producer delivers), a changed hook alone
  // applied in place; unchanged ones keep serving. Settings that need a restart (socket, HTTP listen
  // address, repository) are kept and a warning logged. Main thread only.
  void reload(DaemonConfig config);
  // A re-read config that could not be used (`why`): logged and counted. Main thread only.
  void refuse_reload(const std::string& why);

  // A model whose start failed for a reason that can pass (short of memory, descriptors or
  // threads; its repository directory locked by another daemon that may be stopping; a transport
  // error) is started again on a backoff, 1 s doubling to 60 s, without a reload; one refused for
  // its configuration (kInvalidArgument, kLayoutMismatch, kAuthentication) waits for a reload.
  // How long until the next of those starts is due (nothing: none is), and the starts that are due
  // now. Main thread only.
  std::optional<std::chrono::steady_clock::duration> until_retry() const;
  void retry_due();

  ServedPtr served(const std::string& model, bool& exists) const;  // any thread
  int http_port() const { return http_ ? http_->port() : 0; }

 private:
  // Stops the models, then the attach server, the writer and the hooks, in that order (a model's
  // install feeds all three). Idempotent; main thread.
  void stop();
  // Locks the model's repository directory, serves what carried_ holds for it (what it served
  // before a reload restarted it) or else the newest stored version, and starts its
  // ModelService; a model that cannot start is logged and listed in not_started_, and goes on
  // serving what carried_ holds. Main thread.
  void start_model(const ModelConfig& model);
  void on_installed(const ModelConfig& model, const ServedPtr& version);  // a Consumer's or copy thread
  void on_written(const modelcast::repository::VersionSnapshot& snapshot, const std::string& directory,
                  std::chrono::nanoseconds took);  // writer thread
  HookConfig hook_of(const std::string& model) const;
  // /readyz: 200 once some model serves a version (a model added later, whose producer is not
  // up yet, does not take the others out of service), 503 before; with `model`, that model's
  // own readiness (404 for a model not configured).
  int ready(const std::string& model, std::string& detail) const;
  std::string models_json() const;
  std::string metrics_text();

  DaemonConfig config_;  // main thread
  Metrics metrics_;
  std::unique_ptr<HookRunner> hooks_;
  std::unique_ptr<modelcast::repository::RepositoryWriter> writer_;  // null without a repository
  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<ModelService>> models_;  // guarded by mutex_
  // Each running model's hook: a reload that changes only a hook changes it here, without
  // restarting the model (whose clients would otherwise be moved to an older version). mutex_.
  std::map<std::string, HookConfig> hooks_by_model_;
  // Configured models that could not start, with why (a reload tries them again); mutex_.
  std::map<std::string, std::string> not_started_;
  // Those of not_started_ started again on a backoff (until_retry), with how many starts failed
  // in a row and when the next is due; main thread.
  struct Retry {
    int failures = 0;
    std::chrono::steady_clock::time_point at;
  };
  std::map<std::string, Retry> retries_;
  // Configured models that are not running, with the version each served (null: none yet): those
  // a reload stopped and has not started again (between the two, or for good when the start
  // failed), and at stop() all of them. served() answers from it: a restart or a stop is not a
  // removal (clients were told "no model is configured" and waiters "removed from the
  // configuration" for the 20-150 ms of a restart). mutex_.
  std::map<std::string, ServedPtr> carried_;
  std::unique_ptr<attach::AttachServer> attach_;
  std::unique_ptr<OpsHttp> http_;
};

}  // namespace modelcastd
