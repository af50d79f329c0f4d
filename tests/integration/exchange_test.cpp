// Producer in this process, consumers in peer processes: delivery, atomic swaps, late join.
#include <cerrno>
#include <condition_variable>
#include <future>
#include <map>
#include <mutex>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "eventually.h"
#include "exchange_fixture.h"
#include "forked_child.h"

namespace exchange_test {
namespace {

using testing_support::child_ended;

// Counts acks per version so the test can wait for "every consumer has version v".
struct DeliveryLog {
  std::mutex mutex;
  std::condition_variable cv;
  std::map<std::uint64_t, int> acks;
  std::function<void(const modelcast::Delivery&)> callback() {
    return [this](const modelcast::Delivery& d) {
      std::lock_guard lock(mutex);
      acks[d.version]++;
      cv.notify_all();
    };
  }
  bool wait(std::uint64_t version, int count) {
    std::unique_lock lock(mutex);
    return cv.wait_for(lock, 60s, [&] { return acks[version] >= count; });
  }
};

TEST_P(ExchangeTest, TwoConsumerProcessesGetEveryVersionBitExactWithoutTornReads) {
  DeliveryLog log;
  modelcast::ProducerOptions options;
  options.on_delivery = log.callback();
  TestProducer p(8 * 1024, options);
  constexpr std::uint64_t kStepwise = 8, kStreamed = 40;
  auto a = start_consumer(p.producer->control_endpoint(), "a", kStepwise + kStreamed, /*readers=*/2);
  auto b = start_consumer(p.producer->control_endpoint(), "b", kStepwise + kStreamed, /*readers=*/2);
  ASSERT_TRUE(p.producer->wait_for_consumers(2, 60s));

  // Step by step: every version reaches both consumers (they check every byte).
  for (std::uint64_t v = 1; v <= kStepwise; ++v) {
    auto ticket = p.publish(v);
    ASSERT_EQ(ticket.version, v);
    EXPECT_EQ(ticket.bytes, p.model.size() ? ticket.bytes : 0);
    ASSERT_TRUE(log.wait(v, 2)) << "version " << v << " did not reach both consumers";
  }
  // Streamed: publish as fast as possible while the consumers' readers keep acquiring. Slow
  // consumers skip to the newest; the readers must never see a mixed version.
  for (std::uint64_t v = kStepwise + 1; v <= kStepwise + kStreamed; ++v) p.publish(v);
  for (auto* child : {a.get(), b.get()}) {
    EXPECT_EQ(child->wait(), 0) << [&] {
      std::string all;
      for (auto& l : child->lines()) all += l + "\n";
      return all;
    }();
  }
  for (auto* child : {a.get(), b.get()}) {
    std::vector<std::uint64_t> installed;
    for (const auto& line : child->lines()) {
      ASSERT_EQ(line.rfind("torn", 0), std::string::npos) << line;
      if (line.rfind("installed ", 0) == 0) installed.push_back(std::stoull(line.substr(10)));
    }
    // Every stepwise version, in order, then never backwards, ending at the newest.
    ASSERT_GE(installed.size(), kStepwise);
    for (std::uint64_t v = 1; v <= kStepwise; ++v) EXPECT_EQ(installed[v - 1], v);
    EXPECT_TRUE(std::is_sorted(installed.begin(), installed.end()));
    EXPECT_EQ(installed.back(), kStepwise + kStreamed);
  }
  // Each child's last ack may still be on its way when it exits.
  EXPECT_TRUE(testing_support::eventually([&] { return p.producer->stats().deliveries >= 2 * kStepwise + 2; }))
      << p.producer->stats().deliveries;
  auto stats = p.producer->stats();
  EXPECT_EQ(stats.versions_published, kStepwise + kStreamed);
  EXPECT_EQ(stats.bad_messages, 0u);
}

TEST(ProducerCallbacks, AnOnDeliveryThatThrowsIsLoggedAndDeliveryGoesOn) {
  // A throw from on_delivery ran inside the handling of the consumer's message: a std::exception
  // was counted as a bad message from the consumer, anything else ended the trainer.
  DeliveryLog log;
  modelcast::ProducerOptions options;
  options.on_delivery = [record = log.callback()](const modelcast::Delivery& delivery) {
    record(delivery);
    if (delivery.version % 2 == 1) throw std::runtime_error("metrics push failed");
    throw 42;
  };
  TestProducer p(256, options);
  modelcast::ConsumerOptions consumer_options;
  consumer_options.producer_endpoint = p.producer->control_endpoint();
  consumer_options.model_name = "test";
  modelcast::Consumer consumer(consumer_options);
  ASSERT_TRUE(p.producer->wait_for_consumers(1, 60s));
  for (std::uint64_t v = 1; v <= 3; ++v) {
    p.publish(v);
    ASSERT_TRUE(log.wait(v, 1)) << "version " << v << " was not delivered";
  }
  auto view = consumer.wait_for_version(3, 60s);
  ASSERT_TRUE(view);
  EXPECT_EQ(testmodel::check(view, 1), "");
  const auto stats = p.producer->stats();
  EXPECT_EQ(stats.bad_messages, 0u);
  EXPECT_EQ(stats.consumers, 1u);
}

// A process that forks while it holds views of a closed consumer (a DataLoader's workers, a
// multiprocessing pool): the child has the views' memory but not the transport's progress
// thread, which the last release of a received buffer waited for, so the child hung when it let
// a view go (or at its exit). It now lets go without waiting; the parent goes on as before.
TEST(ForkedChild, LetsGoOfAViewOfAClosedConsumerAndExits) {
  TestProducer p(256);
  modelcast::ConsumerOptions options;
  options.producer_endpoint = p.producer->control_endpoint();
  options.model_name = "test";
  auto consumer = std::make_unique<modelcast::Consumer>(options);
  p.publish(1);
  auto view = consumer->wait_for_version(1, 60s);
  ASSERT_TRUE(view);
  consumer.reset();  // the view keeps its buffer and the transport that registered it
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const int bytes_right = testmodel::check(view, 1).empty() ? 0 : 3;
    view = modelcast::ModelView();
    _exit(bytes_right);
  }
  int status = 0;
  ASSERT_TRUE(child_ended(child, 30s, status)) << "the forked child hung letting go of its view";
  ASSERT_TRUE(WIFEXITED(status)) << "the child ended by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child read other bytes than version 1's";
  EXPECT_EQ(testmodel::check(view, 1), "");
  view = modelcast::ModelView();  // in the parent, as ever
}

// A wait for a receive buffer is said in last_error while it lasts: it stayed there once views
// were let go and newer versions arrived, where a caller took it for a present fault.
TEST(HeldBuffers, TheWaitForAReceiveBufferLeavesLastErrorOnceItIsOver) {
  setenv("UCX_NET_DEVICES", "lo", 1);
  TestProducer p(64);
  modelcast::ConsumerOptions options;
  options.producer_endpoint = p.producer->control_endpoint();
  options.model_name = "test";
  options.buffers = 2;
  modelcast::Consumer consumer(options);
  std::vector<modelcast::ModelView> held;
  for (std::uint64_t v = 1; v <= 2; ++v) {
    p.publish(v);
    auto view = consumer.wait_for_version(v, 60s);
    ASSERT_TRUE(view) << consumer.stats().last_error;
    held.push_back(view);  // versions 1 and 2: every receive buffer
  }
  p.publish(3);
  ASSERT_TRUE(testing_support::eventually([&] {
    return consumer.stats().last_error.find("held by a view still in use") != std::string::npos;
  }, 60s)) << consumer.stats().last_error;
  held.clear();
  ASSERT_TRUE(consumer.wait_for_version(3, 60s)) << consumer.stats().last_error;
  EXPECT_EQ(consumer.stats().last_error, "") << "the wait is over";
}

// A pre-fork server that read the weights, closed its Consumer and kept what it read, then
// forked workers: a view keeps its consumer's transport, and the workers' own Consumers joined
// and then never received a version, without a word (UCX's threads stayed in the parent). Such
// a child is now refused a transport, saying why.
TEST(ForkedChild, CannotMakeAConsumerWhileItsParentsViewKeepsATransportAndIsToldWhy) {
  setenv("UCX_NET_DEVICES", "lo", 1);
  // The producer in a process of its own: this one holds a transport only through the view.
  ChildProcess producer({MODELCAST_TEST_PEER, "producer", "--endpoint", "tcp://127.0.0.1:0", "--versions", "1",
                         "--wait-consumers", "1"});
  auto ready = producer.wait_for_line("ready ");
  ASSERT_TRUE(ready);
  modelcast::ConsumerOptions options;
  options.producer_endpoint = ready->substr(6);
  options.model_name = "test";
  auto consumer = std::make_unique<modelcast::Consumer>(options);
  auto view = consumer->wait_for_version(1, 60s);
  ASSERT_TRUE(view);
  consumer.reset();  // the view keeps its transport
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int outcome = 3;  // made one: the old, silent failure
    try {
      modelcast::Consumer in_child(options);
    } catch (const modelcast::Error& e) {
      const bool said = std::string(e.what()).find("was forked while its parent held a transport") != std::string::npos;
      outcome = e.code() == modelcast::ErrorCode::kState && said ? 0 : 4;
    }
    _exit(outcome);
  }
  int status = 0;
  ASSERT_TRUE(child_ended(child, 60s, status)) << "the forked child hung";
  ASSERT_TRUE(WIFEXITED(status)) << "the child ended by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << (WEXITSTATUS(status) == 3 ? "the child made a Consumer" : "another error");
  // The parent goes on: a new consumer here receives as ever.
  modelcast::Consumer again(options);
  EXPECT_TRUE(again.wait_for_version(1, 60s));
}

