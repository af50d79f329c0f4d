#include "common/log.h"

#include <mutex>
#include <optional>
#include <string>

#include "common/log_level.h"
#include "common/log_routing.h"

namespace modelcast::log {
namespace {

std::mutex g_mutex;  // spdlog's registry is thread-safe; this guards get-or-create and the level
std::optional<spdlog::level::level_enum> g_level;  // set_level's, once called

bool is_ours(const spdlog::logger& logger) { return logger.name().rfind("modelcast.", 0) == 0; }

}  // namespace

std::shared_ptr<spdlog::logger> get(std::string_view component) {
  std::lock_guard lock(g_mutex);
  std::string name = "modelcast." + std::string(component);
  if (auto existing = spdlog::get(name)) return existing;
  // Every component writes through the one routing sink: stderr, or the handler a C or
  // Fortran caller installed (mc_set_log_handler).
  auto logger = std::make_shared<spdlog::logger>(name, routing_sink());
  logger->set_level(g_level ? *g_level : level_from_environment());
  spdlog::register_logger(logger);
  return logger;
}

void set_level(spdlog::level::level_enum level) {
  std::lock_guard lock(g_mutex);
  g_level = level;
  spdlog::apply_all([level](const std::shared_ptr<spdlog::logger>& logger) {
    if (is_ours(*logger)) logger->set_level(level);
  });
}

}  // namespace modelcast::log
