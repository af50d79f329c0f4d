#include "common/log.h"

#include "common/log_level.h"

#include <mutex>
#include <string>

#include <spdlog/sinks/stdout_color_sinks.h>

namespace modelcast::log {

std::shared_ptr<spdlog::logger> get(std::string_view component) {
  static std::mutex mutex;  // spdlog's registry is thread-safe; this guards get-or-create
  std::lock_guard lock(mutex);
  std::string name = "modelcast." + std::string(component);
  if (auto existing = spdlog::get(name)) return existing;
  auto logger = spdlog::stderr_color_mt(name);
  logger->set_level(level_from_environment());
  logger->set_pattern("[%H:%M:%S.%e] [%n] [%l] %v");
  return logger;
}

}  // namespace modelcast::log
