// A device consumer whose device memory cannot be had: for a moment (fetched again), or for good
// (rejected after a few tries, not fetched whole every few seconds). Only the simulated device
// fails an allocation on demand. The producer's tensors are on the host, so the consumer's are
// the only device allocations; the route is staged (a host buffer, then the device).
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "device/simulated_faults.h"
#include "eventually.h"
#include "modelcast/consumer.h"
#include "modelcast/producer.h"

using namespace std::chrono_literals;
using testing_support::eventually;

namespace {

struct HostProducerDeviceConsumer {
  modelcast::device::DeviceRuntime& rt = modelcast::device::require_device_runtime("the device tests");
  modelcast::device::SimulatedFaults* faults = modelcast::device::simulated_faults(rt);
  std::vector<float> weights;
  std::unique_ptr<modelcast::Producer> producer;
  std::unique_ptr<modelcast::Consumer> consumer;

  // Empty where the test cannot run here (GTEST_SKIP with it), else sets everything up.
  std::string start(std::function<void(const modelcast::Error&)> on_error = {},
                    std::vector<modelcast::TensorConversion> conversions = {}) {
    if (!faults) return "failing a device allocation on demand needs the simulated device";
    weights.resize(1 << 16);
    for (std::size_t i = 0; i < weights.size(); ++i) weights[i] = static_cast<float>(i);
    modelcast::ProducerOptions options;
    options.model_name = "test";
    options.control_endpoint = "tcp://127.0.0.1:0";
    producer = std::make_unique<modelcast::Producer>(options);
    producer->register_tensor({{"w", modelcast::DType::kF32, {static_cast<std::int64_t>(weights.size())}}, weights.data()});
    producer->prepare();
    modelcast::ConsumerOptions consumer_options;
    consumer_options.producer_endpoint = producer->control_endpoint();
    consumer_options.model_name = "test";
    consumer_options.memory = modelcast::MemoryKind::kCuda;
    consumer_options.transports = {"ucx"};
    consumer_options.on_error = std::move(on_error);
    consumer_options.conversions = std::move(conversions);
    consumer = std::make_unique<modelcast::Consumer>(consumer_options);
    return {};
  }
  std::vector<float> read(const modelcast::ModelView& view) {
    std::vector<float> back(weights.size());
    rt.copy_async(back.data(), view.tensor("w").data, back.size() * sizeof(float), nullptr);
    rt.synchronize_stream(nullptr);
    return back;
  }
  ~HostProducerDeviceConsumer() {
    if (faults) faults->disarm();  // a fault not reached must not be left to the next test
  }
};

// A device allocation that fails once (memory a moment short: cudaMalloc's out of memory) is no
// verdict on the version: it is fetched again. It was rejected: never asked for again, the
// consumer stayed on its old version until the next publish (for good after the last one), and
// the producer was told the version was refused.
TEST(DeviceAllocation, AVersionWhoseDeviceLandingCouldNotBeAllocatedIsFetchedAgain) {
  HostProducerDeviceConsumer f;
  if (auto why = f.start(); !why.empty()) GTEST_SKIP() << why;
  ASSERT_TRUE(f.producer->wait_for_consumers(1, 60s));
  f.faults->fail_allocation(1);  // the landing's device buffer, the first this consumer makes
  f.producer->publish(1);
  auto view = f.consumer->wait_for_version(1, 30000ms);
  const auto stats = f.consumer->stats();
  ASSERT_TRUE(view) << "version 1 was never installed: " << stats.last_error;
  EXPECT_EQ(stats.versions_rejected, 0u) << stats.last_error;
  EXPECT_NE(stats.last_error.find("injected fault"), std::string::npos)
      << "the allocation never failed: the test tested nothing (" << stats.last_error << ")";
  EXPECT_EQ(f.read(view), f.weights);
}

// The same for the device memory of converted views (bf16 here), the consumer's second
// allocation: the version was rejected for good, where the landing's failure fetched it again.
TEST(DeviceAllocation, AVersionWhoseConvertedViewsCouldNotBeAllocatedIsFetchedAgain) {
  HostProducerDeviceConsumer f;
  if (auto why = f.start({}, {{"*", modelcast::DType::kBF16}}); !why.empty()) GTEST_SKIP() << why;
  ASSERT_TRUE(f.producer->wait_for_consumers(1, 60s));
  f.faults->fail_allocation(2);  // after the landing's device buffer: the converted views'
  f.producer->publish(1);
  auto view = f.consumer->wait_for_version(1, 30000ms);
  const auto stats = f.consumer->stats();
  ASSERT_TRUE(view) << "version 1 was never installed: " << stats.last_error;
  EXPECT_EQ(stats.versions_rejected, 0u) << stats.last_error;
  EXPECT_NE(stats.last_error.find("injected fault"), std::string::npos)
      << "the allocation never failed: the test tested nothing (" << stats.last_error << ")";
  EXPECT_EQ(view.tensor("w").dtype(), modelcast::DType::kBF16);
}

// Memory that never comes (a model too large for the device, a memlock limit on pinning): the
// version is rejected after a few tries, not fetched whole every few seconds for good; a later
// version is taken once memory is there.
TEST(DeviceAllocation, AVersionWhoseDeviceLandingNeverGetsMemoryIsRejectedAfterAFewTries) {
  HostProducerDeviceConsumer f;
  if (auto why = f.start(); !why.empty()) GTEST_SKIP() << why;
  ASSERT_TRUE(f.producer->wait_for_consumers(1, 60s));
  f.faults->fail_allocation(1, 1000);
  f.producer->publish(1);
  ASSERT_TRUE(eventually([&] { return f.consumer->stats().versions_rejected >= 1; }, 60s)) << f.consumer->stats().last_error;
  const auto stats = f.consumer->stats();
  EXPECT_NE(stats.last_error.find("(4 or more tries in a row found no memory)"), std::string::npos) << stats.last_error;
  EXPECT_FALSE(f.consumer->acquire());
  f.faults->disarm();
  f.producer->publish(2);
  auto view = f.consumer->wait_for_version(2, 30000ms);
  ASSERT_TRUE(view) << f.consumer->stats().last_error;
  EXPECT_EQ(view.version(), 2u);
  EXPECT_EQ(f.read(view), f.weights);
}

// The tries that found no memory are counted across versions: a producer that publishes again
// after every failed try (a trainer publishing often) must not start the count afresh with each
// version, or the consumer fetches every version whole for nothing, for good.
TEST(DeviceAllocation, TriesThatFindNoMemoryAreCountedAcrossVersions) {
  std::mutex mutex;
  std::condition_variable changed;
  unsigned fetched_again = 0;
  HostProducerDeviceConsumer f;
  auto on_error = [&](const modelcast::Error& e) {
    std::lock_guard lock(mutex);  // every error wakes the test: a rejection says no "fetched again"
    if (std::string(e.what()).find("is fetched again") != std::string::npos) ++fetched_again;
    changed.notify_all();
  };
  if (auto why = f.start(on_error); !why.empty()) GTEST_SKIP() << why;
  ASSERT_TRUE(f.producer->wait_for_consumers(1, 60s));
  f.faults->fail_allocation(1, 1000);
  std::uint64_t version = 1;
  f.producer->publish(version);
  // Each try that found no memory is answered by a newer version, until the consumer rejects
  // one; far more versions than the cap allows tries means the count started afresh.
  while (f.consumer->stats().versions_rejected == 0 && version < 12) {
    std::unique_lock lock(mutex);
    const unsigned seen = fetched_again;
    const bool failed_again = changed.wait_for(lock, 30s, [&] {
      return fetched_again > seen || f.consumer->stats().versions_rejected > 0;
    });
    ASSERT_TRUE(failed_again) << "version " << version << " neither failed again nor was rejected: "
                              << f.consumer->stats().last_error;
    if (f.consumer->stats().versions_rejected > 0) break;
    f.producer->publish(++version);
  }
  ASSERT_TRUE(eventually([&] { return f.consumer->stats().versions_rejected >= 1; }, 30s))
      << "no version was rejected after " << version << " versions each failed a try: "
      << f.consumer->stats().last_error;
  EXPECT_LE(version, 5u) << "the count of tries started afresh with a new version";
  EXPECT_NE(f.consumer->stats().last_error.find("(4 or more tries in a row found no memory)"), std::string::npos)
      << f.consumer->stats().last_error;
}

}  // namespace