// A child forked from the trainer (a DataLoader worker) that outlives the producer: it shared the
// control endpoint's listening socket, so a producer made again on the same port could not bind
// (EADDRINUSE) for as long as the child lived, and consumers connecting meanwhile waited in the
// child's accept queue. The child now closes its copy as it starts.
TEST(ForkedChild, DoesNotKeepTheControlEndpointsPortAfterTheProducerCloses) {
  int to_child[2];
  ASSERT_EQ(pipe(to_child), 0);
  std::string endpoint;
  pid_t child = -1;
  {
    TestProducer first(16);
    endpoint = first.producer->control_endpoint();
    child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {  // lives until its parent closes the pipe
      close(to_child[1]);
      char byte;
      while (read(to_child[0], &byte, 1) < 0 && errno == EINTR) {
      }
      _exit(0);
    }
  }
  close(to_child[0]);
  modelcast::ProducerOptions options;
  options.control_endpoint = endpoint;
  std::unique_ptr<TestProducer> second;
  try {
    second = std::make_unique<TestProducer>(16, options);
  } catch (const modelcast::Error& e) {
    ADD_FAILURE() << "a producer could not bind its port again while a child forked from the first lived: " << e.what();
  }
  if (second) {
    modelcast::ConsumerOptions consumer_options;
    consumer_options.producer_endpoint = endpoint;
    consumer_options.model_name = "test";
    modelcast::Consumer consumer(consumer_options);
    second->publish(1);
    auto view = consumer.wait_for_version(1, 60s);
    ASSERT_TRUE(view) << "a consumer of the second producer got no version";
    EXPECT_EQ(testmodel::check(view, 1), "");
  }
  close(to_child[1]);
  int status = 0;
  EXPECT_EQ(waitpid(child, &status, 0), child);
}

