// Consumers that relay (ProducerOptions::relay_fanout), across processes: eight consumers get
// every version bit-exact while the producer sends each block about once; a relay whose
// memory went bad is caught, routed around and reported; a relay that stalls, and one killed
// mid-version, cost the others a retry, never a version. Every byte of every installed version
// is checked against its content (tests/support/test_model.h), readers holding views throughout.
#include <gtest/gtest.h>

#include <signal.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "process_status.h"
#include "child_process.h"
#include "eventually.h"
#include "test_model.h"

namespace {

// A consumer's name: `prefix` then `i`. Appended, not "c" + std::string: gcc 12 warns falsely
// (-Wrestrict) on that once inlined.
std::string numbered(const char* prefix, int i) {
  std::string name = prefix;
  name += std::to_string(i);
  return name;
}

using testing_support::ChildProcess;
using testing_support::joined_lines;

// "name value" lines a consumer prints when it is done.
std::uint64_t reported(const ChildProcess& consumer, const std::string& name) {
  for (const auto& line : consumer.lines()) {
    if (line.rfind(name + " ", 0) == 0) return std::stoull(line.substr(name.size() + 1));
  }
  return 0;
}

// The producer's "stats k=v k=v ..." line as a map.
std::map<std::string, std::uint64_t> producer_stats(ChildProcess& producer) {
  std::map<std::string, std::uint64_t> out;
  auto line = producer.ask("stats", "stats ");
  if (!line) return out;
  std::istringstream words(line->substr(6));
  std::string word;
  while (words >> word) {
    auto eq = word.find('=');
    if (eq != std::string::npos) out[word.substr(0, eq)] = std::stoull(word.substr(eq + 1));
  }
  return out;
}

// The producer's stats once it has counted `deliveries` acks. A consumer prints "installed V"
// while its ack is still on the way, so stats read at that moment may lack its last delivery
// (and the bytes it carried).
std::map<std::string, std::uint64_t> producer_stats_after(ChildProcess& producer, std::uint64_t deliveries) {
  std::map<std::string, std::uint64_t> out;
  testing_support::eventually([&] {
    out = producer_stats(producer);
    return out["deliveries"] >= deliveries;
  });
  return out;
}

class Relays : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("UCX_NET_DEVICES", "lo", 1);
    unsetenv("UCX_TLS");
  }
  // 64 KiB blocks, chains of relays (fan-out 1).
  void start_producer(std::size_t kib, int change_pct, std::vector<std::string> extra = {}) {
    kib_ = kib;
    change_pct_ = change_pct;
    std::vector<std::string> argv{MODELCAST_TEST_PEER, "producer", "--endpoint", "tcp://127.0.0.1:0", "--versions",
                                  "0", "--kib", std::to_string(kib), "--chunk-kib", "64", "--change-pct",
                                  std::to_string(change_pct), "--relay-fanout", "1"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    producer_ = std::make_unique<ChildProcess>(argv);
    auto ready = producer_->wait_for_line("ready ");
    ASSERT_TRUE(ready);
    endpoint_ = ready->substr(6);
  }
  std::unique_ptr<ChildProcess> consumer(const std::string& name, std::uint64_t until, std::vector<std::string> extra) {
    std::vector<std::string> argv{MODELCAST_TEST_PEER, "consumer", "--endpoint", endpoint_, "--name", name,
                                  "--until-version", std::to_string(until), "--change-pct", std::to_string(change_pct_),
                                  "--linger"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return std::make_unique<ChildProcess>(argv);
  }
  void publish(std::uint64_t v) { ASSERT_TRUE(producer_->ask("publish", "published " + std::to_string(v))); }
  static void expect_installed(ChildProcess& c, std::uint64_t v) {
    EXPECT_TRUE(c.wait_for_line("installed " + std::to_string(v), std::chrono::seconds(60)))
        << "version " << v << " not installed:\n" << joined_lines(c);
  }
  // Lets a lingering consumer exit, and checks it saw only whole, correct versions.
  static void expect_clean_exit(ChildProcess& c) {
    c.close_stdin();
    EXPECT_EQ(c.wait(), 0) << joined_lines(c);
    for (const auto& line : c.lines()) {
      EXPECT_NE(line.rfind("corrupt", 0), 0u) << line;
      EXPECT_NE(line.rfind("torn", 0), 0u) << line;
    }
  }

  std::unique_ptr<ChildProcess> producer_;
  std::string endpoint_;
  std::size_t kib_ = 0;
  int change_pct_ = 100;
};

TEST_F(Relays, EightConsumersGetEveryVersionBitExactWhileTheProducerSendsEachBlockAboutOnce) {
  constexpr std::uint64_t kLast = 6;
  start_producer(4096, 25);
  std::vector<std::unique_ptr<ChildProcess>> consumers;
  for (int i = 0; i < 8; ++i) {
    // Two hold views in reader threads as an inference server would (more would crowd 2 cores).
    std::vector<std::string> extra;
    if (i < 2) extra = {"--readers", "1"};
    consumers.push_back(consumer(numbered("c", i), kLast, extra));
  }
  for (std::uint64_t v = 1; v <= kLast; ++v) {
    publish(v);
    for (auto& c : consumers) expect_installed(*c, v);
  }
  auto stats = producer_stats_after(*producer_, 8 * kLast);
  EXPECT_EQ(stats["deliveries"], 8 * kLast);
  // A relay counts its bytes when its sends end, which may be after its receiver's ack.
  auto relayed_now = [&] {
    std::uint64_t sum = 0;
    for (auto& c : consumers) {
      auto line = c->ask("stats", "relay-stats bytes_relayed=");
      if (line) sum += std::stoull(line->substr(line->find('=') + 1));
    }
    return sum;
  };
  EXPECT_TRUE(testing_support::eventually([&] { return relayed_now() == stats["bytes_relayed"]; }))
      << "the relays counted " << relayed_now() << " bytes, the producer " << stats["bytes_relayed"];
  for (auto& c : consumers) expect_clean_exit(*c);
  // Without relays the producer sends 8 models a version (less the unchanged blocks of deltas).
  // With them it sends about one: at most two is the bound the design promises.
  const double model = kib_ * 1024.0;
  const double producer_models_per_version = static_cast<double>(stats["bytes_sent"]) / model / kLast;
  EXPECT_LE(producer_models_per_version, 2.0) << "bytes_sent " << stats["bytes_sent"];
  EXPECT_GE(stats["relayed_deliveries"], 8u * kLast / 2) << "relayed " << stats["relayed_deliveries"];
  EXPECT_EQ(stats["relay_faults"], 0u);
  std::uint64_t relayed_by_consumers = 0;
  for (auto& c : consumers) relayed_by_consumers += reported(*c, "bytes_relayed");
  EXPECT_GT(relayed_by_consumers, 0u);
  // The consumers' count includes relayed fetches that were later withdrawn (none here), the
  // producer's only deliveries: equal when nothing failed.
  EXPECT_EQ(relayed_by_consumers, stats["bytes_relayed"]);
}

// A version that changes nothing costs its manifest: a relay ordered to serve it has no block
// to send, and the order must still end (it holds the buffer the version is in: a relay that
// kept such orders ran out of receive buffers after a few versions and stopped for good).
TEST_F(Relays, VersionsThatChangeNothingKeepFlowingThroughRelays) {
  constexpr std::uint64_t kLast = 10;
  start_producer(1024, 0);
  std::vector<std::unique_ptr<ChildProcess>> consumers;
  for (int i = 0; i < 3; ++i) consumers.push_back(consumer(numbered("c", i), kLast, {}));
  for (std::uint64_t v = 1; v <= kLast; ++v) {
    publish(v);
    for (auto& c : consumers) expect_installed(*c, v);
  }
  EXPECT_GE(producer_stats_after(*producer_, 3 * kLast)["relayed_deliveries"], 1u)
      << "no relay was used: the test shows nothing";
  for (auto& c : consumers) expect_clean_exit(*c);
}

// Group members relay the version they hold verified until their group switches, as they do an
// installed one: its buffer is no longer being fetched into, and must not be taken for a fetch
// that ended without its blocks (which withdrew the fetches it served).
TEST_F(Relays, GroupMembersServeTheVersionTheyHoldForTheirGroup) {
  constexpr std::uint64_t kLast = 6;
  start_producer(1024, 25);
  std::vector<std::unique_ptr<ChildProcess>> consumers;
  for (int i = 0; i < 2; ++i) {
    consumers.push_back(consumer(numbered("g", i), kLast, {"--group", "tp", "--group-size", "2"}));
  }
  for (int i = 0; i < 2; ++i) consumers.push_back(consumer(numbered("c", i), kLast, {}));
  for (std::uint64_t v = 1; v <= kLast; ++v) {
    publish(v);
    for (auto& c : consumers) expect_installed(*c, v);
  }
  auto stats = producer_stats_after(*producer_, 4 * kLast);
  EXPECT_GE(stats["relayed_deliveries"], 1u) << "no relay was used: the test shows nothing";
  for (auto& c : consumers) {
    expect_clean_exit(*c);
    EXPECT_EQ(reported(*c, "transfers_aborted"), 0u) << joined_lines(*c);
  }
}

TEST_F(Relays, ARelaySendingBadBytesIsCaughtRoutedAroundAndReported) {
  start_producer(1024, 100);
  // Verifies version 1, installs it, then its copy goes bad in memory.
  auto bad = consumer("bad", 1, {"--corrupt-after", "1"});
  publish(1);
  ASSERT_TRUE(bad->wait_for_line("corrupted 1")) << joined_lines(*bad);
  // Joins late: the only holder of version 1 besides the producer is the bad relay.
  auto good = consumer("good", 1, {"--readers", "1", "--transfer-timeout-ms", "5000"});
  expect_installed(*good, 1);
  expect_clean_exit(*good);
  EXPECT_EQ(reported(*good, "relay_faults"), 1u) << joined_lines(*good);
  // The good consumer's ack follows the one that reported the fault, on the same connection.
  auto stats = producer_stats_after(*producer_, 2);
  EXPECT_EQ(stats["relay_faults"], 1u);
  EXPECT_EQ(stats["relayed_deliveries"], 0u);
  bad->close_stdin();
}

TEST_F(Relays, ARelayThatStallsIsLeftAfterTheTransferTimeout) {
  start_producer(1024, 100);
  auto stalled = consumer("stalled", 1, {});
  publish(1);
  expect_installed(*stalled, 1);
  // Stopped, it still counts as a holder of version 1 until the producer finds it silent (5 s).
  ASSERT_TRUE(testing_support::stop_process(stalled->pid()));
  auto late = consumer("late", 1, {"--readers", "1", "--transfer-timeout-ms", "1000"});
  expect_installed(*late, 1);
  ::kill(stalled->pid(), SIGCONT);
  expect_clean_exit(*late);
  EXPECT_EQ(reported(*late, "relay_faults"), 1u) << joined_lines(*late);
  EXPECT_EQ(producer_stats_after(*producer_, 2)["relay_faults"], 1u);
  stalled->close_stdin();
}

// Killed, a relay's control connection closes, and the producer drops it then: the fetch it was
// to serve is withdrawn (or, if the kill comes first, never given to it), rather than waiting
// for its silence (here a minute: the lease timeout) or for the receiver to give up (a minute
// too). Stopped first, so that it cannot serve the fetch before it dies.
TEST_F(Relays, ARelayKilledIsLeftWhenItsConnectionClosesNotAfterItsSilence) {
  start_producer(1024, 100, {"--lease-timeout-ms", "60000"});
  auto relay = consumer("relay", 1, {});
  publish(1);
  expect_installed(*relay, 1);
  // Acked: the one lease is the late consumer's, if the producer serves it itself.
  ASSERT_TRUE(testing_support::eventually([&] { return producer_stats(*producer_)["fetches_in_flight"] == 0; }));
  ASSERT_TRUE(testing_support::stop_process(relay->pid()));
  auto late = consumer("late", 1, {"--transfer-timeout-ms", "60000"});
  // Joined, it fetches at once, and the producer gives the stopped relay that fetch to serve:
  // a fetch in flight, though the producer holds no lease for it (it counted none).
  ASSERT_TRUE(late->wait_for_line("joined"));
  EXPECT_TRUE(testing_support::eventually([&] { return producer_stats(*producer_)["fetches_in_flight"] == 1; }));
  relay->kill_now();
  EXPECT_EQ(relay->wait(), 128 + SIGKILL);
  EXPECT_TRUE(late->wait_for_line("installed 1", std::chrono::seconds(20)))
      << "not installed 20 s after its relay was killed:\n" << joined_lines(*late);
  expect_clean_exit(*late);
  EXPECT_EQ(reported(*late, "relay_faults"), 0u) << "the late consumer timed the relay out: " << joined_lines(*late);
  // The late consumer has left (its Leave, handled by the producer's own thread, may lag).
  EXPECT_TRUE(testing_support::eventually([&] { return producer_stats(*producer_)["consumers"] == 0; }));
  auto stats = producer_stats(*producer_);
  EXPECT_EQ(stats["relay_faults"], 0u);
  EXPECT_EQ(stats["relayed_deliveries"], 0u);
}

TEST_F(Relays, ARelayKilledMidVersionCostsTheOthersARetryNotAVersion) {
  constexpr std::uint64_t kLast = 4;
  // 16 MiB in 256 blocks: a version takes long enough down the chain to be cut.
  start_producer(16384, 100);
  std::vector<std::unique_ptr<ChildProcess>> consumers;
  for (int i = 0; i < 4; ++i) {
    consumers.push_back(consumer(numbered("c", i), kLast, {"--transfer-timeout-ms", "1000"}));
  }
  publish(1);
  for (auto& c : consumers) expect_installed(*c, 1);
  // The consumer that fetched first relays to the next: the first to be answered is usually
  // c0 or c1; whichever role the killed one had, the others must still get every version.
  publish(2);
  consumers[1]->kill_now();
  for (std::size_t i : {0u, 2u, 3u}) expect_installed(*consumers[i], 2);
  for (std::uint64_t v = 3; v <= kLast; ++v) {
    publish(v);
    for (std::size_t i : {0u, 2u, 3u}) expect_installed(*consumers[i], v);
  }
  for (std::size_t i : {0u, 2u, 3u}) expect_clean_exit(*consumers[i]);
}

}  // namespace
