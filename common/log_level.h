// The log level named by MODELCAST_LOG_LEVEL. spdlog's own from_str turns every unknown name
// (`verbose`, `WARN`) into "off", which silently hid errors too; these are checked instead.
#pragma once

#include <optional>
#include <string_view>

#include <spdlog/common.h>

namespace modelcast::log {

// trace, debug, info, warn (or warning), error (or err), critical, off; case does not matter.
// std::nullopt for anything else.
std::optional<spdlog::level::level_enum> parse_level(std::string_view name);

// The valid names, for messages: "trace, debug, info, warn, error, critical, off".
const char* valid_level_names();

// The level MODELCAST_LOG_LEVEL asks for; info when unset or empty. An unknown value is
// reported on stderr (naming it and the valid names) once per process, and info is used.
// Thread-safe.
spdlog::level::level_enum level_from_environment();

}  // namespace modelcast::log
