// What the library logged while a LogsSaid lives (through the handler a C or Fortran caller
// installs), one "component: message" each with its level; stderr again after. One at a time per
// process.
#pragma once

#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include "modelcast/modelcast_runtime.h"

namespace testing_support {

struct LogsSaid {
  LogsSaid() {
    mc_set_log_handler(
        [](mc_log_level level, const char* component, const char* message, void* self) {
          auto* logs = static_cast<LogsSaid*>(self);
          std::lock_guard lock(logs->mutex);
          logs->said.push_back(std::string(component) + ": " + message);
          logs->levels.push_back(level);
        },
        this);
  }
  ~LogsSaid() { mc_set_log_handler(nullptr, nullptr); }
  LogsSaid(const LogsSaid&) = delete;
  LogsSaid& operator=(const LogsSaid&) = delete;
  long containing(const std::string& text) {
    std::lock_guard lock(mutex);
    return std::count_if(said.begin(), said.end(), [&](const std::string& l) { return l.find(text) != std::string::npos; });
  }
  // The lines at `level` or above that contain `text`, each as it was said.
  std::vector<std::string> at_least(mc_log_level level, const std::string& text = "") {
    std::lock_guard lock(mutex);
    std::vector<std::string> lines;
    for (std::size_t i = 0; i < said.size(); ++i) {
      if (levels[i] >= level && said[i].find(text) != std::string::npos) lines.push_back(said[i]);
    }
    return lines;
  }
  std::mutex mutex;
  std::vector<std::string> said;
  std::vector<mc_log_level> levels;  // of each line of `said`
};

}  // namespace testing_support
