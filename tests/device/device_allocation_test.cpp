// A device consumer whose device memory cannot be had: for a moment (fetched again), or for good
// (rejected after a few tries, not fetched whole every few seconds). Only the simulated device
// fails an allocation on demand. The producer's tensors are on the host, so the consumer's are
// the only device allocations; the route is staged (a host buffer, then the device).
#include <condition_variable>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/consumer/rank_assembler.h"
#include "core/consumer/shaping_target.h"
#include "core/consumer/version_store.h"
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

// Version 1 published with the consumer's `nth` device allocation failing: the version the
// consumer then installs (empty if none), its failure said in last_error and nothing rejected.
modelcast::ModelView installed_after_a_failed_allocation(HostProducerDeviceConsumer& f, std::uint64_t nth) {
  EXPECT_TRUE(f.producer->wait_for_consumers(1, 60s));
  f.faults->fail_allocation(nth);
  f.producer->publish(1);
  auto view = f.consumer->wait_for_version(1, 30000ms);
  const auto stats = f.consumer->stats();
  EXPECT_TRUE(view) << "version 1 was never installed: " << stats.last_error;
  EXPECT_EQ(stats.versions_rejected, 0u) << stats.last_error;
  EXPECT_NE(stats.last_error.find("injected fault"), std::string::npos)
      << "the allocation never failed: the test tested nothing (" << stats.last_error << ")";
  return view;
}

// A device allocation that fails once (memory a moment short: cudaMalloc's out of memory) is no
// verdict on the version: it is fetched again. It was rejected: never asked for again, the
// consumer stayed on its old version until the next publish (for good after the last one), and
// the producer was told the version was refused.
TEST(DeviceAllocation, AVersionWhoseDeviceLandingCouldNotBeAllocatedIsFetchedAgain) {
  HostProducerDeviceConsumer f;
  if (auto why = f.start(); !why.empty()) GTEST_SKIP() << why;
  auto view = installed_after_a_failed_allocation(f, 1);  // the landing's buffer, the first made
  ASSERT_TRUE(view);
  EXPECT_EQ(f.read(view), f.weights);
}

