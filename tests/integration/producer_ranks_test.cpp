// A model trained sharded: M producer ranks each register their pieces of the tensors (dim-0
// pieces, dim-1 pieces, replicated ones, one held by one rank only) and publish on their own;
// consumers told rank 0's endpoint want the whole model, tensor-parallel halves and quarters
// along either dimension, or single tensors. Every byte of every assembled view is compared with
// the global tensor cut element by element here; steps never mix; a rank that stops leaves
// consumers on the last step every rank had, and a restarted rank brings them on.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <mutex>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <csignal>
#include <sstream>

#include "process_status.h"
#include "child_process.h"
#include "eventually.h"
#include "gate.h"
#include "logs_said.h"
#include "ranked_model.h"
#include "test_model.h"
#include "modelcast/consumer.h"
#include "modelcast/error.h"
#include "modelcast/modelcast_runtime.h"
#include "modelcast/producer.h"

using namespace std::chrono_literals;
using modelcast::DType;
using modelcast::TensorWant;

namespace {

using namespace rankedmodel;

}  // namespace

class ProducerRanks : public testing::TestWithParam<std::uint32_t> {};

// Whole-model consumers and tensor-parallel halves and quarters along both dimensions, resharded
// from M ranks' dim-0, dim-1, replicated and single-rank pieces, over two steps.
TEST_P(ProducerRanks, ConsumersAssembleWhatTheyWantFromEveryRankEveryByteChecked) {
  const std::uint32_t m = GetParam();
  Ranks ranks(m);
  struct Want {
    std::size_t dim, k, n;
  };
  std::vector<Want> shards{{0, 0, 2}, {0, 1, 2}, {1, 1, 2}, {1, 3, 4}, {0, 2, 4}};
  modelcast::Consumer whole(options_for(ranks.endpoint()));
  std::vector<std::unique_ptr<modelcast::Consumer>> tp;
  for (const auto& s : shards) {
    tp.push_back(std::make_unique<modelcast::Consumer>(options_for(ranks.endpoint(), {TensorWant::shard("*", s.dim, s.k, s.n)})));
  }
  for (std::int64_t step = 10; step <= 20; step += 10) {
    ranks.publish(step);
    ASSERT_TRUE(testing_support::eventually([&] {
      auto v = whole.acquire();
      return v && v.step() == step;
    }, 60s)) << whole.stats().last_error;
    EXPECT_EQ(check(whole.acquire(), step, [](const Global&) { return std::nullopt; }), "") << "whole, M " << m;
    for (std::size_t i = 0; i < shards.size(); ++i) {
      ASSERT_TRUE(testing_support::eventually([&] {
        auto v = tp[i]->acquire();
        return v && v.step() == step;
      }, 60s)) << tp[i]->stats().last_error;
      const auto s = shards[i];
      EXPECT_EQ(check(tp[i]->acquire(), step, shard_of(s.dim, s.k, s.n)), "") << "shard " << s.k << " of " << s.n << " along " << s.dim
                                                          << ", M " << m;
    }
  }
  // After the first step each rank is asked for just what the plan takes from it: a step of the
  // whole model crosses about once, replicated tensors included (not once per rank holding them).
  {
    const auto before = whole.stats().bytes_received;
    ranks.publish(30);
    ASSERT_TRUE(testing_support::eventually([&] {
      auto v = whole.acquire();
      return v && v.step() == 30;
    }, 60s)) << whole.stats().last_error;
    std::uint64_t model_bytes = 0;
    for (const auto& g : global_model(30)) model_bytes += g.bytes.size();
    const std::uint64_t step_bytes = whole.stats().bytes_received - before;
    EXPECT_GE(step_bytes, model_bytes);
    // At most the blocks at the edges of what each rank leaves out of its snapshot.
    EXPECT_LE(step_bytes, model_bytes + 6 * m * (64u << 10)) << "M " << m;
    EXPECT_EQ(check(whole.acquire(), 30, [](const Global&) { return std::nullopt; }), "") << "whole, M " << m;
  }
  // A dim-0 half of a model whose "w" is split along dim 0 in as many parts: it pulls less than
  // the whole model does.
  EXPECT_LT(tp[0]->stats().bytes_received * 10, whole.stats().bytes_received * 8);
  EXPECT_EQ(whole.stats().versions_rejected, 0u) << whole.stats().last_error;
}

// A consumer of a sharded model fetches from each rank only what its assembler takes from it (a
// replicated tensor from one rank): the version a rank's service installs is in part. It was
// relayed as if whole, and the receiver's digest checks failed on the blocks never fetched.
TEST(ProducerRanksRelays, AConsumerRelaysOnlyWhatItHoldsOfARanksVersion) {
  Ranks ranks(2, false, "tcp://127.0.0.1:0", /*relay_fanout=*/1);
  modelcast::Consumer first(options_for(ranks.endpoint()));
  for (std::int64_t step = 10; step <= 30; step += 10) {
    ranks.publish(step);
    ASSERT_TRUE(testing_support::eventually([&] {
      auto v = first.acquire();
      return v && v.step() == step;
    }, 60s)) << first.stats().last_error;
  }
  // Joined late, so that every version it fetches is held by the first: the producers order
  // relays from it.
  modelcast::Consumer second(options_for(ranks.endpoint()));
  for (std::int64_t step = 40; step <= 60; step += 10) {
    ranks.publish(step);
    for (auto* c : {&first, &second}) {
      ASSERT_TRUE(testing_support::eventually([&] {
        auto v = c->acquire();
        return v && v.step() == step;
      }, 60s)) << c->stats().last_error;
      EXPECT_EQ(check(c->acquire(), step, [](const Global&) { return std::nullopt; }), "");
    }
  }
  EXPECT_EQ(second.stats().relay_faults, 0u) << second.stats().last_error;
  EXPECT_EQ(first.stats().relay_faults, 0u) << first.stats().last_error;
  EXPECT_EQ(second.stats().versions_rejected, 0u) << second.stats().last_error;
}

INSTANTIATE_TEST_SUITE_P(OneTwoFour, ProducerRanks, testing::Values(1u, 2u, 4u),
                         [](const testing::TestParamInfo<std::uint32_t>& p) { return "M" + std::to_string(p.param); });

// A consumer too small for what a rank sends said "version 1 is a N-byte model", N being one
// rank's pieces (a third of the model with three ranks): it now says whose pieces they are.
TEST(ProducerRanksFaults, AConsumerTooSmallForARanksPiecesSaysWhoseTheyAre) {
  Ranks ranks(2);
  auto options = options_for(ranks.endpoint());
  options.max_model_bytes = 4096;
  modelcast::Consumer consumer(options);
  ranks.publish(1);
  ASSERT_TRUE(testing_support::eventually([&] {
    return consumer.stats().last_error.find("this consumer takes at most 4096") != std::string::npos;
  }, 60s)) << consumer.stats().last_error;
  EXPECT_NE(consumer.stats().last_error.find("'s pieces of step 1 take "), std::string::npos) << consumer.stats().last_error;
}

TEST(ProducerRanksFaults, StepsNeverMixAStoppedRankHoldsTheLastCommonStepAndARestartedOneCatchesUp) {
  Ranks ranks(2);
  std::mutex mutex;
  std::vector<std::string> seen;  // every assembled version checked as it is installed
  auto options = options_for(ranks.endpoint(), {TensorWant::nothing("*"), TensorWant::whole("w"), TensorWant::whole("head")});
  options.on_update = [&](const modelcast::ModelView& view) {
    auto wanted = [](const Global& g) -> std::optional<std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>>> {
      if (g.name == "w" || g.name == "head") return std::nullopt;
      return std::make_pair(std::vector<std::int64_t>{}, std::vector<std::int64_t>{});
    };
    std::lock_guard lock(mutex);
    seen.push_back(check(view, view.step(), wanted));
  };
  modelcast::Consumer consumer(options);
  ranks.publish(1);
  ASSERT_TRUE(testing_support::eventually([&] { return consumer.acquire() && consumer.acquire().step() == 1; }, 60s))
      << consumer.stats().last_error;
  // Rank 0 moves on alone: its consumer service takes step 2, and no mixed version appears.
  ranks.ranks[0]->publish(2);
  ASSERT_TRUE(testing_support::eventually([&] { return ranks.ranks[0]->producer->stats().deliveries >= 2; }, 60s));
  EXPECT_EQ(consumer.acquire().step(), 1);
  ranks.ranks[1]->publish(2);
  ASSERT_TRUE(testing_support::eventually([&] { return consumer.acquire().step() == 2; }, 60s)) << consumer.stats().last_error;
  // Rank 1 stops (its producer is gone); rank 0 publishes step 3: the consumer stays on step 2.
  const std::string rank1 = ranks.ranks[1]->producer->control_endpoint();
  ranks.ranks[1].reset();
  ranks.ranks[0]->publish(3);
  ASSERT_TRUE(testing_support::eventually([&] { return ranks.ranks[0]->producer->stats().deliveries >= 3; }, 60s));
  EXPECT_EQ(consumer.acquire().step(), 2);
  // A restarted rank 1 at the same endpoint publishes step 3, which the consumer receives: rank
  // 0's step 3 was published before this run of rank 1 began, so the two are never put together
  // (the step of a rank restarted from a checkpoint is no proof of the same model).
  ranks.ranks[1] = std::make_unique<Rank>(1, 2, std::vector<std::string>{}, rank1);
  ranks.ranks[1]->publish(3);
  ASSERT_TRUE(testing_support::eventually([&] { return ranks.ranks[1]->producer->stats().deliveries >= 1; }, 60s));
  EXPECT_EQ(consumer.acquire().step(), 2) << "rank 0's step 3 from before rank 1 restarted was put with the new run's";
  // The next step both publish brings the consumer on.
  ranks.publish(4);
  ASSERT_TRUE(testing_support::eventually([&] { return consumer.acquire().step() == 4; }, 60s)) << consumer.stats().last_error;
  // on_update runs after the install readers see.
  ASSERT_TRUE(testing_support::eventually([&] {
    std::lock_guard lock(mutex);
    return seen.size() >= 3;
  }, 60s));
  std::lock_guard lock(mutex);
  for (std::size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], "") << "assembled version " << i;
}

