// MODELCAST_LOG_LEVEL: valid names in any case; anything else is refused, not mapped to "off".
#include <gtest/gtest.h>

#include "common/log_level.h"

namespace {

using modelcast::log::parse_level;
using L = spdlog::level::level_enum;

TEST(LogLevel, AcceptsEveryDocumentedNameInAnyCase) {
  EXPECT_EQ(parse_level("trace"), L::trace);
  EXPECT_EQ(parse_level("DEBUG"), L::debug);
  EXPECT_EQ(parse_level("Info"), L::info);
  EXPECT_EQ(parse_level("WARN"), L::warn);
  EXPECT_EQ(parse_level("warning"), L::warn);
  EXPECT_EQ(parse_level("error"), L::err);
  EXPECT_EQ(parse_level("err"), L::err);
  EXPECT_EQ(parse_level("critical"), L::critical);
  EXPECT_EQ(parse_level("off"), L::off);
}

TEST(LogLevel, RejectsUnknownNamesInsteadOfTurningLoggingOff) {
  EXPECT_EQ(parse_level("verbose"), std::nullopt);
  EXPECT_EQ(parse_level(""), std::nullopt);
  EXPECT_EQ(parse_level("info "), std::nullopt);
  EXPECT_EQ(parse_level("3"), std::nullopt);
}

TEST(LogLevel, EnvironmentValueThatIsUnknownFallsBackToInfoWithAMessage) {
  ::setenv("MODELCAST_LOG_LEVEL", "verbose", 1);
  testing::internal::CaptureStderr();
  const auto level = modelcast::log::level_from_environment();
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(level, L::info);
  EXPECT_NE(err.find("MODELCAST_LOG_LEVEL='verbose'"), std::string::npos) << err;
  EXPECT_NE(err.find(modelcast::log::valid_level_names()), std::string::npos) << err;
  ::setenv("MODELCAST_LOG_LEVEL", "Error", 1);
  EXPECT_EQ(modelcast::log::level_from_environment(), L::err);
  ::unsetenv("MODELCAST_LOG_LEVEL");
  EXPECT_EQ(modelcast::log::level_from_environment(), L::info);
}

}  // namespace
