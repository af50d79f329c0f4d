// One spdlog logger per component ("modelcast.producer", ...). Level from MODELCAST_LOG_LEVEL
// (trace, debug, info, warn, error, critical, off, in any case; default info; an unknown name is
// reported on stderr and info used), or spdlog's own API at run time.
#pragma once

#include <memory>
#include <string_view>

#include <spdlog/spdlog.h>

namespace modelcast::log {
std::shared_ptr<spdlog::logger> get(std::string_view component);

// Sets the level of every modelcast logger and of those created later (instead of
// MODELCAST_LOG_LEVEL). Thread-safe.
void set_level(spdlog::level::level_enum level);
}  // namespace modelcast::log
