// The assembler's judgement of ranks that never meet on a step, on versions that carry no bytes:
// only what it says is looked at (no step here can be assembled).
#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/consumer/rank_assembler.h"
#include "core/consumer/version_store.h"

namespace modelcast::consumer {
namespace {

std::shared_ptr<const detail::InstalledVersion> piece(std::int64_t step) {
  auto version = std::make_shared<detail::InstalledVersion>();
  version->manifest.step = step;
  version->manifest.version = static_cast<std::uint64_t>(step);
  version->manifest.incarnation = 1;
  version->manifest.publish_time_ns = 1000 + step;
  return version;
}

// A piece that assembles: rank `rank` of `ranks` holds row `rank` of "w" [ranks, 4] (f32).
std::shared_ptr<const detail::InstalledVersion> row_piece(std::size_t rank, std::size_t ranks, std::int64_t step) {
  auto version = std::const_pointer_cast<detail::InstalledVersion>(piece(step));
  auto& m = version->manifest;
  m.rank = static_cast<std::uint32_t>(rank);
  m.rank_count = static_cast<std::uint32_t>(ranks);
  m.block_bytes = 1 << 20;
  TensorEntry row;
  row.spec = TensorSpec{"w", DType::kF32, {1, 4}};
  row.size = 16;
  row.global_shape = {static_cast<std::int64_t>(ranks), 4};
  row.global_offset = {static_cast<std::int64_t>(rank), 0};
  m.tensors.push_back(row);
  auto buffer = std::make_shared<detail::ReceiveBuffer>();
  buffer->owned = HostBuffer(64);
  buffer->memory = std::span<std::byte>(buffer->owned.data(), 64);
  const float values[4] = {static_cast<float>(step), static_cast<float>(rank), 0, 0};
  std::memcpy(buffer->memory.data(), values, sizeof values);
  version->buffer = std::move(buffer);
  return version;
}

// `n` ranks whose pieces assemble, counting what the consumer is told.
struct Ranks {
  explicit Ranks(std::size_t ranks)
      : n(ranks),
        assembler{ranks,     {}, {}, {}, [this](const ModelView&) { ++updates; },
                  [this](const Error& e) { errors.push_back(e.what()); },
                  store, [](std::size_t, std::vector<TensorWant>, std::uint64_t) {}} {}
  // Rank `rank` announces `step` and the consumer fetches it.
  void publish(std::size_t rank, std::int64_t step) {
    assembler.announced(rank, 1, step);
    assembler.offer(rank, row_piece(rank, n, step));
  }
  std::size_t said_stopped() const {
    return static_cast<std::size_t>(std::count_if(errors.begin(), errors.end(), [](const std::string& e) {
      return e.rfind("a rank stopped publishing", 0) == 0;
    }));
  }
  std::int64_t step_seen() const { return store.current() ? store.current()->manifest.step : -1; }
  std::size_t n;
  VersionStore store{2, {}};
  std::vector<std::string> errors;
  int updates = 0;
  RankAssembler assembler;
};

struct TwoRanks {
  VersionStore store{2, {}};
  std::vector<std::string> errors;
  RankAssembler assembler{2,     {}, {}, {}, nullptr, [this](const Error& e) { errors.push_back(e.what()); },
                          store, [](std::size_t, std::vector<TensorWant>, std::uint64_t) {}};
  // Rank `rank` publishes `step` (announced to the consumer, and again by heartbeats: one naming
  // it, one sent while it was copied naming the step before) and the consumer fetches it or not.
  void publish(std::size_t rank, std::int64_t step, bool fetched) {
    assembler.announced(rank, 1, step);
    assembler.announced(rank, 1, step);
    if (previous[rank]) assembler.announced(rank, 1, *previous[rank]);
    previous[rank] = step;
    if (fetched) assembler.offer(rank, piece(step));
  }
  std::optional<std::int64_t> previous[2];
  std::size_t said(const std::string& what) const {
    return static_cast<std::size_t>(
        std::count_if(errors.begin(), errors.end(), [&](const std::string& e) { return e.rfind(what, 0) == 0; }));
  }
  std::size_t said_out_of_step() const { return said("no step can be put together"); }
  std::size_t said_stopped() const { return said("a rank stopped publishing"); }
};

// Both ranks publish every step; a consumer slower than the trainer fetched rank 0's odd steps
// and rank 1's even ones. Judged by the versions fetched, each rank published every other step,
// and the consumer said the trainer was out of step: the steps published are what count.
TEST(RankAssembler, RanksPublishingEveryStepFetchedAtOtherStepsAreNotOutOfStep) {
  TwoRanks t;
  for (std::int64_t step = 1; step <= 6; ++step) {
    t.publish(0, step, step % 2 == 1);
    t.publish(1, step, step % 2 == 0);
  }
  EXPECT_EQ(t.said_out_of_step(), 0u) << t.errors.front();
  EXPECT_EQ(t.assembler.counts().waiting.find("no step"), std::string::npos) << t.assembler.counts().waiting;
}

// Rank 0 publishes the even steps, rank 1 the odd ones: said once it lasted two more steps of
// each rank, then in `waiting` while it lasts; once the ranks publish alike again it is no longer
// said (it stayed, naming steps the ranks no longer held).
TEST(RankAssembler, RanksOutOfStepAreSaidOnceAndNoLongerOnceTheyMayMeet) {
  TwoRanks t;
  for (std::int64_t step = 2; step <= 8; step += 2) {
    t.publish(0, step, true);
    t.publish(1, step + 1, true);
  }
  EXPECT_EQ(t.said_out_of_step(), 1u);
  EXPECT_EQ(t.assembler.counts().waiting,
            "no step can be put together: rank 0 holds steps 6, 8 (it publishes every 2 steps); rank 1 holds steps 7, "
            "9 (it publishes every 2 steps), and none will bring a step another holds: every rank must publish the "
            "same steps");
  t.publish(0, 10, false);
  t.publish(0, 11, true);  // an odd step at last: rank 1 (every 2 steps, at 9) may bring 11
  EXPECT_EQ(t.assembler.counts().waiting.find("no step"), std::string::npos) << t.assembler.counts().waiting;
  EXPECT_EQ(t.said_out_of_step(), 1u);
}

// Both ranks publish at uneven gaps (0, 3, 6, 8, 10), rank 1 two publishes behind: by its gaps so
// far (every 3 steps) it would never bring 8 or 10, but it does. Not said: it is not out of step,
// only behind, and meets rank 0 when it catches up.
TEST(RankAssembler, ARankBehindAtUnevenGapsIsNotOutOfStep) {
  TwoRanks t;
  for (const auto& [rank, step] : std::vector<std::pair<std::size_t, std::int64_t>>{
           {0, 0}, {1, 0}, {0, 3}, {1, 3}, {0, 6}, {0, 8}, {1, 6}, {0, 10}}) {
    t.publish(rank, step, true);
  }
  // Rank 0 holds 8 and 10, rank 1 holds 3 and 6 and has published every 3 steps so far.
  EXPECT_EQ(t.said_out_of_step(), 0u) << t.errors.back();
  t.publish(1, 8, true);
  t.publish(1, 10, true);
  EXPECT_EQ(t.said_out_of_step(), 0u) << t.errors.back();
  EXPECT_EQ(t.assembler.counts().waiting.find("no step"), std::string::npos) << t.assembler.counts().waiting;
}

// A rank whose publish failed after it was announced (step 20), and whose trainer then went on
// from an earlier step (15, 25, ...): its cadence is learned from the steps after the step back.
// The step back was taken for a heartbeat and ignored: the gaps 10 and 5 made "every 5 steps"
// of a rank publishing every 10, and ranks out of step went unsaid.
TEST(RankAssembler, AStepBackAfterAFailedPublishIsLearnedAfresh) {
  TwoRanks t;
  t.publish(0, 10, true);
  t.publish(0, 20, false);  // announced; its copy failed
  for (std::int64_t step = 15; step <= 55; step += 10) {
    t.publish(0, step, true);
    t.publish(1, step + 5, true);
  }
  EXPECT_EQ(t.said_out_of_step(), 1u) << t.assembler.counts().waiting;
  EXPECT_NE(t.assembler.counts().waiting.find("rank 0 holds steps 45, 55 (it publishes every 10 steps)"),
            std::string::npos)
      << t.assembler.counts().waiting;
}

// Rank 1 stops publishing after step 3 (its heartbeats go on naming 3) while rank 0 goes on: the
// model stayed at step 3 without a word. Said once rank 0 published three steps more, in
// `waiting` while it lasts, and no longer once rank 1 publishes again.
TEST(RankAssembler, ARankThatStopsPublishingWhileTheOthersGoOnIsSaid) {
  TwoRanks t;
  for (std::int64_t step = 1; step <= 3; ++step) {
    t.publish(0, step, true);
    t.publish(1, step, true);
  }
  for (std::int64_t step = 4; step <= 8; ++step) {
    t.publish(0, step, true);
    t.assembler.announced(1, 1, 3);  // rank 1's heartbeat
    EXPECT_EQ(t.said_stopped(), step >= 6 ? 1u : 0u) << "after step " << step;
  }
  EXPECT_EQ(t.assembler.counts().waiting,
            "a rank stopped publishing: rank 1 announced no step after 3 while rank 0 went on to step 8; the model "
            "stays at the newest step every rank published until each publishes again");
  t.publish(1, 8, true);
  EXPECT_EQ(t.assembler.counts().waiting, "");
  EXPECT_EQ(t.said_stopped(), 1u);
  EXPECT_EQ(t.said_out_of_step(), 0u);
}

// Rank 0 publishes every step, rank 1 every third (they meet at 3, 6, ...), each of rank 1's
// steps announced only once rank 0 reached the next of them: rank 0 announces three steps between
// two of rank 1's and is six ahead, which is six steps of a rank publishing every step, but one
// publish of rank 1's: behind, not stopped.
TEST(RankAssembler, ARankOnePublishLateOnItsOwnCadenceIsNotSaidToHaveStopped) {
  TwoRanks t;
  for (std::int64_t step = 1; step <= 30; ++step) {
    t.publish(0, step, true);
    if (step % 3 == 0 && step >= 6) t.publish(1, step - 3, true);
  }
  EXPECT_EQ(t.said_stopped(), 0u) << t.errors.front();
  EXPECT_EQ(t.assembler.counts().waiting, "");
}

// The offer that first finds a rank stopped may also make a step (the stopped rank's slower
// transfer of its last step lands then): the step is installed and told like any other. The
// report went where a refusal goes, and the step readers saw was counted rejected, never told to
// on_update, and kept the report in last_error for good.
TEST(RankAssembler, AStepMadeByTheOfferThatFindsARankStoppedIsInstalledAndTold) {
  Ranks t(2);
  for (std::int64_t step = 1; step <= 2; ++step) {
    t.publish(0, step);
    t.publish(1, step);
  }
  t.assembler.announced(1, 1, 3);  // rank 1 publishes 3 and stops; its transfer of 3 is slow
  t.publish(0, 3);
  for (std::int64_t step = 4; step <= 6; ++step) t.assembler.announced(0, 1, step);
  t.assembler.offer(1, row_piece(1, 2, 3));
  EXPECT_EQ(t.step_seen(), 3);
  EXPECT_EQ(t.updates, 3);
  EXPECT_EQ(t.said_stopped(), 1u);
  const auto counts = t.assembler.counts();
  EXPECT_EQ(counts.versions_rejected, 0u) << counts.last_error;
  EXPECT_EQ(counts.last_error, "");
  EXPECT_EQ(counts.waiting.rfind("a rank stopped publishing: rank 1 announced no step after 3", 0), 0u)
      << "rank 1 is still stopped: " << counts.waiting;
}

// Two of three ranks stop (a node's): each is said. Judged against every other rank, neither
// was, since the other had stopped too.
TEST(RankAssembler, SeveralRanksThatStopTogetherAreEachSaid) {
  Ranks t(3);
  for (std::int64_t step = 1; step <= 3; ++step) {
    for (std::size_t rank = 0; rank < 3; ++rank) t.publish(rank, step);
  }
  for (std::int64_t step = 4; step <= 9; ++step) t.publish(0, step);
  EXPECT_EQ(t.said_stopped(), 1u);
  EXPECT_EQ(t.assembler.counts().waiting,
            "a rank stopped publishing: rank 1 announced no step after 3 while rank 0 went on to step 9; rank 2 "
            "announced no step after 3 while rank 0 went on to step 9; the model stays at the newest step every rank "
            "published until each publishes again");
}

// A step a rank's link never heard announced (published while it was down; the rejoin fetched
// it) is the rank's news all the same: the rank is not said to have stopped at the step before.
// Both ranks publish steps 1 to 3, then only rank 0 is heard, up to step 6: rank 1 is said to
// have stopped.
void rank_1_unheard_after_step_3(Ranks& t) {
  for (std::int64_t step = 1; step <= 3; ++step) {
    t.publish(0, step);
    t.publish(1, step);
  }
  for (std::int64_t step = 4; step <= 6; ++step) t.publish(0, step);
  ASSERT_EQ(t.said_stopped(), 1u);
}

TEST(RankAssembler, AStepFetchedWithoutItsAnnouncementIsTheRanksNews) {
  Ranks t(2);
  rank_1_unheard_after_step_3(t);  // its link down
  t.assembler.offer(1, row_piece(1, 2, 6));
  EXPECT_EQ(t.step_seen(), 6);
  EXPECT_EQ(t.assembler.counts().waiting, "");
  t.publish(0, 7);
  EXPECT_EQ(t.assembler.counts().waiting, "") << "said again: rank 1's step 6 was not taken as its news";
}

// The same where rank 1's producer restarted (a new run) while its link was down: the rejoin
// fetches its newest step, and no announcement comes with a join reply.
TEST(RankAssembler, AStepOfARestartedRankFetchedWithoutItsAnnouncementIsItsNews) {
  Ranks t(2);
  rank_1_unheard_after_step_3(t);
  auto restarted = std::const_pointer_cast<detail::InstalledVersion>(row_piece(1, 2, 6));
  restarted->manifest.incarnation = 2;
  restarted->manifest.publish_time_ns = 5000;
  t.assembler.offer(1, restarted);
  EXPECT_EQ(t.assembler.counts().waiting.find("a rank stopped"), std::string::npos) << t.assembler.counts().waiting;
}

// Steps need only rise, so two ranks' steps may lie further apart than an int64 can say: rank 1
// publishes every 3 steps from -2^62, rank 0 (ahead) every 3 steps from 5 * 2^60, 9 * 2^60
// further on (more than 2^63). Rank 1 may still bring rank 0's steps: not out of step. The gap
// was taken in int64 and wrapped, was then no multiple of 3, and the ranks were said to be out
// of step.
TEST(RankAssembler, StepsFurtherApartThanAnInt64CanSayAreJudgedRight) {
  TwoRanks t;
  const std::int64_t behind = -(std::int64_t{1} << 62), ahead = std::int64_t{5} << 60;
  for (std::int64_t i = 0; i < 8; ++i) {
    for (const auto& [rank, step] : {std::pair<std::size_t, std::int64_t>{1, behind + 3 * i}, {0, ahead + 3 * i}}) {
      t.assembler.announced(rank, 1, step);
      auto version = std::const_pointer_cast<detail::InstalledVersion>(piece(step));
      version->manifest.publish_time_ns = 1000 + i;  // piece()'s 1000 + step is negative for rank 1
      t.assembler.offer(rank, version);
    }
  }
  EXPECT_EQ(t.said_out_of_step(), 0u) << t.errors.front();
  EXPECT_EQ(t.assembler.counts().waiting, "");
}

// Rank `rank` of `ranks`: row `rank` of each of `tensors` tensors "t<i>" [ranks, 4] (f32).
std::shared_ptr<const detail::InstalledVersion> rows_piece(std::size_t rank, std::size_t ranks, std::size_t tensors) {
  auto version = std::const_pointer_cast<detail::InstalledVersion>(piece(1));
  auto& m = version->manifest;
  m.rank = static_cast<std::uint32_t>(rank);
  m.rank_count = static_cast<std::uint32_t>(ranks);
  m.block_bytes = 1 << 20;
  for (std::size_t i = 0; i < tensors; ++i) {
    TensorEntry row;
    row.spec = TensorSpec{"model.layers." + std::to_string(i) + ".weight", DType::kF32, {1, 4}};
    row.offset = 16 * i;
    row.size = 16;
    row.global_shape = {static_cast<std::int64_t>(ranks), 4};
    row.global_offset = {static_cast<std::int64_t>(rank), 0};
    m.tensors.push_back(row);
  }
  auto buffer = std::make_shared<detail::ReceiveBuffer>();
  buffer->owned = HostBuffer(16 * tensors);
  buffer->memory = std::span<std::byte>(buffer->owned.data(), 16 * tensors);
  version->buffer = std::move(buffer);
  return version;
}

// Each rank's whole pieces are taken: each rank is asked for everything in one want, not one
// want per tensor, which past about 4,000 tensors a rank took more than a request carries (the
// producer's socket dropped the rank's requests unread, and the consumer stayed on its first step
// for good).
TEST(RankAssembler, RanksWhoseWholePiecesAreTakenAreAskedForEverythingInOneWant) {
  constexpr std::size_t kTensors = 6000;
  VersionStore store{2, {}};
  std::vector<std::vector<TensorWant>> asked(2);
  std::vector<std::string> errors;
  RankAssembler assembler{2, {}, {}, {}, nullptr, [&](const Error& e) { errors.push_back(e.what()); }, store,
                          [&](std::size_t rank, std::vector<TensorWant> wants, std::uint64_t) { asked[rank] = wants; }};
  for (std::size_t rank = 0; rank < 2; ++rank) assembler.offer(rank, rows_piece(rank, 2, kTensors));
  ASSERT_TRUE(store.current()) << (errors.empty() ? std::string("nothing said") : errors.front());
  for (std::size_t rank = 0; rank < 2; ++rank) {
    ASSERT_EQ(asked[rank].size(), 1u) << "rank " << rank;
    EXPECT_EQ(asked[rank][0].tensor, "*");
    EXPECT_EQ(asked[rank][0].kind, TensorWant::Kind::kWhole);
  }
}

}  // namespace
}  // namespace modelcast::consumer
