#include "common/log_routing.h"

#include <mutex>
#include <string>
#include <utility>

#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace modelcast::log {
namespace {

// base_sink's mutex serialises sink_it_, set_handler and flush: the handler never runs twice
// at once, and swapping it waits for a call in progress.
class RoutingSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  RoutingSink() : stderr_(std::make_shared<spdlog::sinks::stderr_color_sink_st>()) {
    stderr_->set_pattern("[%H:%M:%S.%e] [%n] [%l] %v");
  }

  void set_handler(Handler handler) {
    std::lock_guard lock(mutex_);
    handler_ = std::move(handler);
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    if (!handler_) {
      stderr_->log(msg);
      return;
    }
    handler_(msg.level, std::string_view(msg.logger_name.data(), msg.logger_name.size()),
             std::string_view(msg.payload.data(), msg.payload.size()));
  }
  void flush_() override { stderr_->flush(); }
  // The pattern belongs to the stderr output; a handler gets the bare message.
  void set_pattern_(const std::string& pattern) override { stderr_->set_pattern(pattern); }
  void set_formatter_(std::unique_ptr<spdlog::formatter> formatter) override {
    stderr_->set_formatter(std::move(formatter));
  }

 private:
  std::shared_ptr<spdlog::sinks::stderr_color_sink_st> stderr_;
  Handler handler_;
};

std::shared_ptr<RoutingSink> the_sink() {
  static const auto sink = std::make_shared<RoutingSink>();
  return sink;
}

}  // namespace

std::shared_ptr<spdlog::sinks::sink> routing_sink() { return the_sink(); }

void set_handler(Handler handler) { the_sink()->set_handler(std::move(handler)); }

}  // namespace modelcast::log
