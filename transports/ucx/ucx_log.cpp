#include "transports/ucx/ucx_log.h"

#include <algorithm>
#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include <ucs/config/global_opts.h>
#include <ucs/debug/log_def.h>

#include "common/log.h"

namespace modelcast::transport {
namespace {

// Deliberately never freed: UCX may log while the process exits (a worker destroyed by a static
// object's destructor), after function-local statics such as the logger registry are gone; the
// logger keeps its sink alive.
std::shared_ptr<spdlog::logger>* g_logger = nullptr;
// Cleared when the process exits: from then on UCX prints as it would without us.
std::atomic<bool> g_routing{false};

spdlog::level::level_enum level_of(ucs_log_level_t level) {
  switch (level) {
    case UCS_LOG_LEVEL_FATAL:
      return spdlog::level::critical;
    case UCS_LOG_LEVEL_ERROR:
      return spdlog::level::err;
    case UCS_LOG_LEVEL_WARN:
      return spdlog::level::warn;
    case UCS_LOG_LEVEL_DIAG:
    case UCS_LOG_LEVEL_INFO:
    case UCS_LOG_LEVEL_PRINT:
      return spdlog::level::info;
    case UCS_LOG_LEVEL_DEBUG:
      return spdlog::level::debug;
    default:  // UCX's trace levels
      return spdlog::level::trace;
  }
}

// UCX has already filtered by UCX_LOG_LEVEL (its macros test the level before they dispatch); the
// logger's own level filters again, so MODELCAST_LOG_LEVEL=error silences UCX's warnings too.
ucs_log_func_rc_t to_our_logger(const char* file, unsigned line, const char* /*function*/, ucs_log_level_t level,
                                const ucs_log_component_config_t* /*component*/, const char* format, va_list ap) {
  if (!g_routing.load(std::memory_order_acquire)) return UCS_LOG_FUNC_RC_CONTINUE;
  // A user who sent UCX's log to a file (UCX_LOG_FILE) keeps it there.
  const char* file_set = ucs_global_opts.log_file;
  if (file_set != nullptr && *file_set != '\0') return UCS_LOG_FUNC_RC_CONTINUE;
  auto ours = level_of(level);
  auto& logger = **g_logger;
  if (!logger.should_log(ours)) return UCS_LOG_FUNC_RC_STOP;  // demoting below never raises it
  // The handler receives a printf format and its va_list, which spdlog's formatting cannot take.
  char text[1024];
  std::va_list copy;
  va_copy(copy, ap);
  std::vsnprintf(text, sizeof text, format, copy);
  va_end(copy);
  // UCX says a setting applied to no transport it loaded. Ours for TCP (UcxWorker) is made
  // wherever UCX_TLS allows TCP, and UCX_NET_DEVICES may still leave it no device (an InfiniBand
  // node): which devices TCP can use is known only once UCX has opened them. Not the user's
  // doing, so not a warning every process start.
  if (std::strcmp(text, "invalid configuration: CONN_NB=y") == 0) ours = spdlog::level::debug;
  if (!logger.should_log(ours)) return UCS_LOG_FUNC_RC_STOP;
  const char* base = std::strrchr(file, '/');
  logger.log(ours, "UCX: {} ({}:{})", text, base != nullptr ? base + 1 : file, line);
  return UCS_LOG_FUNC_RC_STOP;
}

}  // namespace

void route_ucx_log() {
  static std::once_flag once;
  std::call_once(once, [] {
    g_logger = new std::shared_ptr<spdlog::logger>(log::get("ucx"));
    // UCX's handler list is not guarded: pushed here, before any worker of ours can log.
    ucs_log_push_handler(&to_our_logger);
    g_routing.store(true, std::memory_order_release);
    std::atexit([] { g_routing.store(false, std::memory_order_release); });
  });
}

}  // namespace modelcast::transport
