// The daemon's parts wired together: one ModelService per configured model, the attach server
// clients use, and (re)configuration.
//
// Threads: the main thread constructs, reloads and destroys the Daemon; Consumers' service
// threads report installs; the attach server's thread looks models up. `models_` is the one
// structure they share (guarded by `mutex_`).
#pragma once

#include <map>
#include <memory>
#include <mutex>

#include "daemon/attach/attach_server.h"
#include "daemon/config.h"
#include "daemon/model_service.h"

namespace modelcastd {

class Daemon {
 public:
  // Starts every model and listens for clients. Throws modelcast::Error if the socket cannot be
  // had or a model cannot start (bad key file, no memory).
  explicit Daemon(DaemonConfig config);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Applies a re-read config: models added are started, removed ones stopped, changed ones
  // restarted; unchanged ones keep serving. Settings that need a restart (socket, HTTP listen
  // address, repository) are kept and a warning logged. A model that fails to start is logged
  // and skipped; the others are applied. Main thread only.
  void reload(DaemonConfig config);

  ServedPtr served(const std::string& model, bool& exists) const;  // any thread

 private:
  void start_model(const ModelConfig& model);  // main thread
  void on_installed(const ServedPtr& version);  // a Consumer's service thread

  DaemonConfig config_;  // main thread
  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<ModelService>> models_;  // guarded by mutex_
  std::unique_ptr<attach::AttachServer> attach_;
};

}  // namespace modelcastd
