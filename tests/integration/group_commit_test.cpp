// Groups of consumers that switch versions together (ConsumerOptions::group): a member makes a
// version visible only once every member holds it verified, a slow member holds the others on
// the version they share, a member that leaves makes the group wait, and one that takes its
// place brings the group to the newest version. Every byte each member serves is checked.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <future>
#include <memory>
#include <mutex>
#include <vector>

#include <signal.h>

#include <map>
#include <sstream>

#include "process_status.h"
#include "child_process.h"
#include "eventually.h"
#include "gate.h"
#include "modelcast/consumer.h"
#include "modelcast/error.h"
#include "modelcast/producer.h"

using namespace std::chrono_literals;
using testing_support::ChildProcess;
using testing_support::eventually;

namespace {

constexpr std::size_t kElements = 64 << 10;

struct Fixture {
  std::vector<float> a = std::vector<float>(kElements), b = std::vector<float>(kElements / 2);
  std::unique_ptr<modelcast::Producer> producer;
  Fixture() {
    modelcast::ProducerOptions options;
    options.model_name = "test";
    options.control_endpoint = "tcp://127.0.0.1:0";
    options.snapshot_slots = 4;
    producer = std::make_unique<modelcast::Producer>(options);
    std::vector<modelcast::TensorRef> refs = {
        {{"a", modelcast::DType::kF32, {static_cast<std::int64_t>(a.size())}}, a.data()},
        {{"b", modelcast::DType::kF32, {static_cast<std::int64_t>(b.size())}}, b.data()}};
    producer->register_tensors(refs);
    producer->prepare();
  }
  void publish(std::uint64_t version) {
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(version * 1000003 + i);
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = -static_cast<float>(version * 7 + i);
    producer->publish(static_cast<std::int64_t>(version));
  }
};

// Empty if `view` holds what Fixture::publish(view.version()) wrote.
std::string check(const modelcast::ModelView& view) {
  const std::uint64_t v = view.version();
  auto a = view.tensor("a");
  auto b = view.tensor("b");
  const auto* pa = static_cast<const float*>(a.data);
  const auto* pb = static_cast<const float*>(b.data);
  for (std::size_t i = 0; i < kElements; ++i) {
    if (pa[i] != static_cast<float>(v * 1000003 + i)) return "a[" + std::to_string(i) + "] of version " + std::to_string(v);
  }
  for (std::size_t i = 0; i < kElements / 2; ++i) {
    if (pb[i] != -static_cast<float>(v * 7 + i)) return "b[" + std::to_string(i) + "] of version " + std::to_string(v);
  }
  return {};
}

modelcast::ConsumerOptions member_options(const std::string& endpoint, const std::string& group, std::uint32_t size,
                                          const std::string& name) {
  modelcast::ConsumerOptions options;
  options.producer_endpoint = endpoint;
  options.model_name = "test";
  options.consumer_name = name;
  options.group = group;
  options.group_size = size;
  options.buffers = 3;
  return options;
}

// Members whose every switch is checked against the others: when one makes version v visible,
// every other member must already hold v (prepared or visible). Violations are collected.
class Members {
 public:
  Members(const std::string& endpoint, std::uint32_t size) : endpoint_(endpoint), size_(size) {}
  // Each taken out under the lock, as remove() does: another member's on_update reads them under
  // it (a reset without it raced that read). Destroyed outside it, as a consumer's destructor
  // joins its service thread, which may be waiting for the lock in on_update.
  ~Members() {
    for (std::size_t i = 0; i < members_.size(); ++i) remove(i);
  }

