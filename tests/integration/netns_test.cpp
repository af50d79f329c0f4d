// Across two "hosts": producer and consumer in two network namespaces joined by a veth pair,
// so the data must cross a network device (UCX over TCP), not shared memory or loopback.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "child_process.h"
#include "modelcast/keys.h"

namespace {

using testing_support::ChildProcess;

int run(const std::string& command) { return std::system((command + " >/dev/null 2>&1").c_str()); }

class TwoHosts : public ::testing::Test {
 protected:
  void SetUp() override {
    auto tag = std::to_string(getpid() % 100000);
    ns_a_ = "mc-a-" + tag;
    ns_b_ = "mc-b-" + tag;
    dev_a_ = "mca" + tag;
    dev_b_ = "mcb" + tag;
    if (geteuid() != 0 || run("ip netns add " + ns_a_) != 0) {
      GTEST_SKIP() << "cannot create network namespaces here (needs root and iproute2's 'ip netns'); "
                      "the two-host test did not run";
    }
    created_ = true;
    bool ok = run("ip netns add " + ns_b_) == 0 &&
              run("ip link add " + dev_a_ + " netns " + ns_a_ + " type veth peer name " + dev_b_ + " netns " + ns_b_) == 0 &&
              run("ip -n " + ns_a_ + " addr add 10.231.0.1/24 dev " + dev_a_) == 0 &&
              run("ip -n " + ns_b_ + " addr add 10.231.0.2/24 dev " + dev_b_) == 0 &&
              run("ip -n " + ns_a_ + " link set " + dev_a_ + " up") == 0 &&
              run("ip -n " + ns_b_ + " link set " + dev_b_ + " up") == 0 &&
              run("ip -n " + ns_a_ + " link set lo up") == 0 && run("ip -n " + ns_b_ + " link set lo up") == 0;
    if (!ok) GTEST_SKIP() << "network namespaces could be made but not joined with a veth pair; skipped";
    // A veth end reports carrier a moment after both are up; UCX ignores devices without one
    // when it starts, so wait (bounded) until both ends are running.
    auto running = [&](const std::string& ns, const std::string& dev) {
      return run("ip -n " + ns + " link show " + dev + " | grep -q 'state UP'") == 0;
    };
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!(running(ns_a_, dev_a_) && running(ns_b_, dev_b_)) && std::chrono::steady_clock::now() < deadline) {
    }
    ASSERT_TRUE(running(ns_a_, dev_a_) && running(ns_b_, dev_b_)) << "veth pair never came up";
  }
  void TearDown() override {
    if (created_) {
      run("ip netns del " + ns_a_);
      run("ip netns del " + ns_b_);
    }
  }
  // Key pairs for a producer and a consumer that admit each other, saved in a scratch directory
  // (the control endpoints are reachable from the other namespace: plaintext is refused there).
  struct PeerKeys {
    std::filesystem::path dir;
    modelcast::KeyPair producer, consumer;
    ~PeerKeys() { std::filesystem::remove_all(dir); }
  };
  static std::unique_ptr<PeerKeys> make_keys() {
    auto keys = std::make_unique<PeerKeys>();
    keys->dir = std::filesystem::temp_directory_path() / ("modelcast-netns-keys-" + std::to_string(getpid()));
    std::filesystem::create_directories(keys->dir);
    keys->producer = modelcast::generate_key_pair();
    keys->consumer = modelcast::generate_key_pair();
    modelcast::save_key_pair(keys->producer, (keys->dir / "producer.key").string(), true);
    modelcast::save_key_pair(keys->consumer, (keys->dir / "consumer.key").string(), true);
    return keys;
  }
  std::string ns_a_, ns_b_, dev_a_, dev_b_;
  bool created_ = false;
};

