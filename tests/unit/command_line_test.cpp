// Command lines of modelcast's programs: "--name=" with no value is named before CLI11 reads it
// as "--name" followed by a value taken from the next argument (common/empty_option_value.h), and
// every usage error exits 2, saying what was wrong (common/parse_command_line.h).
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/empty_option_value.h"
#include "common/parse_command_line.h"

namespace modelcast {
namespace {

std::optional<std::string> check(std::vector<const char*> args) {
  args.insert(args.begin(), "program");
  return empty_option_value(static_cast<int>(args.size()), args.data());
}

TEST(EmptyOptionValue, AnOptionGivenEqualsAndNothingIsNamed) {
  EXPECT_EQ(check({"--log=", "run.csv"}), "--log= gives no value: write --log VALUE (an empty value means nothing here)");
  EXPECT_EQ(check({"--log", "run.csv", "--run=", "--total-steps", "5"}).value_or("").substr(0, 6), "--run=");
  // Values, short options, a value that ends in "=" and what follows "--" are left to CLI11.
  EXPECT_EQ(check({"--log=run.csv", "--run", "a", "-x=", "--note=a=", "--", "--late="}), std::nullopt);
  EXPECT_EQ(check({}), std::nullopt);
  // An option for which "" is a value (an empty list) is told how to give it.
  const char* args[] = {"program", "--publish-steps=", "--json"};
  EXPECT_EQ(empty_option_value(3, args, {"--publish-steps"}),
            "--publish-steps= gives no value: write --publish-steps \"\" for an empty one");
}

// A program with two commands and one option each, as modelcast-tune is made; what
// parse_command_line returned and what it printed on stderr.
std::pair<std::optional<int>, std::string> parse(std::vector<const char*> args) {
  CLI::App app{"test"};
  app.require_subcommand(1);
  std::string log;
  double cost = 0;
  for (const char* name : {"plan", "replay"}) {
    auto* command = app.add_subcommand(name, "");
    command->add_option("-l,--log", log, "")->required();
    command->add_option("--cost", cost, "");
  }
  args.insert(args.begin(), "program");
  testing::internal::CaptureStderr();
  testing::internal::CaptureStdout();  // --help
  auto status = parse_command_line(app, static_cast<int>(args.size()), args.data());
  testing::internal::GetCapturedStdout();
  return {status, testing::internal::GetCapturedStderr()};
}

TEST(ParseCommandLine, EveryUsageErrorExitsTwoSayingWhatWasWrong) {
  EXPECT_EQ(parse({"plan", "--log", "a.csv"}).first, std::nullopt);
  EXPECT_EQ(parse({"--help"}).first, 0);
  EXPECT_EQ(parse({"plan", "--help"}).first, 0);
  // CLI11's own codes were 104 (not a number), 106 (missing), 109 (extra), 114 (twice).
  for (const auto& args : std::vector<std::vector<const char*>>{{"plan", "--log", "a", "--cost", "2x"},
                                                                {"plan"},
                                                                {"plan", "--log", "a", "stray"},
                                                                {"plan", "--log", "a", "--log", "b"},
                                                                {}}) {
    EXPECT_EQ(parse(args).first, 2) << parse(args).second;
  }
  // A misspelt command was "A subcommand is required".
  auto [status, said] = parse({"plna", "--log", "a"});
  EXPECT_EQ(status, 2);
  EXPECT_NE(said.find("unknown command 'plna' (the commands: plan, replay;"), std::string::npos) << said;
  // An empty value, given apart ("-l ''"), reached the program as an empty path.
  std::tie(status, said) = parse({"replay", "-l", ""});
  EXPECT_EQ(status, 2);
  EXPECT_NE(said.find("--log is given an empty value"), std::string::npos) << said;
  std::tie(status, said) = parse({"replay", "--log="});
  EXPECT_EQ(status, 2);
  EXPECT_NE(said.find("--log= gives no value"), std::string::npos) << said;
}

}  // namespace
}  // namespace modelcast
