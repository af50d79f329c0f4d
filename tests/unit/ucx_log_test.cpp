// UCX's log messages reach modelcast's log (transports/ucx/ucx_log.h) instead of stdout, where
// UCX prints them by itself and where they corrupted a program's output.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <ucs/config/global_opts.h>
#include <ucs/debug/log_def.h>

#include "common/log.h"
#include "common/log_routing.h"
#include "transports/ucx/ucx_transport.h"

namespace {

struct Logged {
  spdlog::level::level_enum level;
  std::string logger;
  std::string text;
};

// Every modelcast message logged while it lives, instead of stderr.
class LogCapture {
 public:
  LogCapture() {
    modelcast::log::set_handler([this](spdlog::level::level_enum level, std::string_view logger, std::string_view text) {
      seen_.push_back({level, std::string(logger), std::string(text)});
    });
  }
  ~LogCapture() { modelcast::log::set_handler({}); }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;
  // Read after the messages' dispatch returned: set_handler's lock orders them.
  const std::vector<Logged>& seen() const { return seen_; }

 private:
  std::vector<Logged> seen_;
};

// What UCX's own ucs_warn() does: the level test, then the dispatch through its handlers.
void ucx_warns(const char* text) {
  if (ucs_log_component_is_enabled(UCS_LOG_LEVEL_WARN, &ucs_global_opts.log_component)) {
    ucs_log_dispatch(__FILE__, __LINE__, __func__, UCS_LOG_LEVEL_WARN, &ucs_global_opts.log_component, "%s", text);
  }
}

TEST(UcxLog, OnceATransportIsMadeUcxWarningsGoToModelcastsLogNotStdout) {
  auto transport = modelcast::transport::make_ucx_transport();
  LogCapture capture;
  testing::internal::CaptureStdout();
  ucx_warns("object 0x1 was not returned to mpool");
  std::fflush(stdout);
  const std::string printed = testing::internal::GetCapturedStdout();
  EXPECT_EQ(printed, "") << "UCX printed its warning to stdout";
  ASSERT_EQ(capture.seen().size(), 1u);
  const Logged& logged = capture.seen().front();
  EXPECT_EQ(logged.level, spdlog::level::warn);
  EXPECT_EQ(logged.logger, "modelcast.ucx");
  EXPECT_NE(logged.text.find("UCX: object 0x1 was not returned to mpool (ucx_log_test.cpp:"), std::string::npos)
      << logged.text;
}

TEST(UcxLog, ModelcastsLevelSilencesUcxMessagesBelowIt) {
  auto transport = modelcast::transport::make_ucx_transport();
  auto logger = modelcast::log::get("ucx");
  const auto was = logger->level();
  logger->set_level(spdlog::level::err);
  LogCapture capture;
  testing::internal::CaptureStdout();
  ucx_warns("a warning below the level");
  std::fflush(stdout);
  const std::string printed = testing::internal::GetCapturedStdout();
  logger->set_level(was);
  EXPECT_EQ(printed, "");
  EXPECT_TRUE(capture.seen().empty());
}

TEST(UcxLog, AUcxLogFileOfTheUsersKeepsUcxMessagesThere) {
  auto transport = modelcast::transport::make_ucx_transport();
  LogCapture capture;
  // What UCX_LOG_FILE sets at UCX's start (its own stream, opened then, is stdout here).
  char* was = ucs_global_opts.log_file;
  char file[] = "/tmp/ucx-%p.log";
  ucs_global_opts.log_file = file;
  testing::internal::CaptureStdout();
  ucx_warns("for the user's file");
  std::fflush(stdout);
  const std::string printed = testing::internal::GetCapturedStdout();
  ucs_global_opts.log_file = was;
  EXPECT_TRUE(capture.seen().empty()) << "taken from UCX's own log destination";
  EXPECT_NE(printed.find("for the user's file"), std::string::npos) << printed;
}

// modelcast sizes UCX's shared-memory receive segments; where UCX_TLS leaves shared memory out
// that setting names no transport UCX loads, and UCX said "invalid configuration" at every start.
TEST(UcxLog, ATransportMadeWithSharedMemoryLeftOutLogsNoConfigurationWarning) {
  // Shared memory left out whole, all but its mm transports (cma), by an exclusion list, or kept.
  // TCP's own setting likewise, where TCP is left out ("sm" covers no TCP), or where
  // UCX_NET_DEVICES leaves it no device (a device of no network: TCP opens none).
  for (const char* tls : {"tcp,self", "cma,tcp,self", "^posix,sysv", "^sm", "mm,tcp,self", "posix,self", "sm,self", "^tcp",
                          "net-devices:memory0"}) {
    LogCapture capture;
    const std::string setting = tls;
    const char* devices = std::getenv("UCX_NET_DEVICES");
    const std::string devices_before = devices ? devices : "";
    if (setting.rfind("net-devices:", 0) == 0) {
      setenv("UCX_NET_DEVICES", setting.substr(12).c_str(), 1);
    } else {
      setenv("UCX_TLS", tls, 1);
    }
    auto transport = modelcast::transport::make_ucx_transport();
    unsetenv("UCX_TLS");
    if (devices_before.empty()) {
      unsetenv("UCX_NET_DEVICES");
    } else {
      setenv("UCX_NET_DEVICES", devices_before.c_str(), 1);
    }
    for (const auto& logged : capture.seen()) {
      EXPECT_FALSE(logged.text.find("invalid configuration") != std::string::npos && logged.level >= spdlog::level::warn)
          << setting << ": " << logged.text;
    }
  }
}

}  // namespace
