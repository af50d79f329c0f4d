// Events a peer can cause at will are logged once per interval, and the line let through says
// how many were held back since the last.
#include <gtest/gtest.h>

#include "common/log_rate.h"

namespace {

using modelcast::LogRate;
using namespace std::chrono_literals;

TEST(LogRate, OneLinePerIntervalSayingHowManyWereHeldBack) {
  LogRate rate(10s);
  const LogRate::Clock::time_point t0{};
  ASSERT_TRUE(rate.admit(t0 + 1s));
  EXPECT_EQ(*rate.admit(t0 + 100s), "") << "nothing was held back";
  for (int i = 0; i < 500; ++i) EXPECT_FALSE(rate.admit(t0 + 100s + i * 10ms)) << "event " << i;
  auto note = rate.admit(t0 + 110s);
  ASSERT_TRUE(note) << "the interval passed";
  EXPECT_EQ(*note, " (and 500 more since the last one logged)");
  EXPECT_FALSE(rate.admit(t0 + 115s));
  EXPECT_EQ(*rate.admit(t0 + 121s), " (and 1 more since the last one logged)");
}

// A refused join was logged at every retry, twice a second for as long as the names differed.
TEST(RepeatRate, TheSameTextOncePerIntervalAnotherAtOnce) {
  modelcast::RepeatRate rate(10s);
  const LogRate::Clock::time_point t0{};
  EXPECT_EQ(*rate.admit("refused", t0), "");
  for (int i = 1; i < 20; ++i) EXPECT_FALSE(rate.admit("refused", t0 + i * 500ms)) << "retry " << i;
  EXPECT_EQ(*rate.admit("rejected version 3", t0 + 10500ms), "") << "another error waited";
  EXPECT_EQ(*rate.admit("refused", t0 + 11s), "") << "a text other than the last is news";
  EXPECT_FALSE(rate.admit("refused", t0 + 12s));
  EXPECT_EQ(*rate.admit("refused", t0 + 21s), " (and 1 more since the last one logged)");
}

// The repository said a full disk for every version, each line naming its version (and a path
// named after it): a line that differs only in its numbers is the same text.
TEST(RepeatRate, LinesThatDifferOnlyInTheirNumbersAreOneTextWithTheNumbersLeftOut) {
  EXPECT_EQ(modelcast::with_numbers_left_out("write of version 12 to /r/.tmp-12-3 failed"),
            "write of version # to /r/.tmp-#-# failed");
  EXPECT_EQ(modelcast::with_numbers_left_out(""), "");
  EXPECT_EQ(modelcast::with_numbers_left_out("no digits"), "no digits");
  modelcast::RepeatRate rate(10s);
  const LogRate::Clock::time_point t0{};
  EXPECT_EQ(*rate.admit(modelcast::with_numbers_left_out("version 41: no space"), t0), "");
  EXPECT_FALSE(rate.admit(modelcast::with_numbers_left_out("version 42: no space"), t0 + 50ms));
  EXPECT_EQ(*rate.admit(modelcast::with_numbers_left_out("version 43: read-only"), t0 + 100ms), "");
}

// A consumer that rejects every version (a layout it does not expect) said so at every version,
// each line naming its version: as far as the rate goes, the same text.
TEST(RepeatRate, TextsThatDifferOnlyInTheVersionsTheyNameAreOneText) {
  modelcast::RepeatRate rate(10s);
  const LogRate::Clock::time_point t0{};
  EXPECT_EQ(*rate.admit("version 41 rejected: no tensor 'w'", t0), "");
  for (int v = 42; v < 50; ++v) {
    EXPECT_FALSE(rate.admit("version " + std::to_string(v) + " rejected: no tensor 'w'", t0 + (v - 41) * 100ms));
  }
  EXPECT_EQ(*rate.admit("version 50 rejected: no tensor 'x'", t0 + 1s), "") << "another text waited";
  // Other numbers tell texts apart: another relay, another rank, another tensor is news.
  EXPECT_EQ(*rate.admit("version 50 rejected: no tensor 'layers.3.w'", t0 + 1010ms), "");
  EXPECT_EQ(*rate.admit("version 50 rejected: no tensor 'layers.4.w'", t0 + 1020ms), "") << "another tensor waited";
  EXPECT_EQ(modelcast::with_versions_left_out("relay 'r1' sent nothing of version 12 (version 3 held) for 500 ms"),
            "relay 'r1' sent nothing of version # (version # held) for 500 ms");
  EXPECT_EQ(modelcast::with_versions_left_out("version 7"), "version #");
  EXPECT_EQ(modelcast::with_versions_left_out("version x, version "), "version x, version ");
  EXPECT_EQ(*rate.admit("version 51 rejected: no tensor 'w'", t0 + 1100ms), "") << "a text other than the last is news";
  EXPECT_FALSE(rate.admit("version 52 rejected: no tensor 'w'", t0 + 1200ms));
  EXPECT_EQ(*rate.admit("version 53 rejected: no tensor 'w'", t0 + 12s), " (and 1 more since the last one logged)");
}

}  // namespace
