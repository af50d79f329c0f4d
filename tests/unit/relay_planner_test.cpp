// RelayPlanner: which consumer serves a fetch. Chains form as consumers ask one after another;
// a relay's load is capped at the fan-out; complete holders are preferred; a relay that failed
// is passed over for a while and the consumer it failed is served by the producer.
#include <gtest/gtest.h>

#include "core/producer/relay_planner.h"

namespace {

using modelcast::producer::RelayPlanner;
using Clock = RelayPlanner::Clock;

// Consumers "a".."h" that serve peers over transport 0.
RelayPlanner planner_with(std::size_t fanout, int consumers) {
  RelayPlanner planner(fanout);
  for (int i = 0; i < consumers; ++i) {
    std::string id(1, static_cast<char>('a' + i));
    planner.joined(id, "consumer-" + id, "host", 0, true, 0);
  }
  return planner;
}

// What start() does: choose, then record the fetch.
std::optional<std::string> fetch(RelayPlanner& planner, const std::string& id, std::uint64_t version,
                                 Clock::time_point now) {
  auto relay = planner.choose(id, version, now);
  if (relay) planner.assigned(*relay);
  planner.receiving(id, version, now);
  return relay;
}

TEST(RelayPlanner, ConsumersAskingInTurnFormAChainBehindTheProducer) {
  auto planner = planner_with(1, 5);
  auto t = Clock::now();
  EXPECT_EQ(fetch(planner, "a", 1, t), std::nullopt);  // nobody holds it: the producer
  EXPECT_EQ(fetch(planner, "b", 1, t + std::chrono::milliseconds(1)), "a");
  EXPECT_EQ(fetch(planner, "c", 1, t + std::chrono::milliseconds(2)), "b");
  EXPECT_EQ(fetch(planner, "d", 1, t + std::chrono::milliseconds(3)), "c");
  EXPECT_EQ(planner.load("a"), 1u);
  EXPECT_EQ(planner.load("d"), 0u);
}

TEST(RelayPlanner, TheFanoutCapsEachRelayAndTheProducerServesTheRest) {
  auto planner = planner_with(2, 4);
  auto t = Clock::now();
  planner.receiving("a", 1, t);
  planner.delivered("a", 1);
  EXPECT_EQ(fetch(planner, "b", 1, t), "a");
  // b is receiving with no load, a is complete with one: the least loaded first.
  EXPECT_EQ(fetch(planner, "c", 1, t + std::chrono::milliseconds(1)), "b");
  planner.released("a");
  planner.released("b");
  // Equal loads: the complete holder before one still receiving.
  EXPECT_EQ(planner.choose("d", 1, t + std::chrono::milliseconds(2)), "a");
  // Nobody under the cap: the producer.
  for (const char* relay : {"a", "a", "b", "b", "c", "c"}) planner.assigned(relay);
  EXPECT_EQ(planner.choose("d", 1, t), std::nullopt);
}

TEST(RelayPlanner, OnlyHoldersOfTheVersionOverTheSameTransportThatServe) {
  RelayPlanner planner(1);
  auto t = Clock::now();
  planner.joined("declines", "d", "host", 0, false, 0);
  planner.joined("other-transport", "o", "host", 0, true, 1);
  planner.joined("old", "x", "host", 0, true, 0);
  planner.joined("asker", "a", "host", 0, true, 0);
  for (const char* id : {"declines", "other-transport"}) {
    planner.receiving(id, 2, t);
    planner.delivered(id, 2);
  }
  planner.receiving("old", 1, t);
  planner.delivered("old", 1);
  EXPECT_EQ(planner.choose("asker", 2, t), std::nullopt);
  EXPECT_EQ(planner.choose("asker", 1, t), "old");
  planner.lost("old");
  EXPECT_EQ(planner.choose("asker", 1, t), std::nullopt);
  EXPECT_FALSE(RelayPlanner(0).enabled());
}

TEST(RelayPlanner, AFailedRelayIsPassedOverForAWhileAndItsConsumerServedDirectly) {
  auto planner = planner_with(1, 3);
  auto t = Clock::now();
  planner.receiving("a", 1, t);
  planner.delivered("a", 1);
  ASSERT_EQ(fetch(planner, "b", 1, t), "a");
  // What the producer does on b's ack saying its relay failed it.
  planner.released("a");
  planner.lost("b");
  planner.failed("a", "b", 1, t);
  EXPECT_EQ(planner.choose("b", 1, t), std::nullopt);  // b: from the producer
  EXPECT_EQ(planner.choose("c", 1, t), std::nullopt);  // a is passed over
  EXPECT_EQ(planner.choose("c", 1, t + RelayPlanner::kDistrustFor + std::chrono::seconds(1)), "a");
  planner.forget("a");
  EXPECT_EQ(planner.choose("c", 1, t + RelayPlanner::kDistrustFor + std::chrono::seconds(1)), std::nullopt);
}

TEST(RelayPlanner, AStallIsBlamedOnARelayThatHeldTheVersionNotOnOneStillReceiving) {
  auto planner = planner_with(1, 5);
  auto t = Clock::now();
  // a <- producer, b <- a, c <- b: a stops; b and c both stall.
  ASSERT_EQ(fetch(planner, "a", 1, t), std::nullopt);
  ASSERT_EQ(fetch(planner, "b", 1, t), "a");
  ASSERT_EQ(fetch(planner, "c", 1, t), "b");
  planner.released("b");
  planner.lost("c");
  planner.failed("b", "c", 1, t, /*stalled=*/true);  // b was starved by a: not passed over
  planner.released("a");
  planner.lost("b");
  planner.failed("a", "b", 1, t, /*stalled=*/true);  // a was still receiving too
  planner.receiving("b", 2, t);
  EXPECT_EQ(planner.choose("d", 2, t), "b");
  // A relay holding the whole version that stalls, or any relay that sends a bad block, is.
  planner.delivered("b", 2);
  planner.failed("b", "d", 2, t, /*stalled=*/true);
  EXPECT_EQ(planner.choose("c", 2, t), std::nullopt);
  planner.receiving("a", 2, t);
  EXPECT_EQ(planner.choose("e", 2, t), "a");
  planner.failed("a", "c", 2, t, /*stalled=*/false);
  EXPECT_EQ(planner.choose("e", 2, t + std::chrono::seconds(1)), std::nullopt);
}

}  // namespace