// A rank that lags several versions behind the others (it publishes late, or its transfers take
// longer) still meets them: the ranks ahead keep the oldest version it may reach, so steps keep
// being assembled while they publish on. Each step is installed by its rank's service before the
// next is published, so the lag is exact. With the fewest buffers a consumer may ask for (2) too:
// the first rank's service kept 2, both held by the assembler, and never received again.
class RankBehind : public testing::TestWithParam<std::size_t> {};

TEST_P(RankBehind, ARankSeveralVersionsBehindStillMeetsTheOthers) {
  Ranks ranks(2);
  auto options = options_for(ranks.endpoint());
  options.buffers = GetParam();
  modelcast::Consumer consumer(options);
  auto whole = [](const Global&) -> std::optional<std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>>> {
    return std::nullopt;
  };
  auto delivered = [&](std::size_t rank, std::uint64_t n) {
    ASSERT_TRUE(testing_support::eventually([&] { return ranks.ranks[rank]->producer->stats().deliveries >= n; }, 60s))
        << "rank " << rank << ": " << consumer.stats().last_error;
  };
  ranks.publish(1);
  ASSERT_TRUE(testing_support::eventually([&] { return consumer.acquire() && consumer.acquire().step() == 1; }, 60s))
      << consumer.stats().last_error;
  for (std::int64_t step = 2; step <= 4; ++step) {
    ranks.ranks[0]->publish(step);
    delivered(0, static_cast<std::uint64_t>(step));
  }
  ranks.ranks[1]->publish(2);
  ASSERT_TRUE(testing_support::eventually([&] { return consumer.acquire().step() == 2; }, 60s))
      << "rank 1 reached step 2 while rank 0 was at 4: " << consumer.stats().last_error;
  EXPECT_EQ(check(consumer.acquire(), 2, whole), "");
  // Rank 0 keeps two versions ahead and more; rank 1 follows: the steps they meet at assemble.
  for (std::int64_t step = 5; step <= 6; ++step) {
    ranks.ranks[0]->publish(step);
    delivered(0, static_cast<std::uint64_t>(step));
  }
  for (std::int64_t step = 3; step <= 4; ++step) {
    ranks.ranks[1]->publish(step);
    delivered(1, static_cast<std::uint64_t>(step));
  }
  ASSERT_TRUE(testing_support::eventually([&] { return consumer.acquire().step() == 4; }, 60s))
      << "rank 1 reached step 4 while rank 0 was at 6: " << consumer.stats().last_error;
  EXPECT_EQ(check(consumer.acquire(), 4, whole), "");
}

namespace {

// Publishes `step` on `rank` of two and waits for its delivery to `consumer`, so that each rank's
// lag is exact: `published` counts each rank's publishes so far.
void publish_delivered(Ranks& ranks, std::size_t rank, std::int64_t step, std::uint64_t (&published)[2],
                       const modelcast::Consumer& consumer) {
  ranks.ranks[rank]->publish(step);
  ++published[rank];
  ASSERT_TRUE(testing_support::eventually(
      [&] { return ranks.ranks[rank]->producer->stats().deliveries >= published[rank]; }, 60s))
      << "rank " << rank << ": " << consumer.stats().last_error;
}

// What a consumer said through on_error, which its service threads call.
struct ErrorsSaid {
  std::function<void(const modelcast::Error&)> collector() {
    return [this](const modelcast::Error& e) {
      std::lock_guard lock(mutex);
      said.emplace_back(e.what());
    };
  }
  long starting_with(const std::string& prefix) {
    std::lock_guard lock(mutex);
    return std::count_if(said.begin(), said.end(), [&](const std::string& e) { return e.rfind(prefix, 0) == 0; });
  }
  std::mutex mutex;
  std::vector<std::string> said;
};

using testing_support::LogsSaid;

// A consumer of `ranks` whose on_error `errors` collects.
modelcast::ConsumerOptions collecting_errors(Ranks& ranks, ErrorsSaid& errors) {
  auto options = options_for(ranks.endpoint());
  options.on_error = errors.collector();
  return options;
}

// Whether readers come to see `step` within 30 s.
bool comes_to_step(const modelcast::Consumer& consumer, std::int64_t step) {
  return testing_support::eventually([&] {
    auto view = consumer.acquire();
    return view && view.step() == step;
  }, 30s);
}

}  // namespace

// A rank that publishes every other step, each just after the other rank has moved past it,
// meets that rank at the steps it publishes: the rank ahead kept the odd step before its newest
// (a rank behind was taken to publish every step) and let go of the even one the rank behind was
// about to bring, so no step ever assembled and nothing said why. The cadence is learned from
// the rank's last two steps, so the first even step after step 0 may be missed.
TEST(RankBehind, ARankOnAnotherCadenceMeetsTheOthersAtTheStepsItPublishes) {
  Ranks ranks(2);
  modelcast::Consumer consumer(options_for(ranks.endpoint()));
  std::uint64_t published[2] = {0, 0};
  auto publish = [&](std::size_t rank, std::int64_t step) { publish_delivered(ranks, rank, step, published, consumer); };
  publish(0, 0);
  publish(1, 0);
  for (std::int64_t even = 2; even <= 10; even += 2) {
    publish(0, even);
    publish(0, even + 1);
    publish(1, even);
    if (even == 2) continue;
    ASSERT_TRUE(testing_support::eventually([&] { return consumer.acquire() && consumer.acquire().step() == even; }, 60s))
        << "rank 1 published step " << even << " while rank 0 was at " << even + 1 << ": "
        << consumer.stats().last_error;
  }
}

// Ranks publishing the same steps at uneven gaps (0, 1, 3, 4, 6, ...), one three versions behind:
// the steps it brings keep being met. Its stride taken from its last gap alone (2, from 1 to 3)
// let go of the step it brought next (4), and nothing after step 0 was ever assembled.
TEST(RankBehind, RanksAtUnevenGapsStillMeetWhenOneLags) {
  Ranks ranks(2);
  std::mutex mutex;
  std::vector<std::int64_t> assembled;
  auto options = options_for(ranks.endpoint());
  options.on_update = [&](const modelcast::ModelView& view) {
    std::lock_guard lock(mutex);
    assembled.push_back(view.step());
  };
  modelcast::Consumer consumer(options);
  std::uint64_t published[2] = {0, 0};
  auto publish = [&](std::size_t rank, std::int64_t step) { publish_delivered(ranks, rank, step, published, consumer); };
  std::vector<std::int64_t> steps{0};
  for (int i = 0; i < 16; ++i) steps.push_back(steps.back() + (i % 2 == 0 ? 1 : 2));
  const std::size_t lag = 3;
  for (std::size_t i = 0; i < steps.size() + lag; ++i) {
    if (i < steps.size()) publish(0, steps[i]);
    // Rank 1 stops two steps short: what is met is met while it lags, not at a common end.
    if (i >= lag && i - lag + 2 < steps.size()) publish(1, steps[i - lag]);
  }
  std::lock_guard lock(mutex);
  EXPECT_GE(assembled.size(), 3u) << "assembled steps: " << testing::PrintToString(assembled) << "; "
                                  << consumer.stats().last_error;
}

