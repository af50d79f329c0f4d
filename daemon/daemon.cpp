#include "daemon/daemon.h"

#include <spdlog/spdlog.h>

#include "modelcast/error.h"

namespace modelcastd {

Daemon::Daemon(DaemonConfig config) : config_(std::move(config)) {
  attach_ = std::make_unique<attach::AttachServer>(
      config_.socket_path, [this](const std::string& model, bool& exists) { return served(model, exists); });
  for (const auto& model : config_.models) start_model(model);
  spdlog::get("modelcastd")->info("serving {} model(s); clients attach at {}", config_.models.size(), config_.socket_path);
}

Daemon::~Daemon() {
  attach_.reset();  // no more lookups
  std::lock_guard lock(mutex_);
  models_.clear();
}

void Daemon::start_model(const ModelConfig& model) {
  auto log = spdlog::get("modelcastd");
  ModelCallbacks callbacks;
  callbacks.on_installed = [this](const ServedPtr& version) { on_installed(version); };
  callbacks.on_rejected = [log](const std::string& name, const modelcast::Error& error) {
    log->warn("model {}: {}", name, error.what());
  };
  try {
    auto service = std::make_shared<ModelService>(model, std::move(callbacks));
    std::lock_guard lock(mutex_);
    models_[model.name] = std::move(service);
    log->info("model {}: subscribed to {} ({} buffers of {} bytes)", model.name, model.endpoint, model.buffers,
              model.max_model_bytes);
  } catch (const modelcast::Error& e) {
    log->error("model {} ({}): not started: {}", model.name, model.source, e.what());
  }
}

void Daemon::on_installed(const ServedPtr& version) {
  spdlog::get("modelcastd")->info("model {}: installed version {} step {} ({} tensors)", version->model, version->manifest.version,
                                  version->manifest.step, version->manifest.tensors.size());
  attach_->notify();
}

ServedPtr Daemon::served(const std::string& model, bool& exists) const {
  std::shared_ptr<ModelService> service;
  {
    std::lock_guard lock(mutex_);
    auto it = models_.find(model);
    exists = it != models_.end();
    if (!exists) return nullptr;
    service = it->second;
  }
  return service->current();
}

void Daemon::reload(DaemonConfig config) {
  auto log = spdlog::get("modelcastd");
  if (config.socket_path != config_.socket_path || config.http_listen != config_.http_listen ||
      config.repository != config_.repository || config.keep_versions != config_.keep_versions) {
    log->warn("reload: [daemon] socket, [http] and [repository] changes take effect at the next restart");
  }
  std::map<std::string, const ModelConfig*> wanted;
  for (const auto& m : config.models) wanted[m.name] = &m;
  std::vector<std::shared_ptr<ModelService>> stopping;
  {
    std::lock_guard lock(mutex_);
    for (auto it = models_.begin(); it != models_.end();) {
      auto w = wanted.find(it->first);
      if (w == wanted.end() || !(*w->second == it->second->config())) {
        log->info("reload: model {} {}", it->first, w == wanted.end() ? "removed" : "changed; restarting it");
        stopping.push_back(std::move(it->second));
        it = models_.erase(it);
      } else {
        ++it;
      }
    }
  }
  stopping.clear();  // Consumers stop outside the lock; clients' holds keep their versions
  for (const auto& m : config.models) {
    bool running;
    {
      std::lock_guard lock(mutex_);
      running = models_.contains(m.name);
    }
    if (!running) start_model(m);
  }
  attach_->notify();  // waiters on removed models get their answer
  auto keep = std::move(config_);
  config_ = std::move(config);
  config_.socket_path = keep.socket_path;
  config_.http_listen = keep.http_listen;
  config_.repository = keep.repository;
  config_.keep_versions = keep.keep_versions;
}

}  // namespace modelcastd