// Across hosts the control plane is CurveZMQ and versions are signed: each side has a key
// file, the producer admits the consumer's key and the consumer pins the producer's.
TEST_F(TwoHosts, VersionsCrossAVethPairBitExact) {
  const auto keys = make_keys();
  const auto& dir = keys->dir;
  ChildProcess producer({"/usr/bin/env", "ip", "netns", "exec", ns_a_, MODELCAST_TEST_PEER, "producer", "--endpoint",
                         "tcp://10.231.0.1:0", "--versions", "4", "--kib", "4096", "--wait-consumers", "1",
                         "--key-file", (dir / "producer.key").string(), "--allow-key", keys->consumer.public_key},
                        {"UCX_TLS=tcp,self", "UCX_NET_DEVICES=" + dev_a_});
  auto ready = producer.wait_for_line("ready ");
  ASSERT_TRUE(ready) << "producer did not start in " << ns_a_;
  std::string endpoint = ready->substr(6);
  ASSERT_EQ(endpoint.rfind("tcp://10.231.0.1:", 0), 0u) << endpoint;
  ChildProcess consumer({"/usr/bin/env", "ip", "netns", "exec", ns_b_, MODELCAST_TEST_PEER, "consumer", "--endpoint",
                         endpoint, "--name", "remote", "--until-version", "4", "--key-file",
                         (dir / "consumer.key").string(), "--producer-key", keys->producer.public_key},
                        {"UCX_TLS=tcp,self", "UCX_NET_DEVICES=" + dev_b_});
  EXPECT_EQ(consumer.wait(), 0);
  bool got_last = false;
  for (const auto& line : consumer.lines()) {
    EXPECT_EQ(line.rfind("corrupt", 0), std::string::npos) << line;
    if (line == "installed 4") got_last = true;
  }
  EXPECT_TRUE(got_last) << "the consumer in the other namespace never installed version 4";
  producer.close_stdin();
  EXPECT_EQ(producer.wait(), 0);
}

// A consumer started while its host's link was down: UCX leaves a device without carrier out of
// the transports it makes, so its address had no TCP in it, and once the link came up every join
// was refused ("cannot reach the consumer's ucx address") for good. A join refused for want of
// a transport has the consumer make its transports afresh (once per producer_timeout).
TEST_F(TwoHosts, AConsumerStartedWhileItsLinkWasDownJoinsOnceItComesUp) {
  const auto keys = make_keys();
  ChildProcess producer({"/usr/bin/env", "ip", "netns", "exec", ns_a_, MODELCAST_TEST_PEER, "producer", "--endpoint",
                         "tcp://10.231.0.1:0", "--versions", "2", "--kib", "256", "--wait-consumers", "1",
                         "--key-file", (keys->dir / "producer.key").string(), "--allow-key", keys->consumer.public_key},
                        {"UCX_TLS=tcp,self", "UCX_NET_DEVICES=" + dev_a_});
  auto ready = producer.wait_for_line("ready ");
  ASSERT_TRUE(ready) << "producer did not start in " << ns_a_ << ": exit " << producer.wait() << ", " << testing_support::joined_lines(producer);
  const std::string endpoint = ready->substr(6);
  ASSERT_EQ(run("ip -n " + ns_b_ + " link set " + dev_b_ + " down"), 0);
  ChildProcess consumer({"/usr/bin/env", "ip", "netns", "exec", ns_b_, MODELCAST_TEST_PEER, "consumer", "--endpoint",
                         endpoint, "--name", "late-link", "--until-version", "2", "--key-file",
                         (keys->dir / "consumer.key").string(), "--producer-key", keys->producer.public_key},
                        {"UCX_TLS=tcp,self", "UCX_NET_DEVICES=" + dev_b_});
  ASSERT_TRUE(consumer.wait_for_line("started")) << "the consumer did not start";
  ASSERT_EQ(run("ip -n " + ns_b_ + " link set " + dev_b_ + " up"), 0);
  EXPECT_EQ(consumer.wait(), 0);
  bool joined = false, got_last = false;
  for (const auto& line : consumer.lines()) {
    EXPECT_EQ(line.rfind("corrupt", 0), std::string::npos) << line;
    if (line == "joined") joined = true;
    if (line == "installed 2") got_last = true;
  }
  EXPECT_TRUE(joined) << "never joined once the link was up";
  EXPECT_TRUE(got_last) << "never installed version 2";
  producer.close_stdin();
  EXPECT_EQ(producer.wait(), 0);
}