// A reader of a relay's buffer (CUDA IPC) cannot tell which blocks are in, and reaches only its
// own machine: it is given a complete holder on its host, never one still receiving or elsewhere.
TEST(RelayPlanner, AReaderOfARelaysBufferGetsOnlyACompleteHolderOnItsOwnHost) {
  RelayPlanner planner(2);
  planner.joined("receiving", "receiving", "host-a", 0, true, 0);
  planner.joined("elsewhere", "elsewhere", "host-b", 0, true, 0);
  planner.joined("reader", "reader", "host-a", 0, true, 0);
  auto t = Clock::now();
  planner.receiving("receiving", 1, t);
  planner.delivered("elsewhere", 1);
  EXPECT_EQ(planner.choose("reader", 1, t, true), std::nullopt);
  // Over a route that sends, both would do (the one receiving last is the tail of the chain).
  EXPECT_TRUE(planner.choose("reader", 1, t, false).has_value());
  planner.delivered("receiving", 1);
  EXPECT_EQ(planner.choose("reader", 1, t, true), "receiving");
}

// Nor a holder in its own process (two consumers of one inference server): CUDA IPC cannot open
// a handle the same process exported, so every read failed and the holder was distrusted. A
// route that sends may still pair them.
TEST(RelayPlanner, AReaderOfARelaysBufferIsNeverGivenAHolderInItsOwnProcess) {
  RelayPlanner planner(2);
  planner.joined("sibling", "sibling", "host-a", 7, true, 0);
  planner.joined("reader", "reader", "host-a", 7, true, 0);
  planner.delivered("sibling", 1);
  auto t = Clock::now();
  EXPECT_EQ(planner.choose("reader", 1, t, true), std::nullopt);
  EXPECT_EQ(planner.choose("reader", 1, t, false), "sibling");
  planner.joined("neighbour", "neighbour", "host-a", 8, true, 0);
  planner.delivered("neighbour", 1);
  EXPECT_EQ(planner.choose("reader", 1, t, true), "neighbour");
}
