// modelcastd: the sidecar daemon. Receives models from producers into shared memory and serves
// them to local inference processes (see README, "The sidecar daemon").
//
// Threads: main() owns the Daemon and handles signals synchronously (sigwaitinfo), so reloads
// and shutdown never run inside a signal handler. Every other thread starts with the signals
// blocked (they are blocked before the first thread is made). Where the daemon is PID 1 or a
// child subreaper, a ChildReaper thread takes SIGCHLD and waits for the orphans hooks leave.
#include <signal.h>
#include <systemd/sd-daemon.h>

#include <cerrno>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <optional>

#include <CLI/CLI.hpp>
#include <iostream>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "common/parse_command_line.h"
#include "core/wire/socket_directory.h"
#include "daemon/attach/seqpacket.h"
#include "daemon/child_reaper.h"
#include "daemon/config.h"
#include "daemon/recovery.h"
#include "daemon/daemon.h"
#include "daemon/ops_http.h"
#include "common/shown_text.h"
#include "modelcast/error.h"
#include "modelcast/modelcast_runtime.h"

#ifndef MODELCASTD_VERSION
#define MODELCASTD_VERSION "unknown"
#endif

namespace {

// The daemon's level and the library's: the library filters before its messages reach us.
void set_log_level(const std::string& name) {
  auto level = spdlog::level::from_str(name);
  spdlog::get("modelcastd")->set_level(level);
  mc_set_log_level(static_cast<mc_log_level>(level));
}

// What the configuration meets outside its file: key files, hook programs, the socket's
// directory and path, the HTTP host, and with `model_endpoints` each plaintext ipc:// producer
// endpoint's directory. --check and a reload (refused, the running configuration kept) make them
// all: a reload made only the first two, so a file --check refused was taken, a model it changed
// was stopped and not started again, and the next restart failed. The start makes all but the
// endpoints' (a configuration error: exit 2): a model that cannot start there is reported and
// the others serve, as with anything else its consumer refuses. Directories a service manager
// makes at the start may not be there yet: checked when there, and again when used.
// Whether `path` is there (kind: "exists" or "directory"). A path that cannot be examined (a
// directory this user may not search, a loop of symbolic links) is a configuration error naming
// it: the throwing std::filesystem calls ended the daemon at a reload, and --check with it.
bool is_there(const std::filesystem::path& path, const char* kind, const std::string& what) {
  std::error_code error;
  const auto status = std::filesystem::status(path, error);
  if (error && error != std::errc::no_such_file_or_directory && error != std::errc::not_a_directory) {
    throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument,
                           what + " " + modelcast::shown_text(path.string(), 4096) + " cannot be examined: " + error.message());
  }
  return std::string_view(kind) == "directory" ? std::filesystem::is_directory(status) : std::filesystem::exists(status);
}

