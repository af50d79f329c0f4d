// VersionStore: which receive buffer a version lands in, how many there are, and the swap readers
// see; over the loopback transport (registration only: nothing is sent).
#include <chrono>
#include <future>
#include <memory>
#include <thread>

#include <gtest/gtest.h>

#include "common/host_buffer.h"
#include "core/consumer/version_store.h"
#include "transports/loopback/loopback_transport.h"

namespace modelcast::consumer {
namespace {

using namespace std::chrono_literals;

// Caller buffers (modelcastd's shared memory): a relay's sends from one were given up (a peer on
// this host died), then the consumer joined afresh over a new transport. The buffer was kept
// for those sends and never handed out again: the caller's memory cannot be replaced by a new
// allocation, so each such event lost a buffer for good, until updates stopped.
TEST(VersionStore, ACallerBufferKeptForGivenUpSendsIsUsedAgainAfterAReconnect) {
  constexpr std::size_t kBytes = 1 << 16;
  HostBuffer a(kBytes), b(kBytes);
  VersionStore store(0, {a.span(), b.span()});
  store.use_transport(transport::make_loopback_transport());
  auto held_a = store.take_buffer(kBytes);  // a version relayed from A, its sends then given up
  auto held_b = store.take_buffer(kBytes);  // the next, installed in B and read
  ASSERT_TRUE(held_a && held_b);
  ASSERT_EQ(held_a->memory.data(), a.data());
  ASSERT_EQ(held_b->memory.data(), b.data());
  held_a->sends_given_up = 1;
  held_a.reset();
  store.use_transport(transport::make_loopback_transport());
  EXPECT_TRUE(store.buffer_available());
  auto next = store.take_buffer(kBytes);
  ASSERT_TRUE(next) << "caller buffer A, held only for sends given up, was never handed out again";
  EXPECT_EQ(next->memory.data(), a.data());
  EXPECT_NE(next->transport.get(), held_b->transport.get()) << "registered with the new transport";
  EXPECT_EQ(store.take_buffer(kBytes), nullptr) << "B is still read";
}

// A relay order's sends given up (a receiver on this host that died or left) after the consumer
// joined afresh: the pool had retired the buffer before it was marked, so the order was its last
// holder, and letting go released its registration under sends UCX still had posted.
TEST(VersionStore, ABufferWhoseSendsAreGivenUpAfterItsTransportRetiredStaysRegistered) {
  constexpr std::uint64_t kBytes = 1 << 16;
  VersionStore store(2, {});
  store.use_transport(transport::make_loopback_transport());
  auto relayed = store.take_buffer(kBytes);  // a relay order sends from it
  ASSERT_TRUE(relayed);
  store.use_transport(transport::make_loopback_transport());
  relayed->sends_given_up = 1;
  store.keep_for_sends(relayed);
  std::weak_ptr<detail::ReceiveBuffer> watched = relayed;
  relayed.reset();  // the order lets go of it
  EXPECT_FALSE(watched.expired());
}

// A buffer set aside (its receives stuck) whose relay sends were then given up: kept for good,
// it still counted among those set aside, and after `buffers` such events no buffer could be set
// aside again: every stuck receive then held updates back until a reconnect.
TEST(VersionStore, ABufferKeptForSendsAfterBeingSetAsideFreesItsSetAsidePlace) {
  constexpr std::uint64_t kBytes = 1 << 16;
  VersionStore store(2, {});
  store.use_transport(transport::make_loopback_transport());
  for (int event = 0; event < 2; ++event) {
    auto receiving = store.take_buffer(kBytes);  // stuck receives hold it, and a relay order
    ASSERT_TRUE(receiving);
    auto order = receiving;
    ASSERT_TRUE(store.set_aside(receiving));
    order->sends_given_up = 1;
    store.keep_for_sends(order);
  }
  auto stuck = store.take_buffer(kBytes);
  ASSERT_TRUE(stuck);
  EXPECT_TRUE(store.set_aside(stuck)) << "the buffers kept for sends took every set-aside place";
}

// Two buffers: a small version, a larger one, then the buffer made ahead for the next larger one.
// Taking it left the free small buffer in the pool: three buffers held memory at once, and with
// sizes steady after that, the small one stayed for good.
TEST(VersionStore, TheBufferMadeAheadNeverTakesTheCountPastTheBuffersAllowed) {
  constexpr std::uint64_t kSmall = 1 << 16, kLarge = 3 << 15;
  VersionStore store(2, {});
  store.use_transport(transport::make_loopback_transport());
  auto small = store.take_buffer(kSmall);
  auto installed = store.take_buffer(kLarge);
  ASSERT_TRUE(small && installed);
  small.reset();
  store.allocate_ahead(kLarge, 1ull << 40);
  auto next = store.take_buffer(kLarge);
  ASSERT_TRUE(next);
  EXPECT_EQ(store.take_buffer(kSmall), nullptr) << "a third buffer: the small one was kept beside the two";
}

// The version a new one replaces is let go outside the lock readers take: as its last holder the
// store unmapped and deregistered a model's worth of memory there, and every acquire() waited.
TEST(VersionStore, TheVersionReplacedIsLetGoOutsideTheLockReadersTake) {
  VersionStore store(2, {});
  std::future<void> reader;
  bool reader_waited = false;
  auto first = std::shared_ptr<const detail::InstalledVersion>(new detail::InstalledVersion, [&](const detail::InstalledVersion* v) {
    reader = std::async(std::launch::async, [&] { (void)store.acquire(); });
    reader_waited = reader.wait_for(10s) != std::future_status::ready;
    delete v;
  });
  store.install(std::move(first));
  store.install(std::make_shared<detail::InstalledVersion>());
  reader.wait();
  EXPECT_FALSE(reader_waited) << "acquire() waited while the replaced version was let go";
}

}  // namespace
}  // namespace modelcast::consumer
