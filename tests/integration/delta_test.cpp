// Delta updates across processes: versions that change a random share of their tensors, a
// consumer there from the start, one that joins late, both skipping versions published faster
// than they fetch, readers holding views throughout. Every byte of every version installed is
// checked against the version's content (tests/support/test_model.h), and the bytes that
// crossed the transport show that only changed blocks were sent.
#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "process_status.h"
#include "child_process.h"
#include "modelcast/consumer.h"
#include "modelcast/producer.h"
#include "test_model.h"

namespace {

using testing_support::ChildProcess;
using testing_support::joined_lines;

constexpr int kChangePct = 25;
constexpr std::size_t kModelKib = 4096;

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

// Versions where nothing changes cost their manifest only; a consumer that slept through more
// versions than the producer remembers block digests of (64) offers a base the producer no
// longer knows, and gets the next version whole, then deltas again.
TEST(Delta, NothingChangedCostsNothingAndABaseTheProducerForgotGetsTheVersionWhole) {
  setenv("UCX_NET_DEVICES", "lo", 1);
  unsetenv("UCX_TLS");
  constexpr std::size_t kKib = 1024;
  ChildProcess producer({MODELCAST_TEST_PEER, "producer", "--endpoint", "tcp://127.0.0.1:0", "--versions", "0",
                         "--kib", std::to_string(kKib), "--chunk-kib", "64", "--change-pct", "0"});
  auto ready = producer.wait_for_line("ready ");
  ASSERT_TRUE(ready);
  const std::string endpoint = ready->substr(6);
  constexpr std::uint64_t kLast = 75;
  auto start = [&](const std::string& name) {
    return std::make_unique<ChildProcess>(std::vector<std::string>{
        MODELCAST_TEST_PEER, "consumer", "--endpoint", endpoint, "--name", name, "--until-version",
        std::to_string(kLast), "--change-pct", "0"});
  };
  auto steady = start("steady");
  auto sleeper = start("sleeper");
  std::uint64_t v = 0;
  auto publish = [&] { ASSERT_TRUE(producer.ask("publish", "published " + std::to_string(++v))); };
  for (int i = 0; i < 3; ++i) {
    publish();
    for (auto* c : {steady.get(), sleeper.get()}) ASSERT_TRUE(c->wait_for_line("installed " + std::to_string(v)));
  }
  ASSERT_TRUE(testing_support::stop_process(sleeper->pid()));
  while (v < 73) {
    publish();
    ASSERT_TRUE(steady->wait_for_line("installed " + std::to_string(v))) << joined_lines(*steady);
  }
  ASSERT_EQ(::kill(sleeper->pid(), SIGCONT), 0);
  ASSERT_TRUE(sleeper->wait_for_line("installed 73", std::chrono::seconds(60))) << joined_lines(*sleeper);
  while (v < kLast) {
    publish();
    for (auto* c : {steady.get(), sleeper.get()}) ASSERT_TRUE(c->wait_for_line("installed " + std::to_string(v)));
  }
  for (auto* c : {steady.get(), sleeper.get()}) {
    EXPECT_EQ(c->wait(), 0) << joined_lines(*c);
    for (const auto& line : c->lines()) {
      EXPECT_NE(line.rfind("corrupt", 0), 0u) << line;
      EXPECT_NE(line.rfind("torn", 0), 0u) << line;
    }
  }
  const double model = kKib * 1024.0;
  const double steady_models = static_cast<double>(bytes_received(*steady)) / model;
  const double sleeper_models = static_cast<double>(bytes_received(*sleeper)) / model;
  // 75 versions of one unchanging model: the first whole, every other one its manifest.
  EXPECT_GT(steady_models, 0.99);
  EXPECT_LT(steady_models, 1.02);
  // The first whole, then version 73 whole again (its base, version 3, forgotten), then nothing.
  EXPECT_GT(sleeper_models, 1.98);
  EXPECT_LT(sleeper_models, 2.02);
  producer.close_stdin();
  EXPECT_EQ(producer.wait(), 0);
}

// While little of the model changes, publish() hashes the tensors and copies into the slot only
// the blocks it does not hold already (the slot holds a version two or more back): a frozen
// body and a head that changes every version. A consumer checks every byte of every version,
// so a block left stale in the slot would show; the bytes publish() copied show which way it
// took: whole copies while it knows no slot's bytes, blocks once it does, whole again after a
// version changed half the model.
TEST(Delta, PublishCopiesOnlyTheBlocksTheSlotLacksWhileLittleChanges) {
  setenv("UCX_NET_DEVICES", "lo", 1);
  unsetenv("UCX_TLS");
  using namespace std::chrono_literals;
  constexpr std::uint64_t kBlock = 64 << 10;
  // About 12 blocks each for the body's two tensors, a few KiB of head between them; odd
  // sizes, so that blocks cut across tensors and the gaps between them.
  struct Tensor {
    std::string name;
    std::vector<std::int32_t> values;
    std::uint64_t content = 0;  // the version whose values it holds
  };
  std::vector<Tensor> model{{"body.a", std::vector<std::int32_t>(200001)},
                            {"head", std::vector<std::int32_t>(1001)},
                            {"body.b", std::vector<std::int32_t>(196613)}};
  auto fill = [&](Tensor& t, std::uint64_t version) {
    t.content = version;
    for (std::size_t i = 0; i < t.values.size(); ++i) {
      t.values[i] = static_cast<std::int32_t>(i * 2654435761u + version * 40503u + t.name.size());
    }
  };
  for (auto& t : model) fill(t, 1);
  modelcast::ProducerOptions options;
  options.model_name = "frozen-body";
  options.control_endpoint = "tcp://127.0.0.1:0";
  options.transfer_chunk_bytes = kBlock;
  ASSERT_EQ(options.snapshot_slots, 3u) << "the versions below are planned for three slots";
  modelcast::Producer producer(options);
  std::uint64_t tensor_bytes = 0;
  for (auto& t : model) {
    producer.register_tensor({{t.name, modelcast::DType::kI32, {static_cast<std::int64_t>(t.values.size())}},
                              t.values.data()});
    tensor_bytes += t.values.size() * sizeof(std::int32_t);
  }
  modelcast::ConsumerOptions consumer_options;
  consumer_options.producer_endpoint = producer.control_endpoint();
  consumer_options.model_name = "frozen-body";
  modelcast::Consumer consumer(consumer_options);

  // Publishes `version` and returns the bytes publish() copied for it, once the consumer has
  // it and every byte of every tensor is checked.
  auto publish = [&](std::uint64_t version) -> std::uint64_t {
    const auto before = producer.stats().snapshot_bytes_copied;
    producer.publish(static_cast<std::int64_t>(version));
    const auto copied = producer.stats().snapshot_bytes_copied - before;
    auto view = consumer.wait_for_version(version, 60s);
    EXPECT_TRUE(view) << "version " << version << " did not arrive";
    if (!view) return copied;
    for (const auto& t : model) {
      auto got = view.tensor(t.name);
      EXPECT_EQ(got.size_bytes(), t.values.size() * sizeof(std::int32_t));
      EXPECT_EQ(std::memcmp(got.data, t.values.data(), got.size_bytes()), 0)
          << "version " << version << ": tensor '" << t.name << "' is not version " << t.content << "'s";
    }
    return copied;
  };
  // Three slots, none known yet: whole copies.
  for (std::uint64_t v = 1; v <= 3; ++v) {
    fill(model[1], v);
    EXPECT_EQ(publish(v), tensor_bytes) << "version " << v;
  }
  // The first slot holds version 1; from it to version 3 only the head's blocks changed.
  fill(model[1], 4);
  const auto head_only = publish(4);
  EXPECT_GT(head_only, 0u);
  EXPECT_LE(head_only, 2 * kBlock) << "version 4 changed only the head, at most two blocks";
  // Half the model changes: the second slot (version 2) lacks the head's blocks and body.b's.
  fill(model[1], 5);
  fill(model[2], 5);
  const auto half = publish(5);
  EXPECT_GE(half, model[2].values.size() * sizeof(std::int32_t));
  EXPECT_LT(half, tensor_bytes - 10 * kBlock) << "body.a did not change, yet it was copied";
  // From the third slot's version (3) to the newest (5) half the blocks changed: hashing first
  // would not pay, the whole model is copied.
  fill(model[1], 6);
  EXPECT_EQ(publish(6), tensor_bytes);
  // Nothing changes for a while: the slots catch up, then nothing is copied at all.
  std::uint64_t copied = 0;
  for (std::uint64_t v = 7; v <= 12; ++v) copied = publish(v);
  EXPECT_EQ(copied, 0u) << "version 12 changed nothing and its slot held the same bytes";
  EXPECT_EQ(producer.stats().versions_published, 12u);
}

}  // namespace