INSTANTIATE_TEST_SUITE_P(Buffers, RankBehind, testing::Values(std::size_t{2}, std::size_t{3}),
                         [](const testing::TestParamInfo<std::size_t>& param) {
                           return std::to_string(param.param) + "Buffers";
                         });

// A trainer restarted at rank 0's endpoint with other ranks, then with none: the consumer
// follows each layout (every byte checked) and serves the last version until the next arrives.
TEST(ProducerRanksFaults, AConsumerFollowsATrainerRestartedWithOtherRanksOrWithNone) {
  auto ranks = std::make_unique<Ranks>(2);
  const std::string endpoint0 = ranks->endpoint();
  auto options = options_for(endpoint0);
  options.producer_timeout = 2s;  // how soon it notices its producer went
  modelcast::Consumer consumer(options);
  const auto whole = [](const Global&) -> Boxes { return std::nullopt; };
  auto reaches = [&](std::int64_t step) {
    return testing_support::eventually([&] { return consumer.acquire() && consumer.acquire().step() == step; }, 60s);
  };
  // The stats speak of what readers see, whatever the layout: the version they hold, and how
  // many versions they were given in all.
  std::uint64_t installed = 0;
  auto stats_follow_readers = [&](const char* when) {
    const auto stats = consumer.stats();
    EXPECT_EQ(stats.current_version, consumer.acquire().version()) << when;
    EXPECT_GT(stats.versions_installed, installed) << when;
    installed = stats.versions_installed;
  };
  ranks->publish(1);
  ASSERT_TRUE(reaches(1)) << consumer.stats().last_error;
  EXPECT_EQ(check(consumer.acquire(), 1, whole), "");
  stats_follow_readers("two ranks");

  ranks.reset();
  ranks = std::make_unique<Ranks>(3, false, endpoint0);
  for (auto& rank : ranks->ranks) ASSERT_TRUE(rank->producer->wait_for_consumers(1, 60s));  // the new layout is joined
  EXPECT_EQ(check(consumer.acquire(), 1, whole), "") << "the last version, until the new ranks publish";
  EXPECT_EQ(consumer.stats().current_version, consumer.acquire().version()) << "before the new ranks publish";
  EXPECT_EQ(consumer.stats().versions_installed, installed) << "before the new ranks publish";
  ranks->publish(2);
  ASSERT_TRUE(reaches(2)) << "three ranks after two: " << consumer.stats().last_error;
  EXPECT_EQ(check(consumer.acquire(), 2, whole), "");
  stats_follow_readers("three ranks");

  ranks.reset();
  Rank alone(0, 1, {}, endpoint0);
  alone.publish(3);
  ASSERT_TRUE(reaches(3)) << "one producer after three ranks: " << consumer.stats().last_error;
  EXPECT_EQ(check(consumer.acquire(), 3, whole), "");
  stats_follow_readers("one producer");
}

// A trainer restarted at the same endpoints with smaller tensors, then with the larger ones again:
// the layout is the same, so the consumer keeps its assembler and the ranks' services. The
// regions the assembler asked each rank for were of the tensors before: rank 1's rows
// [1024:2048] of "w" lie outside a "w" of 1024 rows, so every version of rank 1 was refused and
// nothing was ever assembled again. Each run's versions are fetched with the consumer's wants
// until the assembler asks for this run's regions (every byte checked).
TEST(ProducerRanksFaults, AConsumerFollowsATrainerRestartedAtTheSameEndpointsWithSmallerTensors) {
  auto ranks = std::make_unique<Ranks>(2);
  const auto endpoints = ranks->endpoints();
  auto options = options_for(endpoints[0]);
  options.producer_timeout = 2s;  // how soon it notices its producers went
  modelcast::Consumer consumer(options);
  const auto whole = [](const Global&) -> Boxes { return std::nullopt; };
  auto reaches = [&](std::int64_t step) {
    return testing_support::eventually([&] { return consumer.acquire() && consumer.acquire().step() == step; }, 60s);
  };
  ranks->publish(1);
  ASSERT_TRUE(reaches(1)) << consumer.stats().last_error;
  EXPECT_EQ(check(consumer.acquire(), 1, whole), "");

  ranks.reset();
  ranks = std::make_unique<Ranks>(endpoints, 1024);  // rank 1 holds rows [512:1024] of "w" now
  for (auto& rank : ranks->ranks) ASSERT_TRUE(rank->producer->wait_for_consumers(1, 60s));
  ranks->publish(2);
  ASSERT_TRUE(reaches(2)) << "smaller tensors at the same endpoints: " << consumer.stats().last_error;
  EXPECT_EQ(check(consumer.acquire(), 2, whole, 1024), "");

  ranks.reset();
  ranks = std::make_unique<Ranks>(endpoints, 2048);
  for (auto& rank : ranks->ranks) ASSERT_TRUE(rank->producer->wait_for_consumers(1, 60s));
  ranks->publish(3);
  ASSERT_TRUE(reaches(3)) << "larger tensors again: " << consumer.stats().last_error;
  EXPECT_EQ(check(consumer.acquire(), 3, whole), "");
}

// Publishes steps 1 to 3 on every rank; true once `consumer` serves step 3.
static bool serves_step_three(Ranks& ranks, modelcast::Consumer& consumer) {
  for (std::int64_t step = 1; step <= 3; ++step) ranks.publish(step);
  return testing_support::eventually([&] { return consumer.acquire() && consumer.acquire().step() == 3; }, 60s);
}

// A trainer restarted as a whole at the same endpoints, from a checkpoint: its ranks publish
// the steps of the run before again. Until every rank of the new run has published a step, the
// consumer serves the old run's last version; a new rank's piece is never put with an old rank's
// piece of the same step (another model), and steps may go back with the new run.
TEST(ProducerRanksFaults, ATrainerRestartedAsAWholeNeverHasItsRanksPiecesPutWithTheRunBefore) {
  auto ranks = std::make_unique<Ranks>(2);
  const auto endpoints = ranks->endpoints();
  auto options = options_for(endpoints[0]);
  options.producer_timeout = 2s;
  std::atomic<std::int64_t> told{-1};
  options.on_update = [&](const modelcast::ModelView& view) { told = view.step(); };
  modelcast::Consumer consumer(options);
  const auto whole = [](const Global&) -> Boxes { return std::nullopt; };
  ASSERT_TRUE(serves_step_three(*ranks, consumer)) << consumer.stats().last_error;
  const auto before = consumer.stats();
  const auto served = consumer.acquire().version();

  ranks.reset();
  ranks = std::make_unique<Ranks>(endpoints, 2048);
  for (auto& rank : ranks->ranks) ASSERT_TRUE(rank->producer->wait_for_consumers(1, 60s));
  // Rank 1 of the new run publishes steps 1 to 3 and the consumer receives each; rank 0 of the
  // new run has published nothing, so its old run's step 3 is all the consumer could put them with.
  for (std::int64_t step = 1; step <= 3; ++step) {  // each received before the next: none is skipped
    ranks->ranks[1]->publish(step);
    ASSERT_TRUE(testing_support::eventually([&] {
      return ranks->ranks[1]->producer->stats().deliveries >= static_cast<std::uint64_t>(step);
    }, 60s)) << consumer.stats().last_error;
  }
  EXPECT_EQ(consumer.acquire().version(), served) << "a version was put together from two runs";
  EXPECT_EQ(consumer.stats().versions_installed, before.versions_installed);
  EXPECT_EQ(consumer.stats().versions_rejected, before.versions_rejected) << consumer.stats().last_error;

  // Rank 0 of the new run publishes step 1 (rank 1 kept its step 1 for a rank behind it): the
  // new run's step 1, back from step 3, numbered as the new run's rank 0 numbers it (from 1 again,
  // as a restarted producer's versions are).
  ranks->ranks[0]->publish(1);
  ASSERT_TRUE(testing_support::eventually([&] { return consumer.acquire().step() == 1; }, 60s))
      << consumer.stats().last_error;
  EXPECT_EQ(consumer.acquire().version(), 1u);
  EXPECT_EQ(consumer.stats().versions_installed, before.versions_installed + 1);
  EXPECT_TRUE(testing_support::eventually([&] { return told == 1; }, 60s)) << "on_update not told of the new run's step";
  EXPECT_EQ(check(consumer.acquire(), 1, whole), "");
  ranks->ranks[0]->publish(3);
  ASSERT_TRUE(testing_support::eventually([&] { return consumer.acquire().step() == 3; }, 60s))
      << consumer.stats().last_error;
  EXPECT_EQ(check(consumer.acquire(), 3, whole), "");
  EXPECT_EQ(consumer.stats().last_error, "") << "said until a version was made";
}