  // Adds a member; `on_update` (optional) runs after its own check, on its service thread.
  modelcast::Consumer& add(std::function<void(const modelcast::ModelView&)> on_update = nullptr) {
    const std::size_t index = members_.size();
    auto options = member_options(endpoint_, "tp", size_, "rank" + std::to_string(index));
    options.on_update = [this, index, on_update](const modelcast::ModelView& view) {
      {
        std::lock_guard lock(mutex_);
        for (std::size_t j = 0; j < members_.size(); ++j) {
          if (j == index || !members_[j]) continue;
          auto s = members_[j]->stats();
          if (s.prepared_version != view.version() && s.current_version < view.version()) {
            violations_.push_back("rank" + std::to_string(index) + " switched to version " +
                                  std::to_string(view.version()) + " while rank" + std::to_string(j) + " held " +
                                  std::to_string(s.current_version) + " (prepared " +
                                  std::to_string(s.prepared_version) + ")");
          }
        }
      }
      if (on_update) on_update(view);
    };
    options.on_error = [this, index](const modelcast::Error& error) {
      std::lock_guard lock(mutex_);
      errors_[index].push_back(error.what());
    };
    std::lock_guard lock(mutex_);
    members_.push_back(std::make_unique<modelcast::Consumer>(options));
    return *members_.back();
  }
  modelcast::Consumer& operator[](std::size_t i) { return *members_.at(i); }
  void remove(std::size_t i) {
    std::unique_ptr<modelcast::Consumer> gone;
    {
      std::lock_guard lock(mutex_);
      gone = std::move(members_.at(i));
    }
  }
  std::size_t size() const { return members_.size(); }
  std::vector<std::string> violations() {
    std::lock_guard lock(mutex_);
    return violations_;
  }
  // What on_error told member i so far, in order.
  std::vector<std::string> errors(std::size_t i) {
    std::lock_guard lock(mutex_);
    return errors_[i];
  }

 private:
  std::string endpoint_;
  std::uint32_t size_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<modelcast::Consumer>> members_;
  std::vector<std::string> violations_;
  std::map<std::size_t, std::vector<std::string>> errors_;
};

void slow_member_holds_the_group(std::uint32_t size) {
  Fixture f;
  testing_support::Gate gate;
  std::atomic<bool> held{false};
  Members members(f.producer->control_endpoint(), size);
  testing_support::Gate::Opener open_at_exit(gate);
  for (std::uint32_t i = 0; i + 1 < size; ++i) members.add();
  // The last rank stalls its service thread in its first update until the gate opens: it
  // cannot fetch the next version, as a rank busy serving or on a slow link could not.
  members.add([&](const modelcast::ModelView&) {
    if (!held.exchange(true)) gate.wait();
  });
  ASSERT_TRUE(f.producer->wait_for_consumers(size, 60s));
  f.publish(1);
  for (std::uint32_t i = 0; i < size; ++i) {
    auto view = members[i].wait_for_version(1, 60s);
    ASSERT_TRUE(view) << "rank " << i << ": " << members[i].stats().last_error;
    EXPECT_EQ(check(view), "") << "rank " << i;
  }
  ASSERT_TRUE(eventually([&] { return held.load(); }, 60s));
  f.publish(2);
  // The other ranks fetch and verify version 2, and keep serving version 1.
  for (std::uint32_t i = 0; i + 1 < size; ++i) {
    ASSERT_TRUE(eventually([&] { return members[i].stats().prepared_version == 2; }, 60s))
        << "rank " << i << ": " << members[i].stats().last_error;
    EXPECT_EQ(members[i].acquire().version(), 1u) << "rank " << i << " switched without the slow rank";
    EXPECT_EQ(members[i].stats().group_version, 1u);
  }
  gate.open();
  for (std::uint32_t i = 0; i < size; ++i) {
    auto view = members[i].wait_for_version(2, 60s);
    ASSERT_TRUE(view) << "rank " << i << ": " << members[i].stats().last_error;
    EXPECT_EQ(view.version(), 2u);
    EXPECT_EQ(check(view), "") << "rank " << i;
    EXPECT_EQ(members[i].stats().versions_rejected, 0u) << members[i].stats().last_error;
  }
  EXPECT_EQ(members.violations(), std::vector<std::string>{});
}

}  // namespace

TEST(GroupCommit, TwoMembersSwitchOnlyOnceTheSlowOneHoldsTheVersionToo) { slow_member_holds_the_group(2); }

TEST(GroupCommit, FourMembersSwitchOnlyOnceTheSlowOneHoldsTheVersionToo) { slow_member_holds_the_group(4); }