// The same for the device memory of converted views (bf16 here), the consumer's second
// allocation: the version was rejected for good, where the landing's failure fetched it again.
TEST(DeviceAllocation, AVersionWhoseConvertedViewsCouldNotBeAllocatedIsFetchedAgain) {
  HostProducerDeviceConsumer f;
  if (auto why = f.start({}, {{"*", modelcast::DType::kBF16}}); !why.empty()) GTEST_SKIP() << why;
  auto view = installed_after_a_failed_allocation(f, 2);  // after the landing's: the converted views'
  ASSERT_TRUE(view);
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

namespace {

// Row `rank` of "w" [ranks, 4] (f32) in device memory: a rank service's piece of `step`.
std::shared_ptr<const modelcast::detail::InstalledVersion> device_row(modelcast::device::DeviceRuntime& rt,
                                                                     std::size_t rank, std::size_t ranks,
                                                                     std::int64_t step) {
  auto version = std::make_shared<modelcast::detail::InstalledVersion>();
  auto& m = version->manifest;
  m.step = step;
  m.version = static_cast<std::uint64_t>(step);
  m.incarnation = 1;
  m.publish_time_ns = 1000 + step;
  m.rank = static_cast<std::uint32_t>(rank);
  m.rank_count = static_cast<std::uint32_t>(ranks);
  m.block_bytes = 1 << 20;
  modelcast::TensorEntry row;
  row.spec = modelcast::TensorSpec{"w", modelcast::DType::kF32, {1, 4}};
  row.size = 16;
  row.global_shape = {static_cast<std::int64_t>(ranks), 4};
  row.global_offset = {static_cast<std::int64_t>(rank), 0};
  m.tensors.push_back(row);
  auto buffer = std::make_shared<modelcast::detail::DeviceBuffer>();
  buffer->runtime = &rt;
  buffer->base = rt.allocate(0, 64);
  buffer->size = 64;
  const float values[4] = {static_cast<float>(step), static_cast<float>(rank), 0, 0};
  rt.copy_async(buffer->base, values, sizeof values, nullptr);
  rt.synchronize_stream(nullptr);
  version->device = std::move(buffer);
  return version;
}

}  // namespace

// Two ranks' pieces of step 1 for an assembler whose views live on the simulated device.
struct DeviceAssembly {
  modelcast::device::DeviceRuntime& rt = modelcast::device::require_device_runtime("the device tests");
  modelcast::device::SimulatedFaults* faults = modelcast::device::simulated_faults(rt);
  modelcast::consumer::VersionStore store{2, {}};
  std::vector<std::string> errors;  // on_error runs on the offering or retrying thread: this one
  modelcast::consumer::RankAssembler assembler{
      2, {}, {}, {}, nullptr, [this](const modelcast::Error& e) { errors.push_back(e.what()); }, store,
      [](std::size_t, std::vector<modelcast::TensorWant>, std::uint64_t) {},
      std::make_unique<modelcast::consumer::ShapingTarget>(rt, 0, 3)};
  // Offers step 1 with the next `failures` device allocations failing from the last piece on.
  void offer_step_1(std::uint64_t failures) {
    assembler.announced(0, 1, 1);
    assembler.announced(1, 1, 1);
    assembler.offer(0, device_row(rt, 0, 2, 1));
    auto last = device_row(rt, 1, 2, 1);
    faults->fail_allocation(1, failures);  // the assembled views' device memory
    assembler.offer(1, last);
  }
  ~DeviceAssembly() {
    if (faults) faults->disarm();
  }
};

// The device memory for the assembled views of a sharded model's last step cannot be had for a
// moment: the step is put together again a moment later, said once. It was refused for good: the
// model stayed on the step before (or on nothing) until the next publish, for good after the last.
TEST(DeviceAllocation, AnAssembledStepWhoseMemoryCouldNotBeAllocatedIsMadeAMomentLater) {
  DeviceAssembly f;
  if (!f.faults) GTEST_SKIP() << "failing a device allocation on demand needs the simulated device";
  f.offer_step_1(1);
  ASSERT_EQ(f.store.current(), nullptr);
  ASSERT_EQ(f.errors.size(), 1u);
  EXPECT_NE(f.errors[0].find("step 1 waits for memory"), std::string::npos) << f.errors[0];
  EXPECT_NE(f.errors[0].find("injected fault"), std::string::npos) << f.errors[0];
  EXPECT_EQ(f.assembler.counts().versions_rejected, 0u);
  // The rank services call retry() at each turn of their loops.
  ASSERT_TRUE(eventually([&] {
    f.assembler.retry();
    return f.store.current() != nullptr;
  }, 30s)) << f.assembler.counts().waiting;
  EXPECT_EQ(f.store.current()->manifest.step, 1);
  EXPECT_EQ(f.assembler.counts().waiting, "");
  EXPECT_EQ(f.errors.size(), 1u);
}

// Memory that never comes (the assembled copy larger than the device has free): the step is
// refused after a few tries, said, and nothing waits any more; not tried every 500 ms for good.
TEST(DeviceAllocation, AnAssembledStepThatNeverGetsMemoryIsRefusedAfterAFewTries) {
  DeviceAssembly f;
  if (!f.faults) GTEST_SKIP() << "failing a device allocation on demand needs the simulated device";
  f.offer_step_1(1000);
  ASSERT_TRUE(eventually([&] {
    f.assembler.retry();
    return f.assembler.counts().versions_rejected > 0;
  }, 30s)) << f.assembler.counts().waiting;
  EXPECT_EQ(f.store.current(), nullptr);
  ASSERT_EQ(f.errors.size(), 2u) << "said when it began to wait and when it was refused";
  EXPECT_NE(f.errors[1].find("tries found no memory"), std::string::npos) << f.errors[1];
  EXPECT_EQ(f.assembler.counts().waiting, "");
}