TEST_P(ExchangeTest, LateJoinerGetsTheNewestVersionAtOnce) {
  TestProducer p(512);
  for (std::uint64_t v = 1; v <= 3; ++v) p.publish(v);
  auto late = start_consumer(p.producer->control_endpoint(), "late", 3);
  auto first = late->wait_for_line("installed");
  ASSERT_TRUE(first.has_value()) << "the late consumer installed nothing";
  EXPECT_EQ(*first, "installed 3") << "a late joiner must start at the newest version, not replay old ones";
  EXPECT_EQ(late->wait(), 0);
}

TEST_P(ExchangeTest, InProcessConsumerSeesUpdatesThroughCallbackAndViewsStayValid) {
  TestProducer p(256);
  std::mutex mutex;
  std::vector<std::uint64_t> callbacks;
  modelcast::ConsumerOptions options;
  options.producer_endpoint = p.producer->control_endpoint();
  options.model_name = "test";
  options.on_update = [&](const modelcast::ModelView& view) {
    std::lock_guard lock(mutex);
    callbacks.push_back(view.version());
  };
  auto consumer = std::make_unique<modelcast::Consumer>(options);
  EXPECT_TRUE(consumer->acquire().empty());
  p.publish(1);
  auto v1 = consumer->wait_for_version(1, 60s);
  ASSERT_TRUE(v1);
  // Hold v1 while newer versions arrive: it must stay exactly version 1's bytes.
  for (std::uint64_t v = 2; v <= 6; ++v) {
    p.publish(v);
    ASSERT_TRUE(consumer->wait_for_version(v, 60s));
  }
  EXPECT_EQ(v1.version(), 1u);
  EXPECT_EQ(testmodel::check(v1, 1), "");
  auto newest = consumer->acquire();
  EXPECT_EQ(newest.version(), 6u);
  EXPECT_EQ(newest.step(), 60);
  EXPECT_EQ(testmodel::check(newest, 1), "");
  EXPECT_EQ(newest.tensor("t3").dtype(), p.model[3].spec.dtype);
  EXPECT_THROW(newest.tensor("nope"), modelcast::Error);
  EXPECT_FALSE(consumer->wait_for_version(99, 50ms)) << "wait_for_version must time out on a version never published";
  // Views outlive the consumer that made them.
  consumer.reset();
  EXPECT_EQ(testmodel::check(v1, 1), "");
  EXPECT_EQ(testmodel::check(newest, 1), "");
  std::lock_guard lock(mutex);
  EXPECT_FALSE(callbacks.empty());
  EXPECT_EQ(callbacks.back(), 6u);
}