void check_surroundings(modelcastd::DaemonConfig& config, bool model_endpoints) {
  modelcastd::check_key_files(config);
  modelcastd::check_hook_programs(config);
  if (is_there(std::filesystem::absolute(config.socket_path).parent_path(), "exists", "the socket's directory")) {
    modelcastd::attach::check_listen_directory(config.socket_path);
    modelcastd::attach::check_socket_path_free(config.socket_path);  // a socket (the running daemon's) is free
  }
  if (!config.http_listen.empty()) modelcastd::check_http_host(config.http_listen);
  if (!config.repository.empty() && is_there(config.repository, "directory", "[repository] path")) {
    modelcastd::check_repository_directory(config.repository);
  }
  if (!model_endpoints) return;
  for (const auto& model : config.models) {
    const bool plaintext = model.producer_public_key.empty() && model.producer_key_file.empty();
    if (plaintext && model.endpoint.rfind("ipc://", 0) == 0 &&
        is_there(std::filesystem::absolute(model.endpoint.substr(6)).parent_path(), "exists",
                 model.source + ": model '" + model.name + "': the endpoint's directory")) {
      try {
        modelcast::wire::check_private_ipc_directory(model.endpoint, "consumer");
      } catch (const modelcast::Error& e) {  // named as every other configuration error is
        throw modelcast::Error(e.code(), model.source + ": model '" + model.name + "': key 'endpoint': " + e.what());
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"modelcastd: receives models from modelcast producers and serves them to local processes"};
  std::string config_path = "/etc/modelcastd/modelcastd.toml";
  bool check_only = false;
  app.add_option("-c,--config", config_path, "configuration file (TOML)")->capture_default_str();
  app.add_flag("--check", check_only, "check the configuration file and exit");
  app.set_version_flag("--version", std::string("modelcastd ") + MODELCASTD_VERSION);
  if (auto status = modelcast::parse_command_line(app, argc, argv)) return *status;

  // Plain stdout: journald (or the test reading us) adds its own timestamps and ordering.
  auto log = spdlog::stdout_logger_mt("modelcastd");
  log->set_pattern("%Y-%m-%dT%H:%M:%S.%e %l %v");
  log->flush_on(spdlog::level::info);
  // The library's own messages (joins, reconnects, refusals) come out here too, so the journal
  // gets one format on one stream instead of a second, timestamp-less one on stderr.
  mc_set_log_handler(
      [](mc_log_level level, const char* component, const char* message, void* logger) {
        static_cast<spdlog::logger*>(logger)->log(static_cast<spdlog::level::level_enum>(level), "{}: {}", component,
                                                  message);
      },
      log.get());

  modelcastd::DaemonConfig config;
  try {
    config = modelcastd::load_config(config_path);
    check_surroundings(config, /*model_endpoints=*/check_only);
  } catch (const std::exception& e) {  // not only modelcast::Error: a std::filesystem error aborted
    log->error("{}", e.what());
    return 2;
  }
  if (check_only) {
    log->info("{}: ok, {} model(s)", config_path, config.models.size());
    return 0;
  }
  set_log_level(config.log_level);

  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  // Their default action ends the process: a stray `kill -USR1` (the log-reopen convention of
  // many daemons, which this one, logging to stdout for the journal, has no use for) stopped the
  // serving.
  sigaddset(&signals, SIGUSR1);
  sigaddset(&signals, SIGUSR2);
  // SIGCHLD is blocked too, not waited for here: the child reaper reads it, where there is one.
  sigset_t blocked = signals;
  sigaddset(&blocked, SIGCHLD);
  pthread_sigmask(SIG_BLOCK, &blocked, nullptr);

  std::unique_ptr<modelcastd::ChildReaper> reaper;
  try {
    reaper = modelcastd::ChildReaper::start_if_needed();
  } catch (const std::exception& e) {
    log->error("cannot start: {}", e.what());
    return 1;
  }

  std::unique_ptr<modelcastd::Daemon> daemon;
  try {
    daemon = std::make_unique<modelcastd::Daemon>(config);
  } catch (const std::exception& e) {
    log->error("cannot start: {}", e.what());
    // log_level = "off" (or "critical") silenced the only word on why the daemon exited 1.
    if (!log->should_log(spdlog::level::err)) std::cerr << "modelcastd: cannot start: " << e.what() << std::endl;
    return 1;
  }
  sd_notify(0, "READY=1");
  log->info("ready (pid {})", getpid());
  for (;;) {
    // The main thread owns the models' starts: between signals it makes those due again
    // (Daemon::until_retry).
    int signal = 0;
    if (const auto wait = daemon->until_retry()) {
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(*wait).count();
      const timespec timeout{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
      signal = sigtimedwait(&signals, nullptr, &timeout);
      if (signal == -1) {
        if (errno == EAGAIN) daemon->retry_due();
        continue;
      }
    } else {
      signal = sigwaitinfo(&signals, nullptr);
    }
    if (signal == SIGHUP) {
      sd_notify(0, "RELOADING=1");
      // Everything that can refuse the file comes before the reload changes anything; a model
      // the reload cannot start is reported by it and serves on.
      std::optional<modelcastd::DaemonConfig> fresh;
      try {
        fresh = modelcastd::load_config(config_path, modelcastd::ConfigFile::kRegularOnly);
        check_surroundings(*fresh, /*model_endpoints=*/true);
      } catch (const std::exception& e) {  // not only modelcast::Error: a std::filesystem error aborted
        fresh.reset();
        daemon->refuse_reload(e.what());
      }
      if (fresh) {
        set_log_level(fresh->log_level);
        daemon->reload(std::move(*fresh));
        log->info("reloaded {}", config_path);
      }
      sd_notify(0, "READY=1");
    } else if (signal == SIGUSR1 || signal == SIGUSR2) {
      log->warn("{} ignored: modelcastd reloads its configuration on SIGHUP and stops on SIGTERM",
                signal == SIGUSR1 ? "SIGUSR1" : "SIGUSR2");
    } else if (signal == SIGTERM || signal == SIGINT) {
      sd_notify(0, "STOPPING=1");
      log->info("stopping");
      daemon.reset();
      log->info("stopped");
      return 0;
    }
  }
}
