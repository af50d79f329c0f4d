// Where modelcast's log messages go: stderr by default, or a handler installed at run time
// (the C ABI's mc_set_log_handler, so C and Fortran callers can route them). Every component
// logger writes through one shared sink, so switching is one call that affects all of them.
#pragma once

#include <functional>
#include <memory>
#include <string_view>

#include <spdlog/common.h>
#include <spdlog/sinks/sink.h>

namespace modelcast::log {

// level, logger name ("modelcast.producer"), message text (valid during the call only).
using Handler = std::function<void(spdlog::level::level_enum, std::string_view, std::string_view)>;

// The sink every modelcast logger is created with.
std::shared_ptr<spdlog::sinks::sink> routing_sink();

// Sends every later message to `handler` (empty: back to stderr). Calls of the handler are
// serialised by the sink's lock; once this returns the previous handler is not running and is
// not called again. The handler must not log through modelcast, nor call this (the sink's
// lock is not recursive). Thread-safe.
void set_handler(Handler handler);

}  // namespace modelcast::log
