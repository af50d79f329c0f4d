#include "common/log_level.h"

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <utility>

namespace modelcast::log {

std::optional<spdlog::level::level_enum> parse_level(std::string_view name) {
  std::string lower;
  for (char ch : name) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  using L = spdlog::level::level_enum;
  static constexpr std::pair<const char*, L> kNames[] = {
      {"trace", L::trace}, {"debug", L::debug},     {"info", L::info},         {"warn", L::warn}, {"warning", L::warn},
      {"error", L::err},   {"err", L::err},         {"critical", L::critical}, {"off", L::off}};
  for (const auto& [text, level] : kNames) {
    if (lower == text) return level;
  }
  return std::nullopt;
}

const char* valid_level_names() { return "trace, debug, info, warn, error, critical, off"; }

spdlog::level::level_enum level_from_environment() {
  const char* value = std::getenv("MODELCAST_LOG_LEVEL");
  if (value == nullptr || *value == '\0') return spdlog::level::info;
  if (auto level = parse_level(value)) return *level;
  static std::once_flag reported;
  std::call_once(reported, [value] {
    std::fprintf(stderr, "modelcast: MODELCAST_LOG_LEVEL='%s' is not a log level (valid, in any case: %s); using info\n",
                 value, valid_level_names());
  });
  return spdlog::level::info;
}

}  // namespace modelcast::log