// An old run's rank that still publishes after a new run's rank started (it has not noticed the
// restart yet, or is slow to exit) publishes after every start the consumer knows of: times
// cannot tell its pieces from the new run's, and they would make a model of two runs. With run
// ids they never meet; the consumer serves the old run's last version and says why until the
// new run's every rank has published.
TEST(ProducerRanksFaults, AnOldRunsRankStillPublishingIsNeverPutWithANewRunsRankOfAnotherRunId) {
  auto ranks = std::make_unique<Ranks>(2, false, "tcp://127.0.0.1:0", 0, "job.0");
  const auto endpoints = ranks->endpoints();
  auto options = options_for(endpoints[0]);
  options.producer_timeout = 2s;
  modelcast::Consumer consumer(options);
  const auto whole = [](const Global&) -> Boxes { return std::nullopt; };
  ASSERT_TRUE(serves_step_three(*ranks, consumer)) << consumer.stats().last_error;
  const auto before = consumer.stats();
  const auto served = consumer.acquire().version();

  // The new run's rank 1 takes the old one's place; the old run's rank 0 goes on publishing.
  ranks->ranks[1].reset();
  Rank new1(1, 2, {}, endpoints[1], false, 2048, 0, "job.1");
  ASSERT_TRUE(new1.producer->wait_for_consumers(1, 60s));
  Rank& old0 = *ranks->ranks[0];
  for (std::int64_t step = 4; step <= 5; ++step) {  // each received before the next: none is skipped
    new1.publish(step);
    old0.publish(step);
    ASSERT_TRUE(testing_support::eventually([&] {
      return new1.producer->stats().deliveries >= static_cast<std::uint64_t>(step - 3) &&
             old0.producer->stats().deliveries >= static_cast<std::uint64_t>(step);
    }, 60s)) << consumer.stats().last_error;
  }
  EXPECT_EQ(consumer.acquire().version(), served) << "a version was put together from two runs";
  EXPECT_EQ(consumer.stats().versions_installed, before.versions_installed);
  EXPECT_EQ(consumer.stats().versions_rejected, before.versions_rejected) << consumer.stats().last_error;
  EXPECT_NE(consumer.stats().last_error.find("rank 0's versions are of run 'job.0', rank 1's of run 'job.1'"),
            std::string::npos) << consumer.stats().last_error;

  // The new run's rank 0: the first step both new ranks publish after it started is served.
  ranks.reset();
  Rank new0(0, 2, {"", endpoints[1]}, endpoints[0], false, 2048, 0, "job.1");
  ASSERT_TRUE(new0.producer->wait_for_consumers(1, 60s));
  new0.publish(6);
  new1.publish(6);
  ASSERT_TRUE(testing_support::eventually([&] { return consumer.acquire().step() == 6; }, 60s))
      << consumer.stats().last_error;
  EXPECT_EQ(check(consumer.acquire(), 6, whole), "");
  EXPECT_EQ(consumer.stats().last_error, "") << "said until a version was made";
}

// A run id on one rank and none on another (a variable unset where one rank starts): their
// pieces never meet, and that is no restart that ends by itself. The consumer says so once,
// through on_error, and keeps it as its last error.
TEST(ProducerRanksFaults, ARunIdOnOneRankAndNoneOnAnotherIsReportedOnce) {
  // Three ranks, the one without made last (the newest): each other rank's pieces are let go in
  // turn, and the message names that rank.
  Rank first(1, 3, {}, "tcp://127.0.0.1:0", false, 2048, 0, "job.1");
  Rank second(2, 3, {}, "tcp://127.0.0.1:0", false, 2048, 0, "");
  Rank zero(0, 3, {"", first.producer->control_endpoint(), second.producer->control_endpoint()}, "tcp://127.0.0.1:0",
            false, 2048, 0, "job.1");
  std::mutex mutex;
  std::vector<std::string> errors;
  auto options = options_for(zero.producer->control_endpoint());
  options.on_error = [&](const modelcast::Error& e) {
    std::lock_guard lock(mutex);
    errors.push_back(e.what());
  };
  modelcast::Consumer consumer(options);
  for (auto* rank : {&zero, &first, &second}) ASSERT_TRUE(rank->producer->wait_for_consumers(1, 60s));
  for (std::int64_t step = 1; step <= 3; ++step) {
    zero.publish(step);
    first.publish(step);
    second.publish(step);
    for (auto* rank : {&zero, &first, &second}) {
      ASSERT_TRUE(testing_support::eventually([&] {
        return rank->producer->stats().deliveries >= static_cast<std::uint64_t>(step);
      }, 60s)) << consumer.stats().last_error;
    }
  }
  const std::string said = "sends no run id while rank";
  const std::string why = "their pieces are never put together; give every rank of a run the same run_id";
  EXPECT_TRUE(consumer.acquire().empty());
  EXPECT_NE(consumer.stats().last_error.find(why), std::string::npos) << consumer.stats().last_error;
  std::lock_guard lock(mutex);
  ASSERT_EQ(errors.size(), 1u) << "said once, not at every piece";
  EXPECT_NE(errors[0].find("rank 2 " + said), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find(why), std::string::npos) << errors[0];
}

// A rank whose producer was made without rank and rank_count sends no run id, whatever it was
// given: it was reported as a rank without a run id (the run ids were the same), where the
// mistake is the rank it was made as.
TEST(ProducerRanksFaults, ARankMadeWithoutItsRankIsNamedAsSuchNotByItsRunId) {
  Rank lost(0, 1, {}, "tcp://127.0.0.1:0", false, 2048, 0, "job.1");  // meant as rank 1 of 2
  Rank zero(0, 2, {"", lost.producer->control_endpoint()}, "tcp://127.0.0.1:0", false, 2048, 0, "job.1");
  modelcast::Consumer consumer(options_for(zero.producer->control_endpoint()));
  for (auto* rank : {&zero, &lost}) ASSERT_TRUE(rank->producer->wait_for_consumers(1, 60s));
  zero.publish(1);
  lost.publish(1);
  const std::string said = "the producer reached as rank 1 says it is rank 0 of 1; rank 0 lists 2 ranks";
  EXPECT_TRUE(testing_support::eventually([&] { return consumer.stats().last_error.find(said) != std::string::npos; }, 60s))
      << consumer.stats().last_error;
  EXPECT_EQ(consumer.stats().last_error.find("run id"), std::string::npos) << consumer.stats().last_error;
  EXPECT_TRUE(consumer.acquire().empty());
}

// A rank that publishes before the last rank's producer is made (here rank 1, before rank 0):
// that piece is put with no other rank's, which the consumer says until a version is made; the
// next step both publish is assembled.
TEST(ProducerRanksFaults, APiecePublishedBeforeEveryRankWasUpIsLetGoAndSaidSo) {
  Rank first(1, 2, {}, "tcp://127.0.0.1:0");
  first.publish(1);
  const std::string endpoint1 = first.producer->control_endpoint();
  Rank zero(0, 2, {"", endpoint1}, "tcp://127.0.0.1:0");
  modelcast::Consumer consumer(options_for(zero.producer->control_endpoint()));
  zero.publish(1);
  for (auto* rank : {&zero, &first}) {
    ASSERT_TRUE(testing_support::eventually([&] { return rank->producer->stats().deliveries >= 1; }, 60s))
        << consumer.stats().last_error;
  }
  EXPECT_TRUE(testing_support::eventually([&] {
    return consumer.stats().last_error.find("rank 1's version of step 1 was published before rank 0's producer "
                                            "started") != std::string::npos;
  }, 10s)) << consumer.stats().last_error;
  EXPECT_TRUE(consumer.acquire().empty());
  zero.publish(2);
  first.publish(2);
  ASSERT_TRUE(testing_support::eventually([&] { return consumer.acquire() && consumer.acquire().step() == 2; }, 60s))
      << consumer.stats().last_error;
  EXPECT_EQ(check(consumer.acquire(), 2, [](const Global&) -> Boxes { return std::nullopt; }), "");
  EXPECT_EQ(consumer.stats().last_error, "");
}

