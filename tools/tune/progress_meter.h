// "replay: 1234/5000 points (24%)" on stderr while a long command runs, redrawn in place at
// most once per percent; silent when disabled (stderr not a terminal and no --progress).
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>
#include <utility>

namespace modelcast::tune {

class ProgressMeter {
 public:
  ProgressMeter(bool enabled, std::string what, std::size_t total)
      : enabled_(enabled && total > 0), what_(std::move(what)), total_(total) {}
  ProgressMeter(const ProgressMeter&) = delete;
  ProgressMeter& operator=(const ProgressMeter&) = delete;
  ~ProgressMeter() {
    if (enabled_ && shown_percent_ >= 0) std::fputc('\n', stderr);
  }

  void update(std::size_t done) {
    if (!enabled_) return;
    const int percent = static_cast<int>(100 * done / total_);
    if (percent == shown_percent_) return;
    shown_percent_ = percent;
    std::fprintf(stderr, "\r%s: %zu/%zu points (%d%%)", what_.c_str(), done, total_, percent);
    std::fflush(stderr);
  }

 private:
  bool enabled_;
  std::string what_;
  std::size_t total_;
  int shown_percent_ = -1;
};

}  // namespace modelcast::tune
