#include "daemon/daemon.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/log_rate.h"
#include "common/shown_text.h"
#include "core/repository/repository.h"
#include "daemon/recovery.h"
#include "modelcast/error.h"

namespace modelcastd {

namespace repo = modelcast::repository;

namespace {

// The repository writer's input: a served version's bytes, pinned by holding the version.
std::shared_ptr<const repo::VersionSnapshot> snapshot_of(const ServedPtr& served) {
  auto s = std::make_shared<repo::VersionSnapshot>();
  s->model = served->model;
  s->version = served->manifest.version;
  s->step = served->manifest.step;
  s->incarnation = served->manifest.incarnation;
  s->metadata = served->manifest.metadata;
  for (const auto& t : served->manifest.tensors) s->tensors.push_back({t.name, t.dtype, t.shape, served->data(t), t.bytes});
  s->keepalive = served;
  return s;
}

}  // namespace

Daemon::Daemon(DaemonConfig config) : config_(std::move(config)) {
  auto log = spdlog::get("modelcastd");
  // A hook that fails at every version (a Triton that is down for hours) is logged at most once
  // per 10 s; the metrics count every run.
  hooks_ = std::make_unique<HookRunner>([this, log, repeats = std::make_shared<modelcast::RepeatedLines>()](
                                            const HookCall& call, bool ok, const std::string& detail) {
    metrics_.hook_ran(call.model, ok);
    if (ok) {
      log->info("model {}: hook for version {}: {}", call.model, call.version, detail);
    } else if (const std::string line = "hook for version " + std::to_string(call.version) + " failed: " + detail;
               auto note = repeats->admit(call.model, line)) {
      log->error("model {}: {}{}", call.model, line, *note);
    }
  });
  if (!config_.repository.empty()) {
    repo::WriterOptions options;
    options.root = config_.repository;
    options.keep = config_.keep_versions;
    options.abandon_on_stop = true;
    options.make_room_when_full = true;  // the newest version on disk is what a restart serves
    options.on_written = [this](const repo::VersionSnapshot& s, const std::string& dir, std::chrono::nanoseconds took) {
      on_written(s, dir, took);
    };
    // A steady condition (a full or read-only disk, a keep whose versions do not fit) is said
    // for every version, up to 20 a second: logged at most once per 10 s (the metrics count
    // every failure).
    auto repeats = std::make_shared<modelcast::RepeatedLines>();
    options.on_failed = [this, log, repeats](const repo::VersionSnapshot& s, const std::string& error) {
      metrics_.repository_failed(s.model);
      const std::string line = "repository write of version " + std::to_string(s.version) +
                               " failed (delivery continues): " + error;
      if (auto note = repeats->admit(s.model, line)) log->error("model {}: {}{}", s.model, line, *note);
    };
    // A reload that dropped a model with a version on its way: as configured, nothing wrong.
    options.on_dropped = [log](const repo::VersionSnapshot& s, const std::string& why) {
      log->debug("model {}: version {} not written to the repository: {}", s.model, s.version, why);
    };
    options.on_prune_failed = [log, repeats](const repo::VersionSnapshot& s, const std::string& error) {
      const std::string line = "version " + std::to_string(s.version) +
                               " written, but older versions past repository.keep stay: " + error;
      if (auto note = repeats->admit(s.model, line)) log->warn("model {}: {}{}", s.model, line, *note);
    };
    options.on_notice = [log, repeats](const std::string& model, const std::string& notice) {
      if (auto note = repeats->admit(model, notice)) log->warn("model {}: {}{}", model, notice, *note);
    };
    // hooks_ outlives the writer (made first, and the destructor ends the writer first).
    options.in_use = [this](const std::string& directory) { return hooks_->uses(directory); };
    writer_ = std::make_unique<repo::RepositoryWriter>(std::move(options));
  }
  attach_ = std::make_unique<attach::AttachServer>(
      config_.socket_path, [this](const std::string& model, bool& exists) { return served(model, exists); });
  // Once a model runs, a failure (the ops port taken) must stop it before the members go: they
  // go in reverse order, the attach server before the models, whose installs call it.
  try {
    for (const auto& model : config_.models) start_model(model);
    attach_->start();
    if (!config_.http_listen.empty()) {
      http_ = std::make_unique<OpsHttp>(config_.http_listen,
                                        OpsProviders{[this](const std::string& m, std::string& d) { return ready(m, d); },
                                                     [this] { return models_json(); }, [this] { return metrics_text(); },
                                                     [log](const std::string& message) { log->warn("{}", message); }});
      log->info("ops endpoint at http://{}:{}/", config_.http_listen.substr(0, config_.http_listen.rfind(':')), http_->port());
    }
  } catch (...) {
    stop();
    throw;
  }
  std::size_t running = 0;
  {
    std::lock_guard lock(mutex_);
    running = models_.size();
  }
  log->info("serving {} of {} configured model(s); clients attach at {}", running, config_.models.size(),
            config_.socket_path);
}

Daemon::~Daemon() { stop(); }

void Daemon::stop() {
  http_.reset();
  // The Consumers stop first: a version still being installed calls on_installed, which wakes
  // the attach server and feeds the writer and hooks, so those must outlive it (a SIGTERM during
  // a transfer once found the attach server gone). Destroyed outside mutex_, which the attach
  // server's thread takes.
  std::map<std::string, std::shared_ptr<ModelService>> models;
  {
    std::lock_guard lock(mutex_);
    // Until the attach server goes, it answers from what each model served last, as for a model
    // a reload restarts: a stop is not a removal (waiting clients were told "removed from the
    // configuration" and gave up, where a closed connection makes them reconnect to the
    // restarted daemon).
    for (const auto& [name, service] : models_) carried_[name] = service->current();
    models.swap(models_);
  }
  models.clear();  // no more installs
  attach_.reset();
  writer_.reset();  // abandons the write in progress (a large model on a slow disk takes minutes)
  hooks_.reset();
}

namespace {

// Whether a start that failed so may succeed later with nothing changed in the configuration.
bool retryable(const std::exception& e) {
  const auto* error = dynamic_cast<const modelcast::Error*>(&e);
  if (error == nullptr) return true;  // a filesystem or system error: the disk, the descriptors
  switch (error->code()) {
    case modelcast::ErrorCode::kInvalidArgument:
    case modelcast::ErrorCode::kLayoutMismatch:
    case modelcast::ErrorCode::kAuthentication:
      return false;
    default:
      return true;
  }
}

// 1 s after the first failure, doubling to 60 s: a passing shortage is met soon, and one that
// lasts is logged once a minute.
std::chrono::steady_clock::duration retry_delay(int failures_before) {
  return std::chrono::seconds(std::min(60, 1 << std::min(failures_before, 6)));
}

}  // namespace

std::optional<std::chrono::steady_clock::duration> Daemon::until_retry() const {
  std::optional<std::chrono::steady_clock::time_point> next;
  for (const auto& [name, r] : retries_) {
    if (!next || r.at < *next) next = r.at;
  }
  if (!next) return std::nullopt;
  return std::max<std::chrono::steady_clock::duration>(*next - std::chrono::steady_clock::now(), {});
}

void Daemon::retry_due() {
  const auto now = std::chrono::steady_clock::now();
  std::vector<std::string> due;
  for (const auto& [name, r] : retries_) {
    if (r.at <= now) due.push_back(name);
  }
  for (const auto& name : due) {
    const auto model = std::find_if(config_.models.begin(), config_.models.end(),
                                    [&](const ModelConfig& m) { return m.name == name; });
    if (model == config_.models.end()) {
      retries_.erase(name);  // no longer configured
      continue;
    }
    start_model(*model);
  }
}

void Daemon::start_model(const ModelConfig& model) {
  auto log = spdlog::get("modelcastd");
  ModelCallbacks callbacks;
  callbacks.on_installed = [this, model](const ServedPtr& version) { on_installed(model, version); };
  // A version not served for a cause every version has (fp8 scales past what a client takes):
  // once per 10 s, numbers aside (the metric counts each).
  callbacks.on_rejected = [this, log, repeats = std::make_shared<modelcast::RepeatedLines>()](
                              const std::string& name, const modelcast::Error& error) {
    metrics_.rejected(name);
    if (auto note = repeats->admit(name, error.what())) log->warn("model {}: {}{}", name, error.what(), *note);
  };
  // The consumer says an error again at every retry (a producer that serves another model's
  // name: twice a second for good): the same one is logged at most once per 10 s. Called from
  // the consumer's threads (one per producer rank), hence the lock.
  struct Repeats {
    std::mutex mutex;
    modelcast::RepeatRate rate;
  };
  callbacks.on_error = [log, repeats = std::make_shared<Repeats>()](const std::string& name, const modelcast::Error& error) {
    std::optional<std::string> note;
    {
      std::lock_guard lock(repeats->mutex);
      note = repeats->rate.admit(error.what(), modelcast::RepeatRate::Clock::now());
    }
    if (note) log->warn("model {}: {}{}", name, error.what(), *note);
  };
  metrics_.model_added(model.name, writer_ && model.persist, !model.hook.empty());
  try {
    // Only a model that persists writes or reads the repository: one that converts or takes a
    // part (persist = false) would be served a whole, unconverted version from it, and group
    // members sharing a repository would lock each other out.
    bool locked = false;  // the model directory: only then are leftovers of writes in it no one's
    if (writer_ && model.persist) {
      try {
        const auto unlocked = writer_->hold(model.name);
        locked = unlocked.empty();
        if (!locked) log->warn("model {}: {}", model.name, unlocked);
      } catch (const modelcast::Error& e) {
        // A directory no one can make or open (a read-only mount) is served from; each write
        // first takes the lock (the mount may turn writable, and another writer lock it first),
        // and its failure is reported. Another process's lock is a refusal.
        if (e.code() != modelcast::ErrorCode::kResource) throw;
        log->warn("model {}: {} (versions are served; each write locks the directory first, and fails while it "
                  "cannot)", model.name, e.what());
      }
    }
    // Recovered before the Consumer starts: its first install would have the writer prune the
    // versions recovery reads, and a recovered version logged and counted after the producer's
    // had the metrics say the older one was served.
    ServedPtr initial;
    {
      std::lock_guard lock(mutex_);
      if (const auto it = carried_.find(model.name); it != carried_.end()) initial = it->second;
    }
    if (!initial && !config_.repository.empty() && model.persist) {
      initial = recover_newest(config_.repository, model.name, model.max_model_bytes, locked);
    }
    if (initial) {
      metrics_.serving(model.name, initial->manifest.version);
      log->info("model {}: serving version {} from {} until the producer sends a newer one", model.name,
                initial->manifest.version,
                initial->repository_path.empty() ? "before the reload" : initial->repository_path);
    }
    auto service = std::make_shared<ModelService>(model, std::move(callbacks), std::move(initial));
    std::lock_guard lock(mutex_);
    models_[model.name] = std::move(service);
    hooks_by_model_[model.name] = model.hook;
    not_started_.erase(model.name);
    carried_.erase(model.name);
    if (retries_.erase(model.name) > 0) log->info("model {}: started on a retry", model.name);
    log->info("model {}: subscribed to {} ({} buffers of {} bytes)", model.name, model.endpoint, model.buffers,
              model.max_model_bytes);
  } catch (const std::exception& e) {
    // Not only modelcast::Error: a filesystem error the repository did not foresee ended the
    // daemon at start, where one model that cannot start must not stop the others.
    std::string retry;
    if (retryable(e)) {
      auto& r = retries_[model.name];
      const auto delay = retry_delay(r.failures++);
      r.at = std::chrono::steady_clock::now() + delay;
      retry = "; trying again in " + std::to_string(std::chrono::duration_cast<std::chrono::seconds>(delay).count()) +
              " s";
    } else {
      retries_.erase(model.name);
      retry = "; a reload (SIGHUP) tries again";
    }
    std::lock_guard lock(mutex_);
    const auto kept = carried_.find(model.name);
    const bool serving = kept != carried_.end() && kept->second;
    log->error("model {} ({}): not started: {}{}{}", model.name, model.source, e.what(),
               serving ? "; serving version " + std::to_string(kept->second->manifest.version) + " from before the reload"
                       : std::string(),
               retry);
    metrics_.serving(model.name, serving ? kept->second->manifest.version : 0);
    not_started_[model.name] = e.what();
  }
  if (attach_) attach_->notify();
}

void Daemon::on_installed(const ModelConfig& model, const ServedPtr& version) {
  metrics_.installed(model.name, version->update_latency);
  metrics_.serving(model.name, version->manifest.version);
  spdlog::get("modelcastd")->info("model {}: installed version {} step {} ({} tensors, update {:.2f} ms)", model.name,
                                  version->manifest.version, version->manifest.step, version->manifest.tensors.size(),
                                  std::chrono::duration<double, std::milli>(version->update_latency).count());
  attach_->notify();
  if (writer_ && model.persist) {
    writer_->submit(snapshot_of(version));  // the hook runs once it is on disk
  } else if (auto hook = hook_of(model.name); !hook.empty()) {
    hooks_->submit({model.name, version->manifest.version, "", std::move(hook)});
  }
}

void Daemon::on_written(const repo::VersionSnapshot& s, const std::string& directory, std::chrono::nanoseconds took) {
  metrics_.repository_written(s.model, took);
  spdlog::get("modelcastd")->info("model {}: version {} written to {} in {:.1f} ms", s.model, s.version, directory,
                                  std::chrono::duration<double, std::milli>(took).count());
  auto hook = hook_of(s.model);
  if (!hook.empty()) hooks_->submit({s.model, s.version, directory, hook});
}

HookConfig Daemon::hook_of(const std::string& model) const {
  std::lock_guard lock(mutex_);
  auto it = hooks_by_model_.find(model);
  return it == hooks_by_model_.end() ? HookConfig{} : it->second;
}

ServedPtr Daemon::served(const std::string& model, bool& exists) const {
  std::shared_ptr<ModelService> service;
  {
    std::lock_guard lock(mutex_);
    auto it = models_.find(model);
    exists = it != models_.end();
    if (!exists) {
      if (const auto kept = carried_.find(model); kept != carried_.end()) {
        exists = true;
        return kept->second;
      }
      // Configured, and started again on a backoff or at a reload: a client waits for its first
      // version as for any model that has none yet (told "no model is configured", an inference
      // server beside a daemon whose model start failed for a moment gave up on it for good).
      exists = not_started_.count(model) > 0;
      return nullptr;
    }
    service = it->second;
  }
  return service->current();
}

int Daemon::ready(const std::string& model, std::string& detail) const {
  std::lock_guard lock(mutex_);
  if (!model.empty()) {
    auto it = models_.find(model);
    if (it == models_.end()) {
      const auto kept = carried_.find(model);
      const bool serving = kept != carried_.end() && kept->second;
      if (auto failed = not_started_.find(model); failed != not_started_.end()) {
        detail = "model '" + model + "' is configured but did not start: " + failed->second;
        if (!serving) return 503;
        detail += "; serving version " + std::to_string(kept->second->manifest.version) + " from before the reload";
        return 200;
      }
      if (kept != carried_.end()) {
        detail = serving ? "ready (restarting)" : "no version yet (restarting)";
        return serving ? 200 : 503;
      }
      detail = "no model " + modelcast::shown_text(model) + " is configured";
      return 404;
    }
    detail = it->second->current() ? "ready" : "no version yet";
    return it->second->current() ? 200 : 503;
  }
  std::string failed;
  for (const auto& [name, why] : not_started_) failed += (failed.empty() ? "" : ", ") + name;
  if (models_.empty() && carried_.empty()) {
    detail = "no model is running" + (failed.empty() ? std::string() : "; did not start: " + failed);
    return 503;
  }
  std::string serving, waiting;
  for (const auto& [name, service] : models_) {
    std::string& list = service->current() ? serving : waiting;
    list += (list.empty() ? "" : ", ") + name;
  }
  for (const auto& [name, version] : carried_) {
    std::string& list = version ? serving : waiting;
    list += (list.empty() ? "" : ", ") + name;
  }
  detail = serving.empty() ? "no version yet: " + waiting
                           : "serving: " + serving + (waiting.empty() ? "" : "; no version yet: " + waiting);
  if (!failed.empty()) detail += "; did not start: " + failed;
  return serving.empty() ? 503 : 200;
}

std::string Daemon::models_json() const {
  auto holds = attach_->stats().holds_by_model;
  auto now = std::chrono::system_clock::now();
  nlohmann::json out = {{"models", nlohmann::json::array()}};
  std::lock_guard lock(mutex_);
  for (const auto& [name, service] : models_) {
    auto stats = service->consumer_stats();
    nlohmann::json m = {{"name", name},
                        {"endpoint", service->config().endpoint},
                        {"client_holds", holds.contains(name) ? holds[name] : 0},
                        {"versions_installed", stats.versions_installed},
                        {"versions_rejected", stats.versions_rejected},
                        {"bytes_received", stats.bytes_received},
                        {"last_error", stats.last_error},
                        {"producer_connected", stats.producer_connected},
                        {"producer_stopped", stats.producer_stopped},
                        {"serving", nullptr},
                        {"arriving", nullptr},
                        {"waiting_for_buffer", nullptr}};
    // A shaped version that waits while clients hold every copy buffer (its log line says so once).
    if (const auto waiting = service->waiting_for_buffer(); waiting != 0) m["waiting_for_buffer"] = waiting;
    // A large version's progress: which one is landing now and its complete prefix in bytes.
    if (stats.arriving_version != 0) {
      m["arriving"] = {{"version", stats.arriving_version}, {"bytes", stats.arriving_bytes}};
    }
    if (auto current = service->current()) {
      m["serving"] = {{"version", current->manifest.version},
                      {"step", current->manifest.step},
                      {"source", current->manifest.source},
                      {"producer_incarnation", repo::hex64(current->manifest.incarnation)},
                      {"age_seconds", std::chrono::duration<double>(now - current->installed_at).count()},
                      {"update_latency_ms", std::chrono::duration<double, std::milli>(current->update_latency).count()},
                      {"tensors", current->manifest.tensors.size()}};
      if (!current->repository_path.empty()) m["serving"]["repository_path"] = current->repository_path;
    }
    out["models"].push_back(std::move(m));
  }
  // What a model not running serves (carried_): the version from before the reload, or null.
  const auto kept_json = [this](const std::string& name) -> nlohmann::json {
    const auto kept = carried_.find(name);
    if (kept == carried_.end() || !kept->second) return nullptr;
    const auto& manifest = kept->second->manifest;
    return {{"version", manifest.version}, {"step", manifest.step}, {"source", manifest.source}, {"from_before_the_reload", true}};
  };
  // A model between a reload's stop and start, listed as clients see it: still served.
  for (const auto& [name, version] : carried_) {
    if (!not_started_.contains(name)) out["models"].push_back({{"name", name}, {"serving", kept_json(name)}, {"restarting", true}});
  }
  for (const auto& [name, why] : not_started_) {
    out["models"].push_back({{"name", name}, {"serving", kept_json(name)}, {"not_started", why}});
  }
  auto attach = attach_->stats();
  out["clients"] = attach.clients;
  if (writer_) {
    auto w = writer_->stats();
    out["repository"] = {{"path", config_.repository},  {"written", w.written}, {"failed", w.failed},
                         {"skipped", w.skipped},         {"last_error", w.last_error}};
  }
  // Errors carry file names as the file system gave them, which need not be UTF-8: the strict
  // dump threw, and the status was lost to a 500.
  return out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string Daemon::metrics_text() {
  LiveValues live;
  auto attach = attach_->stats();
  live.clients = attach.clients;
  live.holds = attach.holds;
  // Rendered under the lock: a reload that takes a model's Consumer away (then counts its last
  // figures in, consumer_replaced) comes wholly before or after, so no count goes in twice.
  std::lock_guard lock(mutex_);
  for (const auto& [name, service] : models_) {
    auto stats = service->consumer_stats();
    live.bytes_received[name] = stats.bytes_received;
    live.versions_rejected[name] = stats.versions_rejected;
    live.producer_connected[name] = stats.producer_connected;
    live.producer_stopped[name] = stats.producer_stopped;
  }
  return metrics_.render(live);
}

void Daemon::refuse_reload(const std::string& why) {
  metrics_.reload_refused();  // before the log line: whoever reads the line finds it counted
  spdlog::get("modelcastd")->error("reload refused, keeping the running configuration: {}", why);
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
  std::vector<std::string> removed;  // models the new config no longer has
  {
    std::lock_guard lock(mutex_);
    for (auto it = models_.begin(); it != models_.end();) {
      auto w = wanted.find(it->first);
      if (w != wanted.end() && w->second->same_but_hook(it->second->config())) {
        if (hooks_by_model_[it->first] == w->second->hook) {
          ++it;
          continue;
        }
        log->info("reload: model {}: hook changed (the model runs on)", it->first);
        hooks_by_model_[it->first] = w->second->hook;
        // Adds the hook's counters if it is the model's first (Add of existing labels keeps them).
        metrics_.model_added(it->first, writer_ && w->second->persist, !w->second->hook.empty());
        ++it;
      } else {
        log->info("reload: model {} {}", it->first, w == wanted.end() ? "removed" : "changed; restarting it");
        // A changed model's versions still being written get its new hook: between this erase
        // and the restart (or for good, where the restart fails) they found none, and the
        // restarted model's Consumer, sent the same version again, drops it as served, so that
        // version was never hooked at all.
        if (w != wanted.end()) {
          carried_[it->first] = it->second->current();  // in the same step as the erase below
          hooks_by_model_[it->first] = w->second->hook;
        } else {
          removed.push_back(it->first);
          hooks_by_model_.erase(it->first);
        }
        stopping.push_back(std::move(it->second));
        it = models_.erase(it);
      }
    }
  }
  {
    std::lock_guard lock(mutex_);
    std::erase_if(not_started_, [&](const auto& entry) {
      if (wanted.contains(entry.first)) return false;
      removed.push_back(entry.first);
      return true;
    });
    // A reload starts every model not running at once, and each failure from there on starts its
    // backoff again at 1 s (the configuration, or what it needs, may have been fixed).
    retries_.clear();
    for (auto it = carried_.begin(); it != carried_.end();) {
      if (wanted.contains(it->first)) {
        ++it;
      } else {
        removed.push_back(it->first);
        it = carried_.erase(it);
      }
    }
    // A model whose restart failed kept its hook (for its versions still being written): removed
    // now, it has none, as every removed model.
    for (const auto& name : removed) hooks_by_model_.erase(name);
  }
  // Each Consumer's last counts, read as it goes (a version it receives between this read and
  // its end, microseconds later, is not counted).
  for (const auto& service : stopping) {
    const auto stats = service->consumer_stats();
    metrics_.consumer_replaced(service->config().name, stats.bytes_received, stats.versions_rejected);
  }
  stopping.clear();  // Consumers stop outside the lock; clients' holds keep their versions
  // Once their Consumers' last counts are in (consumer_replaced would export them again).
  for (const auto& name : removed) metrics_.model_removed(name);
  // A model removed, or one that no longer persists, lets its directory go (a group member
  // sharing the repository may then take it).
  if (writer_) {
    for (const auto& m : config_.models) {
      const auto w = wanted.find(m.name);
      if (w == wanted.end() || (m.persist && !w->second->persist)) writer_->release(m.name);
    }
  }
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