// With ranks, a version is every rank's pieces of one step: a rank's steps must rise, or its
// newer pieces of a step would be put with another rank's older ones. One producer may repeat
// or go back (a constant step is common there).
TEST(ProducerRanksFaults, ARankRefusesAStepNotAboveItsLastAndGoesOnPublishing) {
  Ranks ranks(2);
  ranks.ranks[0]->publish(5);
  for (std::int64_t step : {5, 4}) {
    try {
      ranks.ranks[0]->publish(step);
      ADD_FAILURE() << "rank 0 published step " << step << " after step 5";
    } catch (const modelcast::Error& e) {
      EXPECT_EQ(e.code(), modelcast::ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("published step 5 already"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(ranks.ranks[0]->producer->stats().versions_published, 1u);
  ranks.ranks[0]->publish(6);
  EXPECT_EQ(ranks.ranks[0]->producer->stats().versions_published, 2u);

  Rank alone(0, 1, {}, "tcp://127.0.0.1:0");
  alone.publish(3);
  alone.publish(3);
  alone.publish(1);
  EXPECT_EQ(alone.producer->stats().versions_published, 3u);
}

// Assembled versions have memory of their own, as many as the consumer's buffers: readers that
// hold all of them hold updates back, said as such, and the last version stays; once they let
// go, the step that waited is assembled, with no further publish.
TEST(ProducerRanksFaults, ReadersHoldingEveryAssembledBufferHoldUpdatesBackUntilTheyLetGo) {
  Ranks ranks(2);
  auto options = options_for(ranks.endpoint(), {TensorWant::shard("*", 1, 0, 2)});
  options.buffers = 3;
  modelcast::Consumer consumer(options);
  std::vector<modelcast::ModelView> held;
  for (std::int64_t step = 1; step <= 3; ++step) {
    ranks.publish(step);
    ASSERT_TRUE(testing_support::eventually([&] { return consumer.acquire() && consumer.acquire().step() == step; }, 60s))
        << consumer.stats().last_error;
    held.push_back(consumer.acquire());  // steps 1, 2, 3: every assembled buffer
  }
  const auto rejected = consumer.stats().versions_rejected;
  ranks.publish(4);
  ASSERT_TRUE(testing_support::eventually([&] {
    return consumer.stats().last_error.find("held by a view still in use") != std::string::npos;
  }, 60s)) << consumer.stats().last_error;
  EXPECT_NE(consumer.stats().last_error.find("step 4 waits"), std::string::npos) << consumer.stats().last_error;
  EXPECT_EQ(consumer.stats().versions_rejected, rejected) << "a step that waits for a buffer is not refused";
  EXPECT_EQ(consumer.acquire().step(), 3);
  EXPECT_EQ(check(consumer.acquire(), 3, shard_of(1, 0, 2)), "");
  // Let go: step 4 is made without a further publish (it may be the trainer's last).
  held.clear();
  ASSERT_TRUE(testing_support::eventually([&] { return consumer.acquire().step() == 4; }, 60s))
      << consumer.stats().last_error;
  EXPECT_EQ(check(consumer.acquire(), 4, shard_of(1, 0, 2)), "");
  EXPECT_EQ(consumer.stats().last_error, "") << "the wait is over";
  ranks.publish(5);
  ASSERT_TRUE(testing_support::eventually([&] { return consumer.acquire().step() == 5; }, 60s))
      << consumer.stats().last_error;
  EXPECT_EQ(check(consumer.acquire(), 5, shard_of(1, 0, 2)), "");
}

TEST(ProducerRanksFaults, AWantNoRankHoldsIsRefusedNamingTheMissingBox) {
  // Two ranks, and rank 1 registers no piece of "w": its rows 1024..2048 belong to nobody.
  Ranks ranks(2, true);
  modelcast::Consumer whole(options_for(ranks.endpoint()));
  modelcast::Consumer top(options_for(ranks.endpoint(), {TensorWant::shard("w", 0, 0, 2), TensorWant::nothing("*")}));
  modelcast::Consumer absent(options_for(ranks.endpoint(), {TensorWant::whole("nope")}));
  auto converting = options_for(ranks.endpoint(), {TensorWant::nothing("*"), TensorWant::shard("w", 0, 0, 2)});
  converting.conversions = {{"e", DType::kBF16, 0}};  // an i16 tensor: refused as on one producer
  modelcast::Consumer integer(converting);
  ranks.publish(1);
  for (auto* c : {&whole, &absent, &integer}) {
    ASSERT_TRUE(testing_support::eventually([&] { return c->stats().versions_rejected >= 1; }, 60s));
    EXPECT_TRUE(c->acquire().empty());
  }
  EXPECT_NE(whole.stats().last_error.find("[1024:2048, 0:40]"), std::string::npos) << whole.stats().last_error;
  EXPECT_NE(whole.stats().last_error.find("'w'"), std::string::npos) << whole.stats().last_error;
  EXPECT_NE(absent.stats().last_error.find("'nope'"), std::string::npos) << absent.stats().last_error;
  EXPECT_NE(integer.stats().last_error.find("'e'"), std::string::npos) << integer.stats().last_error;
  EXPECT_NE(integer.stats().last_error.find("i16"), std::string::npos) << integer.stats().last_error;
  // What the ranks do hold is served: the top half of "w" is all rank 0's.
  ASSERT_TRUE(testing_support::eventually([&] { return top.acquire() && top.acquire().step() == 1; }, 60s))
      << top.stats().last_error;
  const auto w = global_model(1)[0];
  auto part = top.acquire().tensor("w");
  auto expected = cut(w, {0, 0}, {1024, 40});
  ASSERT_EQ(part.size_bytes(), expected.size());
  EXPECT_EQ(std::memcmp(part.data, expected.data(), expected.size()), 0);
}

// ModelView::tensors() is in the producer's registration order; assembled from ranks it came in
// name order (b, e, emb, head, w), as the pull plan goes.
TEST(ProducerRanksFaults, AnAssembledModelListsItsTensorsInRegistrationOrder) {
  Ranks ranks(3);
  modelcast::Consumer whole(options_for(ranks.endpoint()));
  modelcast::Consumer halves(options_for(ranks.endpoint(), {TensorWant::shard("*", 0, 0, 2)}));
  ranks.publish(1);
  for (auto* c : {&whole, &halves}) {
    auto view = c->wait_for_version(1, 60s);
    ASSERT_TRUE(view) << c->stats().last_error;
    std::vector<std::string> names;
    for (const auto& t : view.tensors()) names.push_back(t.spec->name);
    // Rank 0 registers w, e, b, emb; only the last rank holds head.
    EXPECT_EQ(names, (std::vector<std::string>{"w", "e", "b", "emb", "head"}));
  }
}

// expected_layout is the model's: checked on the whole tensors the ranks' pieces make. Each rank's
// service checked it on its own pieces, and refused the right layout ("'w' has shape [1024,40],
// expected [2048,40]; missing tensor 'head'").
TEST(ProducerRanksFaults, TheExpectedLayoutIsCheckedOnTheAssembledModel) {
  Ranks ranks(2);
  std::vector<modelcast::TensorSpec> layout;
  for (const auto& g : global_model(1)) layout.push_back({g.name, g.dtype, g.shape});
  auto right_options = options_for(ranks.endpoint());
  right_options.expected_layout = layout;
  modelcast::Consumer right(right_options);
  auto wrong_options = options_for(ranks.endpoint());
  wrong_options.expected_layout = layout;
  wrong_options.expected_layout[0].shape = {2048, 41};
  modelcast::Consumer wrong(wrong_options);
  ranks.publish(1);
  auto view = right.wait_for_version(1, 60s);
  ASSERT_TRUE(view) << right.stats().last_error;
  EXPECT_EQ(check(view, 1, [](const Global&) -> Boxes { return std::nullopt; }), "");
  ASSERT_TRUE(testing_support::eventually([&] { return wrong.stats().versions_rejected >= 1; }, 60s));
  EXPECT_NE(wrong.stats().last_error.find("step 1: model 'sharded' version 1 does not match the expected layout: tensor "
                                          "'w' has shape [2048,40], expected [2048,41]"),
            std::string::npos)
      << wrong.stats().last_error;
  EXPECT_TRUE(wrong.acquire().empty());
}

// What goes wrong with another rank than the one the user configured says which: a join rank 1
// refused read "producer refused to join: ..." with no rank or endpoint.
TEST(ProducerRanksFaults, AnotherRanksRefusalNamesTheRankAndItsEndpoint) {
  // Rank 1 admits a single consumer; rank 0 the default. The second consumer is refused by rank 1.
  std::vector<std::string> endpoints(2);
  modelcast::ProducerOptions small;
  small.model_name = "sharded";
  small.rank = 1;
  small.rank_count = 2;
  small.max_consumers = 1;
  modelcast::Producer rank1(small);
  endpoints[1] = rank1.control_endpoint();
  modelcast::ProducerOptions first;
  first.model_name = "sharded";
  first.rank_count = 2;
  first.rank_endpoints = endpoints;
  modelcast::Producer rank0(first);
  std::vector<float> x(4, 1.0f);
  for (auto* p : {&rank0, &rank1}) {
    modelcast::TensorRef ref{{"x", DType::kF32, {2, 2}}, x.data()};
    ref.global_shape = {4, 2};
    ref.global_offset = {p == &rank0 ? 0 : 2, 0};
    p->register_tensor(ref);
  }
  modelcast::Consumer admitted(options_for(rank0.control_endpoint()));
  ASSERT_TRUE(rank1.wait_for_consumers(1, 60s));
  std::mutex mutex;
  std::vector<std::string> errors;
  auto options = options_for(rank0.control_endpoint());
  options.on_error = [&](const modelcast::Error& e) {
    std::lock_guard lock(mutex);
    errors.emplace_back(e.what());
  };
  modelcast::Consumer refused(options);
  const std::string said = "rank 1 at '" + endpoints[1] + "': producer refused to join";
  ASSERT_TRUE(testing_support::eventually([&] { return refused.stats().last_error.find(said) == 0; }, 60s))
      << refused.stats().last_error;
  // on_error runs after last_error is set.
  ASSERT_TRUE(testing_support::eventually([&] {
    std::lock_guard lock(mutex);
    return !errors.empty();
  }, 60s));
  std::lock_guard lock(mutex);
  EXPECT_EQ(errors[0].find(said), 0u) << errors[0];
}

// stats().last_error is the newest error of the ranks' and the assembler's: a step the assembler
// refused (rank 1 came up with another shape for "w") kept its message for as long as the layout
// lasted, over every later one, so that once rank 1 was fixed and then gone for good, monitoring
// still read the layout mistake, not the missing rank.
TEST(ProducerRanksFaults, TheNewestErrorOfTheRanksAndTheAssemblerIsTheOneReported) {
  LogsSaid logs;
  Ranks ranks(2);
  const std::string rank1 = ranks.ranks[1]->producer->control_endpoint();
  ranks.ranks[1].reset();
  ranks.ranks[1] = std::make_unique<Rank>(1, 2, std::vector<std::string>{}, rank1, false, 1000);  // "w" [1000, 40]
  auto options = options_for(ranks.endpoint());
  options.producer_timeout = 400ms;
  modelcast::Consumer consumer(options);
  ranks.publish(1);
  ASSERT_TRUE(testing_support::eventually([&] { return consumer.stats().versions_rejected > 0; }, 30s));
  const std::string refused = consumer.stats().last_error;
  ASSERT_NE(refused.find("rank 1 registers it as [1000, 40]"), std::string::npos) << refused;
  ranks.ranks[1].reset();
  ranks.ranks[1] = std::make_unique<Rank>(1, 2, std::vector<std::string>{}, rank1);  // fixed
  ranks.publish(2);
  ASSERT_TRUE(testing_support::eventually([&] {
    auto view = consumer.acquire();
    return view && view.step() == 2;
  }, 30s)) << consumer.stats().last_error;
  ranks.ranks[1].reset();  // gone for good
  const std::string said = "rank 1 at '" + rank1 + "': ";
  EXPECT_TRUE(testing_support::eventually([&] { return consumer.stats().last_error.rfind(said, 0) == 0; }, 30s))
      << "last_error: " << consumer.stats().last_error;
  // The service's own lines name the model and the rank too: the user configured rank 0's endpoint only.
  EXPECT_GE(logs.containing("modelcast.consumer: model 'sharded': " + said + "no answer from a producer at " + rank1), 1);
}

// Ranks that publish different steps (rank 0 the even ones, rank 1 the odd ones: an off-by-one in
// a trainer) never meet: the consumer fetched every piece and kept its model without a word. It
// now says so, once through on_error and in last_error while it lasts, naming what each rank
// holds, and goes on once the ranks publish a step together.
TEST(ProducerRanksFaults, RanksThatNeverPublishTheSameStepAreSaidToBeOutOfStep) {
  LogsSaid logs;
  Ranks ranks(2);
  ErrorsSaid errors;
  modelcast::Consumer consumer(collecting_errors(ranks, errors));
  std::uint64_t published[2] = {0, 0};
  for (std::int64_t even = 2; even <= 8; even += 2) {  // out of step from the second on: said two later
    publish_delivered(ranks, 0, even, published, consumer);
    publish_delivered(ranks, 1, even + 1, published, consumer);
  }
  const std::string said = "no step can be put together";
  const std::string held =
      said + ": rank 0 holds steps 6, 8 (it publishes every 2 steps); rank 1 holds steps 7, 9 (it publishes every 2 steps)";
  ASSERT_TRUE(testing_support::eventually([&] { return consumer.stats().last_error.find(held) == 0; }, 30s))
      << consumer.stats().last_error;
  EXPECT_TRUE(consumer.acquire().empty());
  ranks.publish(10);
  ASSERT_TRUE(comes_to_step(consumer, 10)) << consumer.stats().last_error;
  EXPECT_EQ(consumer.stats().last_error.find(said), std::string::npos) << consumer.stats().last_error;
  EXPECT_EQ(errors.starting_with(said), 1) << "said once, through on_error";
  // And logged, naming the model (modelcastd leaves a consumer's errors to its log).
  EXPECT_EQ(logs.containing("modelcast.consumer: model 'sharded': " + said), 1);
}

// Rank 1 stops publishing while rank 0 goes on (a trainer rank stuck): the consumer stays at the
// last step both published, as documented, but it said nothing. Now once through on_error and in
// last_error while it lasts; once rank 1 publishes again the step both hold is assembled and it
// is no longer said.
TEST(ProducerRanksFaults, ARankThatStopsPublishingWhileTheOthersGoOnIsSaid) {
  Ranks ranks(2);
  ErrorsSaid errors;
  modelcast::Consumer consumer(collecting_errors(ranks, errors));
  std::uint64_t published[2] = {0, 0};
  for (std::int64_t step = 1; step <= 2; ++step) {
    publish_delivered(ranks, 0, step, published, consumer);
    publish_delivered(ranks, 1, step, published, consumer);
  }
  for (std::int64_t step = 3; step <= 6; ++step) publish_delivered(ranks, 0, step, published, consumer);
  const std::string said = "a rank stopped publishing: rank 1 announced no step after 2 while rank 0 went on to step";
  ASSERT_TRUE(testing_support::eventually([&] { return consumer.stats().last_error.find(said) == 0; }, 30s))
      << consumer.stats().last_error;
  EXPECT_EQ(consumer.acquire().step(), 2);
  publish_delivered(ranks, 1, 6, published, consumer);
  ASSERT_TRUE(comes_to_step(consumer, 6)) << consumer.stats().last_error;
  EXPECT_EQ(consumer.stats().last_error.find("a rank stopped publishing"), std::string::npos) << consumer.stats().last_error;
  EXPECT_EQ(errors.starting_with(said), 1) << "said once, through on_error";
}

// Only rank 0 tells consumers where the other ranks are: a consumer pointed at rank 1 took it for
// a whole producer and installed its [1024, 40] piece of "w" as the model, without a word.
TEST(ProducerRanksFaults, AConsumerPointedAtAnotherRankThanZeroIsToldToUseRankZero) {
  Ranks ranks(2);
  auto options = options_for(ranks.ranks[1]->producer->control_endpoint());
  std::mutex mutex;
  std::vector<std::string> errors;
  options.on_error = [&](const modelcast::Error& e) {
    std::lock_guard lock(mutex);
    errors.emplace_back(e.what());
  };
  modelcast::Consumer wrong(options);
  modelcast::Consumer right(options_for(ranks.endpoint()));
  ranks.publish(1);
  ASSERT_TRUE(right.wait_for_version(1, 60s)) << right.stats().last_error;
  const std::string said = "is rank 1 of a model several ranks publish, and holds only its own pieces: point "
                           "producer_endpoint at rank 0";
  ASSERT_TRUE(testing_support::eventually([&] { return wrong.stats().last_error.find(said) != std::string::npos; }, 60s))
      << wrong.stats().last_error;
  ranks.publish(2);
  ASSERT_TRUE(right.wait_for_version(2, 60s)) << right.stats().last_error;
  EXPECT_TRUE(wrong.acquire().empty()) << "rank 1's pieces were installed as the model";
  EXPECT_EQ(wrong.stats().current_version, 0u);
  EXPECT_FALSE(wrong.stats().producer_connected);
  std::lock_guard lock(mutex);
  ASSERT_EQ(errors.size(), 1u) << "said once, not at every join";
  EXPECT_NE(errors[0].find(said), std::string::npos) << errors[0];
}

TEST(ProducerRanksFaults, AnOnErrorThatReadsStatsWhileTheRanksAreRefusedReturns) {
  // Two caller buffers are too few to assemble ranks: the join reply's rank list is refused
  // through on_error, which reads stats() as the headers allow. Reported under the consumer's
  // own lock, that call never returned and ~Consumer hung joining the service thread.
  Ranks ranks(2);
  constexpr std::size_t kBuffer = 4 << 20;
  std::vector<std::byte> memory(2 * kBuffer + 16);
  auto* base = reinterpret_cast<std::byte*>((reinterpret_cast<std::uintptr_t>(memory.data()) + 15) & ~std::uintptr_t{15});
  auto options = options_for(ranks.endpoint());
  options.caller_buffers = {std::span<std::byte>(base, kBuffer), std::span<std::byte>(base + kBuffer, kBuffer)};
  testing_support::Gate constructed;  // on_error may run before the constructor has returned
  std::unique_ptr<modelcast::Consumer> consumer;
  std::atomic<int> returned{0};
  std::mutex mutex;
  std::string seen;
  options.on_error = [&](const modelcast::Error& e) {
    constructed.wait();
    const auto stats = consumer->stats();
    {
      std::lock_guard lock(mutex);
      seen = e.what();
    }
    EXPECT_EQ(stats.current_version, 0u);
    returned.fetch_add(1);
  };
  testing_support::Gate::Opener opener(constructed);
  consumer = std::make_unique<modelcast::Consumer>(options);
  constructed.open();
  ASSERT_TRUE(testing_support::eventually([&] { return returned.load() >= 1; }, 60s))
      << "on_error did not return after calling stats()";
  {
    std::lock_guard lock(mutex);
    EXPECT_NE(seen.find(">= 3 caller_buffers"), std::string::npos) << seen;
  }
  ranks.publish(1);
  consumer.reset();  // joins the service thread, which must not be stuck in the callback
}

TEST(ProducerRanksFaults, RanksAreCheckedWhereTheyAreConfigured) {
  modelcast::ProducerOptions options;
  options.rank = 2;
  options.rank_count = 2;
  EXPECT_THROW(modelcast::Producer{options}, modelcast::Error);
  options.rank = 0;
  try {
    modelcast::Producer p(options);
    ADD_FAILURE() << "rank 0 of 2 without rank_endpoints was accepted";
  } catch (const modelcast::Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank_endpoints"), std::string::npos) << e.what();
  }
  options.rank_count = 257;  // more than a consumer takes
  options.rank_endpoints.assign(257, "tcp://127.0.0.1:0");
  try {
    modelcast::Producer p(options);
    ADD_FAILURE() << "rank_count 257 was accepted";
  } catch (const modelcast::Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank_count 257 is more than the 256 ranks"), std::string::npos) << e.what();
  }
  // Endpoints every consumer would refuse, each on its own once it joined, are refused here.
  options.rank_count = 2;
  for (const auto& [endpoint, said] : std::vector<std::pair<std::string, std::string>>{
           {"bogus://x", "rank_endpoints[1] 'bogus://x' must start with tcp:// or ipc://"},
           {"tcp://127.0.0.1:99999", "rank_endpoints[1] 'tcp://127.0.0.1:99999' has port '99999'"},
           {"", "rank_endpoints[1] '' must start with"},
           {"tcp://a\nb:1", "holds control or non-ASCII characters"}}) {
    options.rank_endpoints = {"", endpoint};
    try {
      modelcast::Producer p(options);
      ADD_FAILURE() << "rank endpoint '" << endpoint << "' was accepted";
    } catch (const modelcast::Error& e) {
      EXPECT_EQ(e.code(), modelcast::ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(said), std::string::npos) << e.what();
    }
  }
  // Two ranks at one endpoint, a wildcard consumers cannot reach, and entries a rank_count of 1
  // ignored: each was accepted, and consumers failed later or took one rank's pieces twice.
  options.rank_count = 3;
  for (const auto& [endpoints, said] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"", "tcp://127.0.0.1:5001", "tcp://127.0.0.1:5001"},
            "rank_endpoints[2] and rank_endpoints[1] are both 'tcp://127.0.0.1:5001'; each rank has a control endpoint"},
           {{"tcp://127.0.0.1:5001", "tcp://127.0.0.1:5001", "tcp://127.0.0.1:5002"},
            "rank_endpoints[1] and rank_endpoints[0] are both 'tcp://127.0.0.1:5001'"},
           {{"", "tcp://*:5001", "tcp://127.0.0.1:5002"},
            "rank_endpoints[1]: '*' is a wildcard a producer binds to, not an address to connect to"},
           // What control_endpoint() says of a rank bound to tcp://*:P or tcp://0.0.0.0:P (the
           // all_gather recipe's input on several hosts).
           {{"", "tcp://127.0.0.1:5001", "tcp://0.0.0.0:5002"},
            "rank_endpoints[2]: '0.0.0.0' is a wildcard a producer binds to, not an address to connect to"},
           {{"", "tcp://[::]:5001", "tcp://127.0.0.1:5002"},
            "rank_endpoints[1]: '[::]' is a wildcard"},
           {{"", "tcp://:5001", "tcp://127.0.0.1:5002"}, "rank_endpoints[1]: no host before the port"}}) {
    options.rank_endpoints = endpoints;
    try {
      modelcast::Producer p(options);
      ADD_FAILURE() << said;
    } catch (const modelcast::Error& e) {
      EXPECT_EQ(e.code(), modelcast::ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(said), std::string::npos) << e.what();
    }
  }
  options.rank_count = 1;
  options.rank_endpoints = {"tcp://127.0.0.1:5001", "tcp://127.0.0.1:5002"};
  try {
    modelcast::Producer p(options);
    ADD_FAILURE() << "two rank_endpoints with rank_count 1 were accepted";
  } catch (const modelcast::Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank_endpoints has 2 entries, but rank_count is 1"), std::string::npos) << e.what();
  }
  options.rank_endpoints = {"tcp://127.0.0.1:0"};  // its own, from an all_gather of one: fine
  options.control_endpoint = "tcp://127.0.0.1:0";
  EXPECT_NO_THROW(modelcast::Producer{options});

  modelcast::ProducerOptions one;
  modelcast::Producer producer(one);
  std::vector<float> x(8);
  modelcast::TensorRef ref{{"x", DType::kF32, {2, 4}}, x.data()};
  ref.global_shape = {4, 4};
  ref.global_offset = {3, 0};  // rows 3..5 of a 4-row tensor
  try {
    producer.register_tensor(ref);
    ADD_FAILURE() << "a piece outside its global shape was accepted";
  } catch (const modelcast::Error& e) {
    EXPECT_EQ(e.code(), modelcast::ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("'x'"), std::string::npos) << e.what();
  }
  // A piece that fits, on a producer that is its model's only rank: the rest of the tensor would
  // be published by no one, and a consumer wanting it got a model without it, without a word.
  ref.global_offset = {2, 0};
  try {
    producer.register_tensor(ref);
    ADD_FAILURE() << "a piece on the only rank was accepted";
  } catch (const modelcast::Error& e) {
    EXPECT_EQ(e.code(), modelcast::ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("tensor 'x' is a piece of shape [2, 4] at [2, 0] of [4, 4], but this producer is "
                                         "its model's only rank (rank_count 1)"),
              std::string::npos) << e.what();
  }
  ref.global_offset = {0, 0};  // the whole of it, as a piece: fine
  ref.global_shape = {2, 4};
  EXPECT_NO_THROW(producer.register_tensor(ref));
}

namespace {

std::uint64_t peer_stat(testing_support::ChildProcess& peer, const std::string& key) {
  auto line = peer.ask("stats", "stats ");
  if (!line) return 0;
  std::istringstream words(line->substr(6));
  for (std::string word; words >> word;) {
    if (word.rfind(key + "=", 0) == 0) return std::stoull(word.substr(key.size() + 1));
  }
  return 0;
}

// Empty if every tensor of `view` is two copies, end to end, of the test model's tensor at `step`
// (both ranks hold the same values: their pieces are the halves).
std::string check_halves(const modelcast::ModelView& view, std::int64_t step) {
  auto model = testmodel::make(512);
  testmodel::fill(model, 1, static_cast<std::uint64_t>(step));
  if (view.step() != step) return "step " + std::to_string(view.step());
  for (const auto& t : model) {
    auto v = view.find(t.spec.name);
    if (!v) return "'" + t.spec.name + "' is missing";
    const std::size_t half = t.spec.size_bytes();
    if (v->size_bytes() != 2 * half) return "'" + t.spec.name + "' has " + std::to_string(v->size_bytes()) + " bytes";
    for (int h = 0; h < 2; ++h) {
      if (std::memcmp(static_cast<const std::byte*>(v->data) + h * half, t.words.data(), half) != 0) {
        return "'" + t.spec.name + "' half " + std::to_string(h) + " differs";
      }
    }
  }
  return {};
}

}  // namespace

// Ranks as processes: rank 1 is stopped and killed after rank 0 published a step rank 1 never
// sent; consumers stay on the step before, and a rank 1 restarted at its endpoint brings them on
// at the next step both publish.
TEST(ProducerRanksFaults, ARankKilledMidStepLeavesConsumersOnTheLastCommonStepAndARestartedOneBringsThemOn) {
  setenv("UCX_NET_DEVICES", "lo", 1);
  using testing_support::ChildProcess;
  auto start = [](std::vector<std::string> args) {
    std::vector<std::string> all{MODELCAST_TEST_PEER, "producer", "--versions", "0", "--kib", "512", "--chunk-kib", "64",
                                 "--ranks", "2"};
    all.insert(all.end(), args.begin(), args.end());
    return std::make_unique<ChildProcess>(all);
  };
  auto rank1 = start({"--endpoint", "tcp://127.0.0.1:0", "--rank", "1"});
  auto ready1 = rank1->wait_for_line("ready ");
  ASSERT_TRUE(ready1);
  const std::string endpoint1 = ready1->substr(6);
  auto rank0 = start({"--endpoint", "tcp://127.0.0.1:0", "--rank", "0", "--rank-endpoints", "-," + endpoint1});
  auto ready0 = rank0->wait_for_line("ready ");
  ASSERT_TRUE(ready0);
  modelcast::ConsumerOptions options;
  options.producer_endpoint = ready0->substr(6);
  options.model_name = "test";
  options.producer_timeout = std::chrono::milliseconds(500);
  modelcast::Consumer consumer(options);
  ASSERT_TRUE(rank0->ask("publish", "published 1"));
  ASSERT_TRUE(rank1->ask("publish", "published 1"));
  ASSERT_TRUE(testing_support::eventually([&] { return consumer.acquire() && consumer.acquire().step() == 1; }, 60s))
      << consumer.stats().last_error;
  EXPECT_EQ(check_halves(consumer.acquire(), 1), "");

  // Rank 1 stops; rank 0 publishes step 2, which reaches the consumer's rank-0 side (rank 0's
  // second delivery); rank 1 is killed with step 2 never sent.
  ASSERT_TRUE(testing_support::stop_process(rank1->pid()));
  ASSERT_TRUE(rank0->ask("publish", "published 2"));
  ASSERT_TRUE(testing_support::eventually([&] { return peer_stat(*rank0, "deliveries") >= 2; }, 60s));
  rank1->kill_now();
  rank1->wait();
  ASSERT_TRUE(testing_support::eventually([&] { return !consumer.stats().producer_connected; }, 60s));
  EXPECT_EQ(consumer.acquire().step(), 1) << "a step rank 1 never sent was installed";
  EXPECT_EQ(check_halves(consumer.acquire(), 1), "");

  // Rank 1 again, at its endpoint, publishing steps 1 and 2: the consumer joins it, but rank 0's
  // step 2 is of before this run began and stays apart; the next step both publish moves it on.
  rank1 = start({"--endpoint", endpoint1, "--rank", "1"});
  ASSERT_TRUE(rank1->wait_for_line("ready "));
  for (int step = 1; step <= 2; ++step) {  // each received before the next: none is skipped
    ASSERT_TRUE(rank1->ask("publish", "published " + std::to_string(step)));
    ASSERT_TRUE(testing_support::eventually([&] { return peer_stat(*rank1, "deliveries") >= static_cast<std::uint64_t>(step); }, 60s));
  }
  EXPECT_EQ(consumer.acquire().step(), 1) << "rank 0's step 2 from before rank 1 restarted was put with the new run's";
  ASSERT_TRUE(rank0->ask("publish", "published 3"));
  ASSERT_TRUE(rank1->ask("publish", "published 3"));
  ASSERT_TRUE(testing_support::eventually([&] { return consumer.acquire().step() == 3; }, 60s))
      << consumer.stats().last_error;
  EXPECT_EQ(check_halves(consumer.acquire(), 3), "");
  for (auto* r : {rank0.get(), rank1.get()}) {
    r->close_stdin();
    EXPECT_EQ(r->wait(), 0);
  }
}

// Two server ranks in a group, each keeping a half of every tensor of a model two producer ranks
// publish: each producer rank commits its versions to the group, so a member assembles a step
// only once every member holds every rank's pieces of it. One member is held in its first
// update: the other prepares step 2 from both ranks and stays on step 1 until it is let go.
// Consumers of the ranks call a step by one number, rank 0's for its piece: one that joined late
// and one there from the start alike (each counted its own assemblies from 1).
TEST(ProducerRanks, EveryConsumerNumbersAnAssembledStepAsRankZeroDid) {
  Ranks ranks(2);
  modelcast::Consumer early(options_for(ranks.endpoint()));
  for (std::int64_t step = 1; step <= 3; ++step) {
    ranks.publish(step);
    ASSERT_TRUE(testing_support::eventually([&] { return early.acquire() && early.acquire().step() == step; }, 60s))
        << early.stats().last_error;
  }
  modelcast::Consumer late(options_for(ranks.endpoint()));
  ASSERT_TRUE(testing_support::eventually([&] { return late.acquire() && late.acquire().step() == 3; }, 60s))
      << late.stats().last_error;
  EXPECT_EQ(late.acquire().version(), 3u);
  ranks.publish(4);
  for (auto* c : {&early, &late}) {
    ASSERT_TRUE(testing_support::eventually([&] { return c->acquire().step() == 4; }, 60s)) << c->stats().last_error;
    EXPECT_EQ(c->acquire().version(), 4u);
    EXPECT_EQ(c->stats().current_version, 4u);
  }
}

TEST(ProducerRanksFaults, AGroupOfServerRanksSwitchesStepsTogether) {
  Ranks ranks(2);
  testing_support::Gate gate;
  std::atomic<bool> held{false};
  std::mutex mutex;
  std::vector<std::vector<std::int64_t>> steps(2);
  std::vector<std::unique_ptr<modelcast::Consumer>> members;
  testing_support::Gate::Opener open_at_exit(gate);
  for (std::size_t k = 0; k < 2; ++k) {
    auto o = options_for(ranks.endpoint(), {TensorWant::shard("*", 0, k, 2)});
    o.group = "tp";
    o.group_size = 2;
    o.consumer_name = "member" + std::to_string(k);
    o.on_update = [&, k](const modelcast::ModelView& view) {
      {
        std::lock_guard lock(mutex);
        steps[k].push_back(view.step());
      }
      if (k == 1 && !held.exchange(true)) gate.wait();
    };
    members.push_back(std::make_unique<modelcast::Consumer>(o));
  }
  ranks.publish(1);
  for (auto& m : members) {
    ASSERT_TRUE(testing_support::eventually([&] { return m->acquire() && m->acquire().step() == 1; }, 60s))
        << m->stats().last_error;
  }
  ASSERT_TRUE(testing_support::eventually([&] { return held.load(); }, 60s));
  ranks.publish(2);
  // Member 1's held thread is one rank's; its other rank's side and both of member 0's fetch and
  // verify step 2 and ack it: 4 deliveries of step 1 and 3 of step 2 across the producers. Member
  // 0 then holds every piece of step 2, yet serves step 1.
  auto deliveries = [&] {
    std::uint64_t n = 0;
    for (auto& r : ranks.ranks) n += r->producer->stats().deliveries;
    return n;
  };
  ASSERT_TRUE(testing_support::eventually([&] { return deliveries() >= 7; }, 60s)) << members[0]->stats().last_error;
  EXPECT_EQ(members[0]->acquire().step(), 1) << "member 0 switched without member 1";
  gate.open();
  for (std::size_t k = 0; k < 2; ++k) {
    ASSERT_TRUE(testing_support::eventually([&] { return members[k]->acquire().step() == 2; }, 60s))
        << members[k]->stats().last_error;
    auto boxes = [&](const Global& g) -> std::optional<std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>>> {
      std::vector<std::int64_t> offset(g.shape.size(), 0), extent = g.shape;
      std::tie(offset[0], extent[0]) = chunk(g.shape[0], k, 2);
      return std::make_pair(offset, extent);
    };
    EXPECT_EQ(check(members[k]->acquire(), 2, boxes), "") << "member " << k;
  }
  std::lock_guard lock(mutex);
  EXPECT_EQ(steps[0], (std::vector<std::int64_t>{1, 2}));
  EXPECT_EQ(steps[1], (std::vector<std::int64_t>{1, 2}));
}
