// The relay server's bookkeeping against a scripted transport whose send completions the test
// delivers by hand: an order of a producer's earlier run whose sends never end (a receiver that
// died on this host) does not take the completions of the new run's order with the same id.
#include "core/consumer/relay_server.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "core/model/manifest.h"

namespace modelcast::consumer {
namespace {

class ScriptedRegion : public transport::MemoryRegion {
 public:
  ScriptedRegion(void* base, std::size_t length) : base_(static_cast<std::byte*>(base)), length_(length) {}
  std::byte* base() const override { return base_; }
  std::size_t length() const override { return length_; }
  transport::MemoryLocation location() const override { return {}; }

 private:
  std::byte* base_;
  std::size_t length_;
};

// Sends are kept with their completions, which run when the test says; a cancel ends nothing
// (as a send to a dead receiver on one host under UCX 1.13).
class ScriptedTransport : public transport::Transport {
 public:
  std::string name() const override { return "scripted"; }
  transport::Capabilities capabilities() const override { return {}; }
  std::unique_ptr<transport::MemoryRegion> register_memory(void* base, std::size_t length,
                                                           transport::MemoryLocation) override {
    return std::make_unique<ScriptedRegion>(base, length);
  }
  std::vector<std::byte> address() const override { return {}; }
  transport::PeerId connect(std::span<const std::byte>, bool, transport::PeerFailure) override { return ++peers; }
  void disconnect(transport::PeerId) override { ++disconnects; }
  transport::TransferId post_send(transport::PeerId, const transport::MemoryRegion&, std::size_t, std::size_t,
                                  std::uint64_t, transport::Completion done) override {
    sends.push_back(std::move(done));
    return sends.size();
  }
  transport::TransferId post_recv(const transport::MemoryRegion&, std::size_t, std::size_t, std::uint64_t,
                                  transport::Completion) override {
    return 0;
  }
  std::vector<std::byte> export_region(const transport::MemoryRegion&) override { return {}; }
  std::unique_ptr<transport::RemoteRegion> import_region(transport::PeerId, std::span<const std::byte>) override {
    return nullptr;
  }
  transport::TransferId post_read(const transport::RemoteRegion&, std::size_t, const transport::MemoryRegion&, std::size_t,
                                  std::size_t, transport::Completion) override {
    return 0;
  }
  void cancel(transport::TransferId) override {}

