// DigestOrder: digests take effect in version order, whichever thread hashed them first.
#include "core/producer/digest_order.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace {

using modelcast::producer::DigestOrder;
using Versions = std::vector<std::uint64_t>;

TEST(DigestOrder, DigestsHashedByPublishWaitForOlderOnesStillOnTheDigestThread) {
  DigestOrder<std::uint64_t> order;  // the payload is the version itself
  order.hashing(2);
  order.hashing(3);
  EXPECT_EQ(order.ready(4, 4), Versions{}) << "version 4 took effect before 2 and 3";
  EXPECT_EQ(order.ready(2, 2), Versions{2});
  order.hashing(5);
  EXPECT_EQ(order.ready(6, 6), Versions{});
  EXPECT_EQ(order.ready(3, 3), (Versions{3, 4})) << "4 waited for 3 only, not for 5";
  EXPECT_EQ(order.ready(5, 5), (Versions{5, 6}));
}

TEST(DigestOrder, DigestsTakeEffectAtOnceWhenNothingOlderIsHashing) {
  DigestOrder<std::uint64_t> order;
  EXPECT_EQ(order.ready(1, 1), Versions{1});  // hashed by publish(), nothing before it
  order.hashing(2);
  EXPECT_EQ(order.ready(2, 2), Versions{2});
  order.hashing(4);
  EXPECT_EQ(order.ready(3, 3), Versions{3}) << "3 is older than the version still hashing";
  EXPECT_EQ(order.ready(4, 4), Versions{4});
}

}  // namespace
