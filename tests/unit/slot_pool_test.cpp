#include <gtest/gtest.h>

#include <string>

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

// A slow transfer that keeps progressing outlives any number of lease_timeouts; one that stops
// lapses lease_timeout after its last progress, not after the fetch.
TEST(SlotPool, ALeaseRenewedByProgressLastsAsLongAsTheProgress) {
  SlotPool pool(2);
  auto t0 = Clock::time_point{} + 1h;
  pool.mark_published(pool.reserve_for_write(t0).value(), 1);
  auto lease = pool.acquire_lease(1, "slow", t0, 1s).value();
  for (int i = 1; i <= 50; ++i) {
    auto now = t0 + i * 500ms;
    EXPECT_TRUE(pool.take_expired(now).empty()) << "lapsed after " << i * 500 << " ms of steady progress";
    EXPECT_TRUE(pool.renew_lease(lease.id, now, 1s));
  }
  auto last = t0 + 25s;
  EXPECT_EQ(pool.next_expiry(), last + 1s);
  EXPECT_TRUE(pool.take_expired(last + 999ms).empty());
  ASSERT_EQ(pool.take_expired(last + 1s).size(), 1u);
  EXPECT_FALSE(pool.renew_lease(lease.id, last + 1s, 1s)) << "a lapsed lease cannot be brought back";
}

// A writer that may wait no longer takes the oldest version's slot from its readers, never a
// pinned slot (the digest thread is still reading it) and never the newest version.
TEST(SlotPool, AWriterRevokesReadersOfTheOldestVersionButNotPins) {
  SlotPool pool(3);
  auto t0 = Clock::time_point{} + 1h;
  for (std::uint64_t v = 1; v <= 3; ++v) pool.mark_published(pool.reserve_for_write(t0).value(), v);
  auto reader = pool.acquire_lease(1, "slow", t0, 10s).value();
  auto pin = pool.acquire_lease(2, "(digest thread)", t0, 24h, SlotPool::Kind::kPin).value();
  auto newest_reader = pool.acquire_lease(3, "fast", t0, 10s).value();
  EXPECT_FALSE(pool.renew_lease(pin.id, t0, 1s)) << "pins are not reader leases";
  EXPECT_FALSE(pool.reserve_for_write(t0).has_value());
  EXPECT_EQ(pool.revoke_for_write(), 1u);
  EXPECT_EQ(pool.reserve_for_write(t0), reader.slot);
  auto ended = pool.take_expired(t0);
  ASSERT_EQ(ended.size(), 1u);
  EXPECT_EQ(ended[0].id, reader.id);
  EXPECT_FALSE(pool.renew_lease(reader.id, t0, 1s));
  EXPECT_TRUE(pool.renew_lease(newest_reader.id, t0, 1s));
  // Only the pinned slot and the newest are left besides the one being written: nothing to revoke.
  EXPECT_EQ(pool.revoke_for_write(), 0u);
  EXPECT_TRUE(pool.release_lease(pin.id));
}

// A transport may read a slot until each send from it reports its end, however the lease that
// posted them ended: the slot stays out of the writer's reach until then.
TEST(SlotPool, ALeaseEndedWhileSendingHoldsItsSlotUntilTheSendsEnd) {
  auto t0 = Clock::time_point{} + 1h;
  for (const char* how : {"lapse", "release", "revocation"}) {
    SCOPED_TRACE(how);
    SlotPool pool(2);
    const auto s1 = pool.reserve_for_write(t0).value();
    pool.mark_published(s1, 1);
    auto lease = pool.acquire_lease(1, "reader", t0, 10s).value();
    ASSERT_TRUE(pool.set_sending(lease.id, true));
    pool.mark_published(pool.reserve_for_write(t0).value(), 2);
    auto later = t0;
    if (std::string(how) == "lapse") {
      later = t0 + 11s;
      ASSERT_EQ(pool.take_expired(later).size(), 1u);
    } else if (std::string(how) == "release") {
      EXPECT_TRUE(pool.release_lease(lease.id));
    } else {
      EXPECT_EQ(pool.revoke_for_write(), 1u);
      ASSERT_EQ(pool.take_expired(t0).size(), 1u);
    }
    EXPECT_EQ(pool.draining(), 1u);
    EXPECT_FALSE(pool.reserve_for_write(later).has_value()) << "a slot with sends in flight was handed to a writer";
    EXPECT_EQ(pool.revoke_for_write(), 0u) << "revoking a draining slot frees nothing sooner";
    EXPECT_FALSE(pool.renew_lease(lease.id, later, 10s)) << "an ended lease came back";
    EXPECT_TRUE(pool.set_sending(lease.id, false));
    EXPECT_EQ(pool.draining(), 0u);
    EXPECT_EQ(pool.reserve_for_write(later), s1);
  }
}

TEST(SlotPool, ALeaseNoLongerSendingEndsAtOnceAndAnEndedOneCannotStartSending) {
  SlotPool pool(2);
  auto t0 = Clock::time_point{} + 1h;
  const auto s1 = pool.reserve_for_write(t0).value();
  pool.mark_published(s1, 1);
  auto lease = pool.acquire_lease(1, "reader", t0, 10s).value();
  ASSERT_TRUE(pool.set_sending(lease.id, true));
  ASSERT_TRUE(pool.set_sending(lease.id, false));  // every send reported its end before the ack
  pool.mark_published(pool.reserve_for_write(t0).value(), 2);
  EXPECT_TRUE(pool.release_lease(lease.id));
  EXPECT_EQ(pool.draining(), 0u);
  EXPECT_FALSE(pool.set_sending(lease.id, true)) << "sends may not start under an ended lease";
  EXPECT_EQ(pool.reserve_for_write(t0), s1);
}

// The writer's last resort when sends never report their end (UCX 1.13 and a dead peer on the
// same host): after `grace` from when it first needed the slot, it forgets the oldest draining
// slot's holds, never a leased one.
TEST(SlotPool, AWriterMayAbandonTheDrainOfTheOldestSlotOnlyAfterTheGrace) {
  SlotPool pool(3);
  auto t0 = Clock::time_point{} + 1h;
  const auto s1 = pool.reserve_for_write(t0).value();
  pool.mark_published(s1, 1);
  auto first = pool.acquire_lease(1, "a", t0, 10s).value();
  ASSERT_TRUE(pool.set_sending(first.id, true));
  const auto s2 = pool.reserve_for_write(t0).value();
  pool.mark_published(s2, 2);
  auto second = pool.acquire_lease(2, "b", t0, 10s).value();
  ASSERT_TRUE(pool.set_sending(second.id, true));
  pool.mark_published(pool.reserve_for_write(t0).value(), 3);
  EXPECT_TRUE(pool.release_lease(second.id));  // s2: draining; s1: still leased
  EXPECT_FALSE(pool.next_abandon().has_value()) << "the grace started before a writer needed the slot";
  EXPECT_EQ(pool.abandon_drain(t0, 1s), 0u) << "abandoned before its grace";
  EXPECT_EQ(pool.next_abandon(), t0 + 1s);
  EXPECT_EQ(pool.abandon_drain(t0 + 999ms, 1s), 0u) << "abandoned before its grace";
  EXPECT_EQ(pool.abandon_drain(t0 + 1s, 1s), 1u);
  EXPECT_EQ(pool.reserve_for_write(t0 + 1s), s2) << "the leased slot was taken, or the drained one was not freed";
  EXPECT_EQ(pool.abandon_drain(t0 + 1h, 1s), 0u) << "nothing else is held by ended leases alone";
}

}  // namespace
}  // namespace modelcast