  transport::PeerId peers = 0;
  std::size_t disconnects = 0;
  std::vector<transport::Completion> sends;  // in posting order
};

// A relay server over a scripted transport, one 256-byte buffer of two 128-byte blocks, every
// block ready; `completed` gets each send's completion as the service loop would.
class RelayServerTest : public ::testing::Test {
 protected:
  RelayServerTest() {
    buffer->transport = transport;
    buffer->memory = memory;
    buffer->region = transport->register_memory(memory.data(), memory.size(), {});
    manifest.total_bytes = memory.size();
    manifest.block_bytes = 128;
  }
  static BlockState ready(const detail::ReceiveBuffer&, std::uint32_t) { return BlockState::kReady; }
  // Order `id` of the producer's run 10 (its version and fetch numbered alike): block 0 to `receiver`.
  static protocol::RelayOrder order(std::uint64_t id, std::byte receiver) {
    protocol::RelayOrder o;
    o.incarnation = 10;
    o.order_id = id;
    o.version = id;
    o.fetch_id = id;
    o.block_bytes = 128;
    o.blocks = {0};
    o.peer_address = {receiver};
    return o;
  }
  std::shared_ptr<ScriptedTransport> transport = std::make_shared<ScriptedTransport>();
  std::vector<RelaySent> completed;
  std::vector<std::byte> memory = std::vector<std::byte>(256);
  std::shared_ptr<detail::ReceiveBuffer> buffer = std::make_shared<detail::ReceiveBuffer>();
  Manifest manifest;
  RelayServer relays{[this](const RelaySent& sent) { completed.push_back(sent); }};  // gone first
};

TEST_F(RelayServerTest, AnEarlierRunsOrderStillSendingDoesNotTakeTheCompletionsOfANewOrderWithItsId) {
  auto order = [](std::uint64_t incarnation) {
    protocol::RelayOrder o;
    o.incarnation = incarnation;
    o.order_id = 1;  // a producer's first order of each run
    o.version = 1;
    o.fetch_id = 7;
    o.block_bytes = 128;
    o.blocks = {0, 1};
    return o;
  };
  // The first run's order posts its two sends, which never complete; the producer restarts and
  // the consumer joins again (clear()).
  ASSERT_FALSE(relays.accept(order(10), buffer, manifest));
  EXPECT_TRUE(relays.pump(ready).empty());
  ASSERT_EQ(transport->sends.size(), 2u);
  relays.clear();
  EXPECT_EQ(relays.draining(), 1u);

  // The new run's order 1: its two sends complete, and with them the order.
  ASSERT_FALSE(relays.accept(order(20), buffer, manifest));
  EXPECT_TRUE(relays.pump(ready).empty());
  ASSERT_EQ(transport->sends.size(), 4u);
  for (std::size_t i = 2; i < 4; ++i) {
    transport->sends[i]({true, ""});
    auto [bytes, failed] = relays.on_sent(completed.back());
    EXPECT_EQ(bytes, 128u);
    EXPECT_FALSE(failed);
  }
  EXPECT_EQ(relays.orders(), 0u) << "the new order still waits for sends that completed";
  EXPECT_EQ(relays.draining(), 1u) << "the earlier run's order, whose sends are still posted";

  // The earlier run's sends end at last (or are given up): nothing is left.
  for (std::size_t i = 0; i < 2; ++i) {
    transport->sends[i]({false, "cancelled"});
    relays.on_sent(completed.back());
  }
  EXPECT_EQ(relays.draining(), 0u);
}

// A send that fails after its order was cancelled says the connection may be gone, as one of a
// live order does: the next order to that receiver connects afresh instead of failing on it. A
// live order on that connection keeps it (a cancel may end a send with a failure of its own).
TEST_F(RelayServerTest, ASendFailingAfterItsOrderWasCancelledDropsTheConnectionToItsReceiver) {
  const auto order = [](std::uint64_t id) { return RelayServerTest::order(id, std::byte{1}); };  // one receiver throughout
  ASSERT_FALSE(relays.accept(order(1), buffer, manifest));
  relays.pump(ready);
  relays.cancel(1);  // the receiver's fetch ended; its send is still posted
  ASSERT_FALSE(relays.accept(order(2), buffer, manifest));
  EXPECT_EQ(transport->peers, 1u) << "the live connection is reused";
  transport->sends[0]({false, "cancelled"});
  relays.on_sent(completed.back());
  EXPECT_EQ(transport->disconnects, 0u) << "a connection a live order uses was let go";
  relays.pump(ready);  // order 2's send, then its receiver's fetch ends too
  relays.cancel(2);
  transport->sends[1]({false, "connection reset"});
  relays.on_sent(completed.back());
  EXPECT_EQ(transport->disconnects, 1u);
  ASSERT_FALSE(relays.accept(order(3), buffer, manifest));
  EXPECT_EQ(transport->peers, 2u) << "an order after the failed send connected through the failed connection";
}

// A relay serving receivers that come and go (restarted servers) keeps connections only to the
// few it was ordered to most recently, besides those an order still uses: it kept one for every
// receiver it ever served (an endpoint each, and over TCP a socket).
TEST_F(RelayServerTest, ConnectionsToReceiversNoLongerOrderedAreClosedBeyondAFew) {
  // Receiver 0 is ordered again every fourth order, so it stays among the most recent; one
  // order to receiver 99 never completes, so its connection stays in use throughout.
  ASSERT_FALSE(relays.accept(order(1000, std::byte{99}), buffer, manifest));
  relays.pump(ready);
  std::uint64_t id = 1;
  for (int r = 1; r <= 40; ++r) {
    const std::byte receiver = r % 4 == 0 ? std::byte{0} : static_cast<std::byte>(r);
    ASSERT_FALSE(relays.accept(order(id, receiver), buffer, manifest));
    relays.pump(ready);
    transport->sends.back()({true, ""});
    relays.on_sent(completed.back());
    ++id;
  }
  EXPECT_EQ(relays.orders(), 1u) << "only the order to receiver 99 is left";
  // 31 receivers besides 0 and 99 were connected to; all but the newest few were closed.
  EXPECT_EQ(transport->peers, 32u);
  EXPECT_EQ(transport->peers - transport->disconnects, 8u) << "connections kept to receivers served once, long ago";
  // The connections kept are the ones in use and the most recent: neither is made again.
  ASSERT_FALSE(relays.accept(order(id++, std::byte{0}), buffer, manifest));
  ASSERT_FALSE(relays.accept(order(id++, std::byte{39}), buffer, manifest));
  EXPECT_EQ(transport->peers, 32u) << "a recent receiver was reconnected";
  // Receiver 99's first order is still sending on its connection: a second order reuses it.
  ASSERT_FALSE(relays.accept(order(id++, std::byte{99}), buffer, manifest));
  EXPECT_EQ(transport->peers, 32u) << "the connection a live order uses was closed";

  // Receivers on this host (no failure detection) are kept whatever their number: a close frees
  // nothing there (UCX keeps the endpoint until its worker goes), and a reconnection costs one more.
  const std::size_t closed = transport->disconnects;
  for (int r = 100; r < 120; ++r) {
    auto near = order(id++, static_cast<std::byte>(r));
    near.detect_failure = false;
    ASSERT_FALSE(relays.accept(near, buffer, manifest));
    relays.pump(ready);
    transport->sends.back()({true, ""});
    relays.on_sent(completed.back());
  }
  EXPECT_EQ(transport->disconnects, closed) << "a connection to a receiver on this host was closed";
  EXPECT_EQ(transport->peers, 52u);
}

}  // namespace
}  // namespace modelcast::consumer
