#include "common/log.h"

#include <cstdlib>
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
  const char* level = std::getenv("MODELCAST_LOG_LEVEL");
  logger->set_level(level ? spdlog::level::from_str(level) : spdlog::level::info);
  logger->set_pattern("[%H:%M:%S.%e] [%n] [%l] %v");
  return logger;
}

}  // namespace modelcast::log
