// Delta updates across processes: versions that change a random share of their tensors, a
// consumer there from the start, one that joins late, both skipping versions published faster
// than they fetch, readers holding views throughout. Every byte of every version installed is
// checked against the version's content (tests/support/test_model.h), and the bytes that
// crossed the transport show that only changed blocks were sent.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "child_process.h"
#include "test_model.h"

namespace {

using testing_support::ChildProcess;

constexpr int kChangePct = 25;
constexpr std::size_t kModelKib = 4096;

std::string joined_lines(const ChildProcess& child) {
  std::string all;
  for (const auto& line : child.lines()) all += line + "\n";
  return all;
}

std::uint64_t bytes_received(const ChildProcess& consumer) {
  for (const auto& line : consumer.lines()) {
    if (line.rfind("bytes_received ", 0) == 0) return std::stoull(line.substr(15));
  }
  return 0;
}

std::unique_ptr<ChildProcess> consumer(const std::string& endpoint, const std::string& name, std::uint64_t until) {
  return std::make_unique<ChildProcess>(std::vector<std::string>{
      MODELCAST_TEST_PEER, "consumer", "--endpoint", endpoint, "--name", name, "--until-version",
      std::to_string(until), "--readers", "2", "--change-pct", std::to_string(kChangePct)});
}

TEST(Delta, ConsumersInstallEveryVersionBitExactReceivingOnlyTheChangedBlocks) {
  setenv("UCX_NET_DEVICES", "lo", 1);
  unsetenv("UCX_TLS");
  constexpr std::uint64_t kLast = 12;
  // 64 KiB blocks: a 4 MiB model has 64, about five a tensor.
  ChildProcess producer({MODELCAST_TEST_PEER, "producer", "--endpoint", "tcp://127.0.0.1:0", "--versions", "0",
                         "--kib", std::to_string(kModelKib), "--chunk-kib", "64", "--change-pct",
                         std::to_string(kChangePct)});
  auto ready = producer.wait_for_line("ready ");
  ASSERT_TRUE(ready);
  const std::string endpoint = ready->substr(6);
  auto early = consumer(endpoint, "early", kLast);
  auto publish_and_wait = [&](std::uint64_t v, std::vector<ChildProcess*> consumers) {
    ASSERT_TRUE(producer.ask("publish", "published " + std::to_string(v)));
    for (auto* c : consumers) {
      ASSERT_TRUE(c->wait_for_line("installed " + std::to_string(v), std::chrono::seconds(60)))
          << "version " << v << " not installed:\n" << joined_lines(*c);
    }
  };
  for (std::uint64_t v = 1; v <= 5; ++v) publish_and_wait(v, {early.get()});
  // Joins late: its first version comes whole, the next ones as deltas.
  auto late = consumer(endpoint, "late", kLast);
  publish_and_wait(6, {early.get(), late.get()});
  // Published back to back: a consumer may skip some, and its next delta is then against an
  // older base than the version before.
  for (std::uint64_t v = 7; v <= 9; ++v) ASSERT_TRUE(producer.ask("publish", "published " + std::to_string(v)));
  for (std::uint64_t v = 10; v <= kLast; ++v) publish_and_wait(v, {early.get(), late.get()});

  for (auto* c : {early.get(), late.get()}) {
    EXPECT_EQ(c->wait(), 0) << joined_lines(*c);
    for (const auto& line : c->lines()) {
      EXPECT_EQ(line.rfind("corrupt", 0), std::string::npos) << line;
      EXPECT_EQ(line.rfind("torn", 0), std::string::npos) << line;
    }
  }
  // A quarter of the tensors change a version (a few more blocks, at tensor edges): whole
  // versions would be 12 models for the early consumer and 7 or so for the late one.
  const double model = kModelKib * 1024.0;
  const double early_models = static_cast<double>(bytes_received(*early)) / model;
  const double late_models = static_cast<double>(bytes_received(*late)) / model;
  EXPECT_GT(early_models, 1.0) << "the first version must come whole";
  EXPECT_LT(early_models, 0.6 * kLast) << "the early consumer received " << early_models << " models' worth";
  EXPECT_LT(late_models, 0.6 * 7) << "the late consumer received " << late_models << " models' worth";
  producer.close_stdin();
  EXPECT_EQ(producer.wait(), 0);
  std::printf("[   INFO   ] models' worth received for %llu versions: early %.2f, late %.2f\n",
              static_cast<unsigned long long>(kLast), early_models, late_models);
}

}  // namespace
