// A component's logger whose every line begins with the same words ("model 'm': "), so that a
// process serving several models (modelcastd) or several ranks of one model reads which one each
// line is about. The component loggers are shared (log::get), so the words cannot go into a
// logger's own pattern; a dozen lines here rather than a logger per model.
// Threads: any; the prefix is fixed at construction.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include <spdlog/spdlog.h>

namespace modelcast {

class PrefixedLog {
 public:
  PrefixedLog(std::shared_ptr<spdlog::logger> log, std::string prefix)
      : log_(std::move(log)), prefix_(std::move(prefix)) {}

  bool should_log(spdlog::level::level_enum level) const { return log_->should_log(level); }
  const std::string& prefix() const { return prefix_; }

  template <typename... Args>
  void debug(spdlog::format_string_t<Args...> format, Args&&... args) {
    say(spdlog::level::debug, format, std::forward<Args>(args)...);
  }
  template <typename... Args>
  void info(spdlog::format_string_t<Args...> format, Args&&... args) {
    say(spdlog::level::info, format, std::forward<Args>(args)...);
  }
  template <typename... Args>
  void warn(spdlog::format_string_t<Args...> format, Args&&... args) {
    say(spdlog::level::warn, format, std::forward<Args>(args)...);
  }
  template <typename... Args>
  void error(spdlog::format_string_t<Args...> format, Args&&... args) {
    say(spdlog::level::err, format, std::forward<Args>(args)...);
  }

 private:
  template <typename... Args>
  void say(spdlog::level::level_enum level, spdlog::format_string_t<Args...> format, Args&&... args) {
    if (!log_->should_log(level)) return;  // nothing formatted for a line nobody reads
    log_->log(level, "{}{}", prefix_, fmt::format(format, std::forward<Args>(args)...));
  }

  std::shared_ptr<spdlog::logger> log_;
  std::string prefix_;
};

}  // namespace modelcast