TEST(GroupCommit, AGroupWaitsForAMissingMemberAndOneTakingItsPlaceBringsItToTheNewest) {
  Fixture f;
  Members members(f.producer->control_endpoint(), 2);
  auto& first = members.add();
  ASSERT_TRUE(f.producer->wait_for_consumers(1, 60s));
  f.publish(1);
  // Alone, the first rank waits and says so in last_error; it serves nothing, since its group
  // never had version 1. A group never yet whole is starting: no on_error for it.
  ASSERT_TRUE(eventually([&] { return first.stats().group_waiting; }, 60s));
  EXPECT_NE(first.stats().last_error.find("1 of its 2 members: it serves nothing yet until the others join"),
            std::string::npos)
      << first.stats().last_error;
  EXPECT_TRUE(first.acquire().empty());
  members.add();
  for (std::size_t i = 0; i < 2; ++i) {
    auto view = members[i].wait_for_version(1, 60s);
    ASSERT_TRUE(view) << "rank " << i << ": " << members[i].stats().last_error;
    EXPECT_EQ(check(view), "");
  }
  EXPECT_FALSE(first.stats().group_waiting);
  EXPECT_EQ(first.stats().last_error, "") << "the wait is over, and still said";

  EXPECT_EQ(members.errors(0), std::vector<std::string>{}) << "members joining one by one is start-up";

  // The second rank goes (its process ends): the first stays on version 1 through versions 2 and
  // 3, which a consumer in no group gets meanwhile; a group that was whole says so as an error.
  members.remove(1);
  ASSERT_TRUE(eventually([&] { return first.stats().group_waiting; }, 60s));
  const auto told = members.errors(0);
  EXPECT_TRUE(std::any_of(told.begin(), told.end(),
                          [](const std::string& e) {
                            return e.find("1 of its 2 members: it serves version 1 until the others join") !=
                                   std::string::npos;
                          }))
      << ::testing::PrintToString(told);
  modelcast::ConsumerOptions plain;
  plain.producer_endpoint = f.producer->control_endpoint();
  plain.model_name = "test";
  modelcast::Consumer watcher(plain);
  ASSERT_TRUE(f.producer->wait_for_consumers(2, 60s));
  f.publish(2);
  f.publish(3);
  ASSERT_TRUE(watcher.wait_for_version(3, 60s)) << watcher.stats().last_error;
  EXPECT_EQ(first.acquire().version(), 1u);
  EXPECT_EQ(first.stats().prepared_version, 0u) << "a group short of a member has no version to prepare";

  // A rank taking its place: the group goes to the newest version together.
  members.add();
  for (std::size_t i : {std::size_t{0}, std::size_t{2}}) {
    auto view = members[i].wait_for_version(3, 60s);
    ASSERT_TRUE(view) << "rank " << i << ": " << members[i].stats().last_error;
    EXPECT_EQ(view.version(), 3u);
    EXPECT_EQ(check(view), "") << "rank " << i;
  }
  EXPECT_TRUE(eventually([&] { return !first.stats().group_waiting; }, 60s));
  EXPECT_EQ(first.stats().last_error.find("of its 2 members"), std::string::npos)
      << "whole again, and still said: " << first.stats().last_error;
  EXPECT_EQ(members.violations(), std::vector<std::string>{});
}

