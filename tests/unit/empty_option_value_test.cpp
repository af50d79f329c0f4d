// "--name=" with no value is named before CLI11 reads it as "--name" followed by a value taken
// from the next argument (common/empty_option_value.h).
#include <gtest/gtest.h>

#include <vector>

#include "common/empty_option_value.h"

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
}

}  // namespace
}  // namespace modelcast