// A consumer whose host lets the control port through and drops every other connection from
// the producer (a firewall open for ZeroMQ, not for UCX): UCX's TCP made its endpoint with a
// blocking connect(), inside the producer's admission of that consumer, and the producer's
// service thread, publish() and every other consumer waited until the kernel gave up on the
// SYNs (about two minutes). Another consumer now gets every version, and publish() returns.
TEST_F(TwoHosts, AConsumerWhoseHostDropsTheProducersConnectionsHoldsUpNoOneElse) {
  const auto keys = make_keys();
  ChildProcess producer({"/usr/bin/env", "ip", "netns", "exec", ns_a_, MODELCAST_TEST_PEER, "producer", "--endpoint",
                         "tcp://10.231.0.1:0", "--versions", "0", "--kib", "256", "--key-file",
                         (keys->dir / "producer.key").string(), "--allow-key", keys->consumer.public_key},
                        {"UCX_TLS=tcp,self", "UCX_NET_DEVICES=" + dev_a_});
  auto ready = producer.wait_for_line("ready ");
  ASSERT_TRUE(ready) << "producer did not start in " << ns_a_;
  const std::string endpoint = ready->substr(6);
  const std::string port = endpoint.substr(endpoint.rfind(':') + 1);
  const std::string nft = "ip netns exec " + ns_b_ + " nft ";
  if (run(nft + "add table inet modelcast_test") != 0) GTEST_SKIP() << "nftables (nft) is not usable here";
  ASSERT_EQ(run(nft + "'add chain inet modelcast_test in { type filter hook input priority 0; policy accept; }'"), 0);
  ASSERT_EQ(run(nft + "add rule inet modelcast_test in iifname " + dev_b_ + " tcp sport != " + port + " drop"), 0);
  ChildProcess walled({"/usr/bin/env", "ip", "netns", "exec", ns_b_, MODELCAST_TEST_PEER, "consumer", "--endpoint",
                       endpoint, "--name", "walled", "--until-version", "3", "--key-file",
                       (keys->dir / "consumer.key").string(), "--producer-key", keys->producer.public_key},
                      {"UCX_TLS=tcp,self", "UCX_NET_DEVICES=" + dev_b_});
  ASSERT_TRUE(walled.wait_for_line("started")) << "the walled-off consumer did not start";
  // Beside the producer, reaching it through its own device's address.
  ChildProcess open({"/usr/bin/env", "ip", "netns", "exec", ns_a_, MODELCAST_TEST_PEER, "consumer", "--endpoint",
                     endpoint, "--name", "open", "--until-version", "3", "--key-file",
                     (keys->dir / "consumer.key").string(), "--producer-key", keys->producer.public_key},
                    {"UCX_TLS=tcp,self", "UCX_NET_DEVICES=" + dev_a_});
  ASSERT_TRUE(open.wait_for_line("joined", std::chrono::seconds(30)))
      << "the other consumer could not join while the walled-off one was being admitted";
  for (int v = 1; v <= 3; ++v) {
    ASSERT_TRUE(producer.ask("publish", "published " + std::to_string(v), std::chrono::seconds(30)))
        << "publish() of version " << v << " did not return within 30 s";
  }
  EXPECT_TRUE(open.wait_for_line("installed 3", std::chrono::seconds(30))) << "the other consumer never got version 3";
  for (const auto& line : open.lines()) EXPECT_EQ(line.rfind("corrupt", 0), std::string::npos) << line;
  walled.kill_now();
  walled.wait();
  open.kill_now();
  open.wait();
  producer.close_stdin();
  EXPECT_EQ(producer.wait(), 0);
}

// One host, two containers: the consumer in other PID and IPC namespaces than its producer
// (Kubernetes pods and Docker containers have their own). UCX's shared-memory addresses then
// carry the namespaces' ids, of lengths the address check did not know, and the producer refused
// the join ("transport 54183 ... which this UCX never packs"). It joins now, and UCX picks a
// transport that reaches across the namespaces.
TEST(OtherNamespaces, AConsumerInOtherPidAndIpcNamespacesReceivesEveryVersionBitExact) {
  if (geteuid() != 0 || run("unshare --pid --ipc --fork true") != 0) {
    GTEST_SKIP() << "cannot make PID and IPC namespaces here (needs root and util-linux's unshare)";
  }
  ChildProcess producer({MODELCAST_TEST_PEER, "producer", "--endpoint", "tcp://127.0.0.1:0", "--versions", "3", "--kib",
                         "1024", "--wait-consumers", "1"},
                        {"UCX_NET_DEVICES=lo"});
  auto ready = producer.wait_for_line("ready ");
  ASSERT_TRUE(ready) << "producer did not start";
  ChildProcess consumer({"/usr/bin/unshare", "--pid", "--ipc", "--fork", MODELCAST_TEST_PEER, "consumer", "--endpoint",
                         ready->substr(6), "--name", "contained", "--until-version", "3"},
                        {"UCX_NET_DEVICES=lo"});
  // Refused, the consumer asks again for ever: the wait is bounded.
  EXPECT_TRUE(consumer.wait_for_line("installed 3", std::chrono::seconds(60)))
      << "the consumer in other namespaces never installed version 3";
  for (const auto& line : consumer.lines()) EXPECT_EQ(line.rfind("corrupt", 0), std::string::npos) << line;
  consumer.kill_now();
  consumer.wait();
  producer.close_stdin();
  EXPECT_EQ(producer.wait(), 0);
}

}  // namespace