// A member that rejects the version its group is switching to (here: a trainer restarted with
// another layout, which one member's expected_layout refuses) makes the producer give the version
// up; the other member says so, whether it held the version verified, still fetched it or had not
// begun (the restarted producer's give-up can come first), and serves the version before on.
TEST(GroupCommit, AVersionOneMemberRejectsIsGivenUpAndTheOtherMemberSaysSo) {
  auto f = std::make_unique<Fixture>();
  const std::string endpoint = f->producer->control_endpoint();
  std::mutex mutex;
  std::vector<std::string> errors;  // what on_error told the member that takes every layout
  auto taking = member_options(endpoint, "tp", 2, "taking");
  taking.on_error = [&](const modelcast::Error& e) {
    std::lock_guard lock(mutex);
    errors.push_back(e.what());
  };
  modelcast::Consumer a(taking);
  auto strict = member_options(endpoint, "tp", 2, "strict");
  strict.expected_layout = {{"a", modelcast::DType::kF32, {static_cast<std::int64_t>(kElements)}},
                            {"b", modelcast::DType::kF32, {static_cast<std::int64_t>(kElements / 2)}}};
  std::vector<std::string> strict_errors;  // what on_error told the member that rejects
  strict.on_error = [&](const modelcast::Error& e) {
    std::lock_guard lock(mutex);
    strict_errors.push_back(e.what());
  };
  modelcast::Consumer b(strict);
  ASSERT_TRUE(f->producer->wait_for_consumers(2, 60s));
  f->publish(1);
  for (auto* member : {&a, &b}) ASSERT_TRUE(member->wait_for_version(1, 60s)) << member->stats().last_error;

  f.reset();
  modelcast::ProducerOptions options;
  options.model_name = "test";
  options.control_endpoint = endpoint;
  modelcast::Producer restarted(options);
  std::vector<float> wider(2 * kElements, 1.0f);
  std::vector<modelcast::TensorRef> refs = {
      {{"a", modelcast::DType::kF32, {static_cast<std::int64_t>(wider.size())}}, wider.data()}};
  restarted.register_tensors(refs);
  restarted.publish(1);
  ASSERT_TRUE(eventually([&] { return b.stats().versions_rejected >= 1; }, 60s)) << b.stats().last_error;
  const std::string said = "group 'tp' did not switch to version 1: another member did not take it; the group "
                           "serves version 1 on and takes the next version published";
  ASSERT_TRUE(eventually([&] {
    std::lock_guard lock(mutex);
    return std::find(errors.begin(), errors.end(), said) != errors.end();
  }, 60s)) << a.stats().last_error;
  EXPECT_EQ(a.stats().prepared_version, 0u);
  {
    // Said once (the announcements that follow carry the give-up too), and the member that
    // rejected says why it did, not that another one did not take it.
    std::lock_guard lock(mutex);
    EXPECT_EQ(std::count(errors.begin(), errors.end(), said), 1) << ::testing::PrintToString(errors);
    EXPECT_EQ(std::find(strict_errors.begin(), strict_errors.end(), said), strict_errors.end())
        << ::testing::PrintToString(strict_errors);
  }
  // Both serve the first trainer's version 1, every byte of it.
  for (auto* member : {&a, &b}) {
    auto view = member->acquire();
    ASSERT_TRUE(view);
    EXPECT_EQ(view.tensor("a").spec->shape, std::vector<std::int64_t>{static_cast<std::int64_t>(kElements)});
    EXPECT_EQ(check(view), "");
  }
}

TEST(GroupCommit, AJoinThatDoesNotFitTheGroupIsRefusedNamingWhy) {
  Fixture f;
  Members members(f.producer->control_endpoint(), 2);
  members.add();
  members.add();
  ASSERT_TRUE(f.producer->wait_for_consumers(2, 60s));
  auto third = member_options(f.producer->control_endpoint(), "tp", 2, "rank-extra");
  modelcast::Consumer extra(third);
  auto other_size = member_options(f.producer->control_endpoint(), "tp", 3, "rank-odd");
  modelcast::Consumer odd(other_size);
  ASSERT_TRUE(eventually([&] { return !extra.stats().last_error.empty() && !odd.stats().last_error.empty(); }, 60s));
  EXPECT_NE(extra.stats().last_error.find("already has its 2 members"), std::string::npos) << extra.stats().last_error;
  EXPECT_NE(odd.stats().last_error.find("has group_size 2 (as its first member said), this consumer says 3"),
            std::string::npos)
      << odd.stats().last_error;
  // A group larger than the producer admits consumers could never be whole: it waited for ever.
  modelcast::Consumer huge(member_options(f.producer->control_endpoint(), "huge", 1000, "rank-huge"));
  ASSERT_TRUE(eventually([&] { return !huge.stats().last_error.empty(); }, 60s));
  EXPECT_NE(huge.stats().last_error.find("group 'huge' has group_size 1000, but this producer admits at most 256 "
                                         "consumers (max_consumers"),
            std::string::npos)
      << huge.stats().last_error;
  EXPECT_FALSE(huge.stats().producer_connected);
  // Four snapshot slots hold two groups: each pins one while it switches, and publish() must
  // always find one free, or a group waiting for a member would stall the trainer.
  modelcast::Consumer solo(member_options(f.producer->control_endpoint(), "other", 1, "solo"));
  ASSERT_TRUE(eventually([&] { return solo.stats().producer_connected; }, 60s)) << solo.stats().last_error;
  modelcast::Consumer late(member_options(f.producer->control_endpoint(), "third", 1, "late"));
  ASSERT_TRUE(eventually([&] { return !late.stats().last_error.empty(); }, 60s));
  EXPECT_NE(late.stats().last_error.find("snapshot_slots - 2"), std::string::npos) << late.stats().last_error;
  EXPECT_FALSE(late.stats().producer_connected);
}

