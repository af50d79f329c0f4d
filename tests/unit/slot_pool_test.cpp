#include <gtest/gtest.h>

#include "core/producer/slot_pool.h"
#include "modelcast/error.h"

namespace modelcast {
namespace {

using namespace std::chrono_literals;
using Clock = SlotPool::Clock;

TEST(SlotPool, NeedsTwoSlots) { EXPECT_THROW(SlotPool(1), Error); }

TEST(SlotPool, NeverHandsOutTheNewestOrALeasedSlot) {
  SlotPool pool(3);
  auto t0 = Clock::time_point{} + 1h;
  auto s1 = pool.reserve_for_write(t0).value();
  pool.mark_published(s1, 1);
  auto s2 = pool.reserve_for_write(t0).value();
  EXPECT_NE(s2, s1);
  pool.mark_published(s2, 2);
  // A reader holds version 1; version 2 is the newest: only the third slot is writable.
  auto lease = pool.acquire_lease(1, "reader", t0, 10s).value();
  EXPECT_EQ(lease.slot, s1);
  auto s3 = pool.reserve_for_write(t0).value();
  EXPECT_NE(s3, s1);
  EXPECT_NE(s3, s2);
  // While s3 is being written, nothing else is writable.
  EXPECT_FALSE(pool.reserve_for_write(t0).has_value());
  pool.mark_published(s3, 3);
  // Newest is 3 (s3), s1 leased: s2 (version 2) is the one to reuse.
  EXPECT_EQ(pool.reserve_for_write(t0), s2);
  EXPECT_FALSE(pool.slot_of(2).has_value()) << "a reserved slot's old version must not be leasable";
  EXPECT_FALSE(pool.acquire_lease(2, "late", t0, 10s).has_value());
}

TEST(SlotPool, ReleasedLeaseFreesTheSlot) {
  SlotPool pool(2);
  auto t0 = Clock::time_point{} + 1h;
  pool.mark_published(pool.reserve_for_write(t0).value(), 1);
  auto lease = pool.acquire_lease(0, "reader", t0, 10s).value();  // 0 = newest
  EXPECT_EQ(lease.version, 1u);
  auto s = pool.reserve_for_write(t0).value();
  pool.mark_published(s, 2);
  EXPECT_FALSE(pool.reserve_for_write(t0).has_value()) << "slot of v1 is leased, v2 is newest";
  EXPECT_TRUE(pool.release_lease(lease.id));
  EXPECT_FALSE(pool.release_lease(lease.id));
  EXPECT_TRUE(pool.reserve_for_write(t0).has_value());
}

TEST(SlotPool, LeasesOfDeadReadersExpire) {
  SlotPool pool(2);
  auto t0 = Clock::time_point{} + 1h;
  pool.mark_published(pool.reserve_for_write(t0).value(), 1);
  auto lease = pool.acquire_lease(1, "hung", t0, 5s).value();
  pool.mark_published(pool.reserve_for_write(t0).value(), 2);
  EXPECT_FALSE(pool.reserve_for_write(t0 + 4s).has_value());
  EXPECT_EQ(pool.next_expiry(), t0 + 5s);
  EXPECT_TRUE(pool.take_expired(t0 + 4s).empty());
  auto expired = pool.take_expired(t0 + 5s);
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0].id, lease.id);
  EXPECT_EQ(expired[0].holder, "hung");
  EXPECT_TRUE(pool.reserve_for_write(t0 + 5s).has_value());
}

TEST(SlotPool, ReservationExpiresLeasesAndReportsThemLater) {
  SlotPool pool(2);
  auto t0 = Clock::time_point{} + 1h;
  pool.mark_published(pool.reserve_for_write(t0).value(), 1);
  pool.acquire_lease(1, "hung", t0, 1s);
  pool.mark_published(pool.reserve_for_write(t0).value(), 2);
  EXPECT_TRUE(pool.reserve_for_write(t0 + 2s).has_value());
  EXPECT_EQ(pool.take_expired(t0 + 2s).size(), 1u) << "the expiry seen by the writer is still reported";
}

}  // namespace
}  // namespace modelcast
