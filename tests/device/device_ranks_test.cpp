// A model trained sharded, served to device consumers: each rank's pieces land on the consumer's
// device, where they are assembled into what it wants (the whole model, tensor-parallel halves
// and quarters along either dimension, single tensors), every byte checked against the global
// tensors; a rank that stops leaves them on the last step every rank had, and a restarted one
// brings them on. Conversions on the device are checked against host consumers in
// device_shaping_test.cpp.
#include <gtest/gtest.h>

#include "eventually.h"
#include "ranked_model.h"

using namespace std::chrono_literals;
using namespace rankedmodel;

namespace {

modelcast::ConsumerOptions on_device(const std::string& endpoint, std::vector<TensorWant> wants = {}) {
  auto o = options_for(endpoint, std::move(wants));
  o.memory = modelcast::MemoryKind::kCuda;
  auto& runtime = modelcast::device::require_device_runtime("the device tests");
  o.device = runtime.device_count() > 1 ? 1 : 0;
  return o;
}

bool reaches(const modelcast::Consumer& consumer, std::int64_t step) {
  return testing_support::eventually([&] {
    auto v = consumer.acquire();
    return v && v.step() == step;
  }, 60s);
}

class DeviceRanks : public testing::TestWithParam<std::uint32_t> {};

TEST_P(DeviceRanks, DeviceConsumersAssembleWhatTheyWantFromEveryRankEveryByteChecked) {
  const std::uint32_t m = GetParam();
  Ranks ranks(m);
  struct Shard {
    std::size_t dim, k, n;
  };
  const std::vector<Shard> shards{{0, 1, 2}, {1, 1, 2}, {1, 3, 4}};
  modelcast::Consumer whole(on_device(ranks.endpoint()));
  modelcast::Consumer single(on_device(ranks.endpoint(), {TensorWant::nothing("*"), TensorWant::whole("e")}));
  std::vector<std::unique_ptr<modelcast::Consumer>> tp;
  for (const auto& s : shards) {
    tp.push_back(std::make_unique<modelcast::Consumer>(on_device(ranks.endpoint(), {TensorWant::shard("*", s.dim, s.k, s.n)})));
  }
  for (std::int64_t step = 10; step <= 20; step += 10) {
    ranks.publish(step);
    ASSERT_TRUE(reaches(whole, step)) << whole.stats().last_error;
    EXPECT_EQ(check(whole.acquire(), step, [](const Global&) -> Boxes { return std::nullopt; }), "") << "whole, M " << m;
    ASSERT_TRUE(reaches(single, step)) << single.stats().last_error;
    EXPECT_EQ(check(single.acquire(), step, [](const Global& g) -> Boxes {
                if (g.name == "e") return std::nullopt;
                return std::make_pair(std::vector<std::int64_t>{}, std::vector<std::int64_t>{});
              }),
              "")
        << "single tensor, M " << m;
    for (std::size_t i = 0; i < shards.size(); ++i) {
      ASSERT_TRUE(reaches(*tp[i], step)) << tp[i]->stats().last_error;
      const auto s = shards[i];
      EXPECT_EQ(check(tp[i]->acquire(), step, shard_of(s.dim, s.k, s.n)), "") << "shard " << s.k << " of " << s.n << " along " << s.dim
                                                          << ", M " << m;
      EXPECT_EQ(tp[i]->acquire().find("w")->spec->memory, modelcast::MemoryKind::kCuda);
    }
  }
  EXPECT_EQ(whole.stats().versions_rejected, 0u) << whole.stats().last_error;
}

INSTANTIATE_TEST_SUITE_P(OneTwoFour, DeviceRanks, testing::Values(1u, 2u, 4u),
                         [](const testing::TestParamInfo<std::uint32_t>& p) { return "M" + std::to_string(p.param); });

TEST(DeviceRanksFaults, AStoppedRankHoldsTheLastCommonStepAndARestartedOneCatchesUp) {
  Ranks ranks(2);
  modelcast::Consumer consumer(on_device(ranks.endpoint(), {TensorWant::shard("*", 1, 0, 2)}));
  const auto half = shard_of(1, 0, 2);
  ranks.publish(1);
  ASSERT_TRUE(reaches(consumer, 1)) << consumer.stats().last_error;
  // Rank 1 stops; rank 0 publishes step 2: the consumer stays on step 1, whole and correct.
  const std::string rank1 = ranks.ranks[1]->producer->control_endpoint();
  ranks.ranks[1].reset();
  ranks.ranks[0]->publish(2);
  ASSERT_TRUE(testing_support::eventually([&] { return ranks.ranks[0]->producer->stats().deliveries >= 2; }, 60s));
  EXPECT_EQ(check(consumer.acquire(), 1, half), "");
  // A restarted rank 1 at the same endpoint publishes step 2, never put with rank 0's step 2 of
  // before it started; the next step both publish moves the consumer on.
  ranks.ranks[1] = std::make_unique<Rank>(1, 2, std::vector<std::string>{}, rank1);
  ranks.ranks[1]->publish(2);
  ASSERT_TRUE(testing_support::eventually([&] { return ranks.ranks[1]->producer->stats().deliveries >= 1; }, 60s));
  EXPECT_EQ(consumer.acquire().step(), 1);
  ranks.publish(3);
  ASSERT_TRUE(reaches(consumer, 3)) << consumer.stats().last_error;
  EXPECT_EQ(check(consumer.acquire(), 3, half), "");
}

}  // namespace