TEST_P(ExchangeTest, BusyConsumerThreadIsNotMistakenForALostProducer) {
  TestProducer p(512);
  modelcast::ConsumerOptions options;
  options.producer_endpoint = p.producer->control_endpoint();
  options.model_name = "test";
  // Three heartbeat intervals (200 ms): a loaded machine's pause of a heartbeat is not taken for
  // the producer's silence.
  options.producer_timeout = 600ms;
  // The callback runs on the consumer's service thread: blocking it for longer than
  // producer_timeout stands in for any long piece of work there (allocating a large buffer).
  std::mutex mutex;
  std::condition_variable never;
  options.on_update = [&](const modelcast::ModelView& view) {
    if (view.version() != 1) return;
    std::unique_lock lock(mutex);
    never.wait_for(lock, 2s);
  };
  modelcast::Consumer consumer(options);
  p.publish(1);
  ASSERT_TRUE(consumer.wait_for_version(1, 60s));
  p.publish(2);
  ASSERT_TRUE(consumer.wait_for_version(2, 60s));
  EXPECT_EQ(consumer.stats().reconnects, 0u) << "heartbeats queued while the thread was busy were ignored";
  EXPECT_EQ(consumer.stats().transfers_aborted, 0u);
}

TEST_P(ExchangeTest, IntegrityOffStillDeliversBitExact) {
  modelcast::ProducerOptions po;
  po.integrity = false;
  TestProducer p(2048, po);
  modelcast::ConsumerOptions options;
  options.producer_endpoint = p.producer->control_endpoint();
  options.model_name = "test";
  modelcast::Consumer consumer(options);
  for (std::uint64_t v = 1; v <= 3; ++v) {
    p.publish(v);
    auto view = consumer.wait_for_version(v, 60s);
    ASSERT_TRUE(view);
    EXPECT_EQ(testmodel::check(view, 1), "");
  }
  EXPECT_EQ(consumer.stats().versions_rejected, 0u);
}

TEST_P(ExchangeTest, ReadersHoldingEveryBufferDelayUpdatesButNeverCorruptThem) {
  TestProducer p(1024);
  modelcast::ConsumerOptions options;
  options.producer_endpoint = p.producer->control_endpoint();
  options.model_name = "test";
  options.buffers = 2;
  // Once silent (no log, no on_error, an empty last_error); now said when it starts.
  std::promise<modelcast::Error> stalled;
  std::once_flag once;
  options.on_error = [&](const modelcast::Error& e) {
    if (e.code() == modelcast::ErrorCode::kResource) std::call_once(once, [&] { stalled.set_value(e); });
  };
  modelcast::Consumer consumer(options);
  p.publish(1);
  auto held = consumer.wait_for_version(1, 60s);  // a reader keeps version 1's buffer
  ASSERT_TRUE(held);
  p.publish(2);
  ASSERT_TRUE(consumer.wait_for_version(2, 60s));  // version 2 is current: both buffers busy
  p.publish(3);
  // Version 3 can only land in a buffer nobody reads: it waits for the reader of version 1.
  EXPECT_FALSE(consumer.wait_for_version(3, 300ms)) << "version 3 overwrote a buffer a reader holds";
  EXPECT_EQ(testmodel::check(held, 1), "");
  auto report = stalled.get_future();
  ASSERT_EQ(report.wait_for(60s), std::future_status::ready) << "the stall was never reported";
  EXPECT_NE(std::string(report.get().what()).find("every receive buffer is held"), std::string::npos);
  EXPECT_NE(consumer.stats().last_error.find("every receive buffer is held"), std::string::npos);
  held = modelcast::ModelView();  // the reader lets go
  auto v3 = consumer.wait_for_version(3, 60s);
  ASSERT_TRUE(v3) << "the consumer did not catch up once a buffer was free";
  EXPECT_EQ(testmodel::check(v3, 1), "");
}

INSTANTIATE_TEST_SUITE_P(Transports, ExchangeTest, ::testing::Values("shm", "tcp"), param_name);

}  // namespace
}  // namespace exchange_test
