// The benchmark's held-out families: no choice may look at them, and pooled rows keep them apart.
#include <gtest/gtest.h>

#include "family_groups.h"

namespace mb = modelcast::bench;

TEST(FamilyGroups, ChoicesLookOnlyAtOtherDevelopmentFamilies) {
  const mb::FamilyGroups g{{"rl_catch"}};
  EXPECT_TRUE(g.may_choose_on("charlm", "fmnist_mlp"));
  EXPECT_FALSE(g.may_choose_on("fmnist_mlp", "fmnist_mlp"));  // leave-one-family-out
  EXPECT_FALSE(g.may_choose_on("rl_catch", "fmnist_mlp"));    // never a held-out family's results
  EXPECT_FALSE(g.may_choose_on("rl_catch", "rl_catch"));
  EXPECT_TRUE(g.may_choose_on("charlm", "rl_catch"));  // a held-out family is scored with dev choices
}

TEST(FamilyGroups, PooledRowsSeparateHeldOutFromDevelopment) {
  const mb::FamilyGroups g{{"rl_catch", "charlm_code"}};
  EXPECT_TRUE(g.covers(mb::kDevGroup, "charlm"));
  EXPECT_FALSE(g.covers(mb::kDevGroup, "rl_catch"));
  EXPECT_TRUE(g.covers(mb::kHeldOutGroup, "charlm_code"));
  EXPECT_FALSE(g.covers(mb::kHeldOutGroup, "charlm"));
  EXPECT_TRUE(g.covers("charlm", "charlm"));
  EXPECT_FALSE(g.covers("charlm", "charlm_code"));
  EXPECT_EQ(g.pooled_labels({"charlm", "rl_catch"}), (std::vector<std::string>{mb::kDevGroup, mb::kHeldOutGroup}));
  EXPECT_EQ(g.pooled_labels({"charlm"}), (std::vector<std::string>{mb::kDevGroup}));
}
