// The transport a consumer gets is chosen by capability from what its join offers: the whole
// product runs over the in-process loopback transport when both sides allow it, the consumer's
// order of preference wins among transports that reach, a producer in another process never
// gets the loopback one, and a consumer left with nothing that reaches is told why.
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>

#include "exchange_fixture.h"
#include "modelcast/error.h"

namespace exchange_test {
namespace {

modelcast::ConsumerOptions consumer_options(const std::string& endpoint, std::vector<std::string> transports) {
  modelcast::ConsumerOptions options;
  options.producer_endpoint = endpoint;
  options.model_name = "test";
  options.transports = std::move(transports);
  return options;
}

TEST(TransportChoice, TheWholeExchangeRunsOverLoopbackWithoutUcx) {
  modelcast::ProducerOptions producer_options;
  producer_options.transports = {"loopback"};
  TestProducer p(512, producer_options);
  modelcast::Consumer consumer(consumer_options(p.producer->control_endpoint(), {"loopback"}));
  auto held = modelcast::ModelView();
  for (std::uint64_t v = 1; v <= 5; ++v) {
    p.publish(v);
    auto view = consumer.wait_for_version(v, 60s);
    ASSERT_TRUE(view) << "version " << v << ": " << consumer.stats().last_error;
    ASSERT_EQ(testmodel::check(view, 1), "");
    if (v == 2) held = view;
  }
  EXPECT_EQ(held.version(), 2u);
  EXPECT_EQ(testmodel::check(held, 1), "") << "a held view changed while newer versions arrived";
  EXPECT_EQ(consumer.stats().transport, "loopback");
  EXPECT_EQ(p.producer->stats().transport, "loopback");
}

TEST(TransportChoice, TheConsumersPreferenceWinsInOneProcess) {
  modelcast::ProducerOptions producer_options;
  producer_options.transports = {"ucx", "loopback"};
  TestProducer p(256, producer_options);
  modelcast::Consumer prefers_loopback(consumer_options(p.producer->control_endpoint(), {"loopback", "ucx"}));
  modelcast::Consumer prefers_ucx(consumer_options(p.producer->control_endpoint(), {"ucx", "loopback"}));
  p.publish(1);
  for (auto* consumer : {&prefers_loopback, &prefers_ucx}) {
    auto view = consumer->wait_for_version(1, 60s);
    ASSERT_TRUE(view) << consumer->stats().last_error;
    EXPECT_EQ(testmodel::check(view, 1), "");
  }
  EXPECT_EQ(prefers_loopback.stats().transport, "loopback");
  EXPECT_EQ(prefers_ucx.stats().transport, "ucx");
}

TEST(TransportChoice, AProducerInAnotherProcessNeverGetsLoopbackAndSaysWhyWhenNothingElseIsOffered) {
  setenv("UCX_NET_DEVICES", "lo", 1);
  ChildProcess producer({MODELCAST_TEST_PEER, "producer", "--endpoint", "tcp://127.0.0.1:0", "--versions", "1",
                         "--kib", "256", "--transports", "ucx,loopback"});
  auto ready = producer.wait_for_line("ready ");
  ASSERT_TRUE(ready) << "the producer did not start";
  const std::string endpoint = ready->substr(6);
  ASSERT_TRUE(producer.wait_for_line("published 1"));

  modelcast::Consumer both(consumer_options(endpoint, {"loopback", "ucx"}));
  auto view = both.wait_for_version(1, 60s);
  ASSERT_TRUE(view) << both.stats().last_error;
  EXPECT_EQ(testmodel::check(view, 1), "");
  EXPECT_EQ(both.stats().transport, "ucx") << "loopback reaches only this process";

  std::mutex mutex;
  std::condition_variable cv;
  std::string error;
  auto options = consumer_options(endpoint, {"loopback"});
  options.on_error = [&](const modelcast::Error& e) {
    std::lock_guard lock(mutex);
    if (error.empty()) error = e.what();
    cv.notify_all();
  };
  modelcast::Consumer only_loopback(options);
  std::unique_lock lock(mutex);
  ASSERT_TRUE(cv.wait_for(lock, 30s, [&] { return !error.empty(); })) << "no error reported";
  EXPECT_NE(error.find("no transport serves host -> host at distance 'host'"), std::string::npos) << error;
  EXPECT_NE(error.find("the consumer offers loopback"), std::string::npos) << error;
  EXPECT_TRUE(only_loopback.acquire().empty());
  EXPECT_EQ(only_loopback.stats().transport, "");
}

TEST(TransportChoice, AnUnknownTransportIsRefusedAtConstruction) {
  modelcast::ProducerOptions producer_options;
  producer_options.model_name = "test";
  producer_options.transports = {"infiniband-please"};
  try {
    modelcast::Producer producer(producer_options);
    FAIL() << "the producer accepted an unknown transport";
  } catch (const modelcast::Error& e) {
    EXPECT_EQ(e.code(), modelcast::ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("'infiniband-please'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(modelcast::Consumer(consumer_options("tcp://127.0.0.1:1", {"ucx", "ucx"})), modelcast::Error);
}

}  // namespace
}  // namespace exchange_test