TEST(GroupCommit, OptionsAGroupCannotWorkWithAreRefusedAtConstruction) {
  auto refused = [](modelcast::ConsumerOptions options, const std::string& words) {
    try {
      modelcast::Consumer consumer(options);
    } catch (const modelcast::Error& e) {
      EXPECT_EQ(e.code(), modelcast::ErrorCode::kInvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
      return;
    }
    ADD_FAILURE() << "accepted; expected an error saying: " << words;
  };
  auto no_size = member_options("tcp://127.0.0.1:1", "tp", 0, "r");
  refused(no_size, "needs group_size");
  auto two_buffers = member_options("tcp://127.0.0.1:1", "tp", 2, "r");
  two_buffers.buffers = 2;
  refused(two_buffers, ">= 3 buffers");
  auto size_only = member_options("tcp://127.0.0.1:1", "", 2, "r");
  refused(size_only, "group is empty");
}

namespace {

bool printed(const ChildProcess& child, const std::string& line) {
  for (const auto& l : child.lines()) {
    if (l == line) return true;
  }
  return false;
}

// One counter of the peer producer's "stats k=v k=v ..." line.
std::uint64_t producer_stat(ChildProcess& producer, const std::string& key) {
  auto line = producer.ask("stats", "stats ");
  if (!line) return 0;
  std::istringstream words(line->substr(6));
  std::string word;
  while (words >> word) {
    if (word.rfind(key + "=", 0) == 0) return std::stoull(word.substr(key.size() + 1));
  }
  return 0;
}

}  // namespace

// Across processes: a rank stopped, then killed, mid-version; the other rank, which holds the
// version verified, never switches to it alone; a rank started in its place brings both to it.
// Each rank checks every byte of every version it installs (tests/support/test_model.h).
TEST(GroupCommit, ARankKilledMidVersionLeavesTheOtherOnTheVersionTheyShareUntilARankReplacesIt) {
  setenv("UCX_NET_DEVICES", "lo", 1);
  ChildProcess producer({MODELCAST_TEST_PEER, "producer", "--endpoint", "tcp://127.0.0.1:0", "--versions", "0",
                         "--kib", "512"});
  auto ready = producer.wait_for_line("ready ");
  ASSERT_TRUE(ready);
  const std::string endpoint = ready->substr(6);
  auto rank = [&](const std::string& name, std::uint64_t until) {
    return std::make_unique<ChildProcess>(std::vector<std::string>{
        MODELCAST_TEST_PEER, "consumer", "--endpoint", endpoint, "--name", name, "--until-version",
        std::to_string(until), "--group", "tp", "--group-size", "2", "--linger"});
  };
  auto rank0 = rank("rank0", 2);
  auto rank1 = rank("rank1", 2);
  ASSERT_TRUE(producer.ask("publish", "published 1"));
  ASSERT_TRUE(rank0->wait_for_line("installed 1", 60s));
  ASSERT_TRUE(rank1->wait_for_line("installed 1", 60s));
  ASSERT_TRUE(eventually([&] { return producer_stat(producer, "deliveries") == 2; }, 60s));

  // Rank 1 stops before it can fetch version 2; rank 0 fetches and verifies it (its ack is the
  // producer's third delivery) but keeps serving version 1.
  ASSERT_TRUE(testing_support::stop_process(rank1->pid()));
  ASSERT_TRUE(producer.ask("publish", "published 2"));
  ASSERT_TRUE(eventually([&] { return producer_stat(producer, "deliveries") == 3; }, 60s));
  rank1->kill_now();
  rank1->wait();
  // Once the producer has let rank 1 go, rank 0 (which acked version 2 before) would have said
  // it installed it if it could switch alone. What it printed so far is read here: the poll
  // returns as soon as there is output, and gives up after 100 ms of none.
  ASSERT_TRUE(eventually([&] { return producer_stat(producer, "consumers") == 1; }, 60s));
  EXPECT_FALSE(rank0->wait_for_line("installed 2", 100ms)) << "rank 0 switched without rank 1";

  // A rank in rank 1's place: both switch to version 2.
  auto rank2 = rank("rank2", 2);
  EXPECT_TRUE(rank2->wait_for_line("installed 2", 60s));
  EXPECT_TRUE(rank0->wait_for_line("installed 2", 60s));
  for (auto* r : {rank0.get(), rank2.get()}) {
    r->close_stdin();
    EXPECT_EQ(r->wait(), 0);
    for (const auto& line : r->lines()) EXPECT_NE(line.rfind("corrupt", 0), 0u) << line;
  }
  EXPECT_FALSE(printed(*rank2, "installed 1")) << "the replacement joined a group already past version 1";
}
