// The staged path overlaps its three steps chunk by chunk: the producer sends a chunk as soon as
// the device-to-host copy has put it on the host, and a device consumer copies each chunk on to
// its device as it lands, so an update costs about the slowest step rather than their sum.
//
// Shown without timing: the simulated device holds the device-to-host copy of a late piece of
// the version, and the test sees earlier chunks already on the consumer's device meanwhile. Run
// one after the other, the steps could not get there: nothing is sent before the last piece is
// on the host, and nothing lands on the device before the last chunk is in. Producer and
// consumer share this process, so the test sees both sides of the one simulated device.
#include <future>

#include <gtest/gtest.h>

#include "device/simulated_faults.h"
#include "device_model.h"
#include "eventually.h"
#include "modelcast/consumer.h"
#include "modelcast/producer.h"

using namespace std::chrono_literals;
using testing_support::eventually;

namespace {

constexpr std::size_t kPiece = 64 << 10;  // device-to-host pieces and transfer chunks alike

TEST(StagedOverlap, ChunksLandOnTheConsumersDeviceWhileTheProducersDeviceToHostCopyIsStillRunning) {
  auto& rt = modelcast::device::require_device_runtime("the device tests");
  auto* faults = modelcast::device::simulated_faults(rt);
  if (!faults) GTEST_SKIP() << "holding a device copy on demand needs the simulated device";
  modelcast::ProducerOptions options;
  options.model_name = "test";
  options.control_endpoint = "tcp://127.0.0.1:0";
  options.transfer_chunk_bytes = kPiece;
  options.device_stage_bytes = kPiece;
  modelcast::Producer producer(options);
  devicemodel::DeviceModel model(rt, 0, 512);  // 512 KiB: eight pieces and eight chunks
  producer.register_tensors(model.refs());
  producer.prepare();
  modelcast::ConsumerOptions consumer_options;
  consumer_options.producer_endpoint = producer.control_endpoint();
  consumer_options.model_name = "test";
  consumer_options.memory = modelcast::MemoryKind::kCuda;
  consumer_options.device = devicemodel::other_device(rt);
  consumer_options.transports = {"ucx"};  // staged: device slot, host slot, UCX, host buffer, device
  modelcast::Consumer consumer(consumer_options);
  ASSERT_TRUE(producer.wait_for_consumers(1, 60s));
  model.upload(23, 1);

  // Declared after the producer and the consumer, so leaving the test by any path lets the held
  // copy go first (a broken promise releases it too) and disarms a hold not reached.
  std::promise<void> release;
  struct Disarm {
    modelcast::device::SimulatedFaults* faults;
    ~Disarm() { faults->disarm(); }
  } disarm{faults};
  const std::uint64_t before = faults->copied_host_to_device();
  // The sixth piece of the version (and so every piece after it, on the same stream) stays off
  // the host: five chunks can be sent, none of the last three.
  auto reached = faults->hold_copy_to_host(6, release.get_future().share());
  producer.publish(1);
  const bool held = reached.wait_for(60s) == std::future_status::ready;
  const bool landed = eventually([&] { return faults->copied_host_to_device() - before >= kPiece; }, 60s);
  const std::uint64_t landed_while_held = faults->copied_host_to_device() - before;
  const bool installed_while_held = static_cast<bool>(consumer.acquire());
  release.set_value();
  ASSERT_TRUE(held) << "the producer's device-to-host copy never reached its sixth piece";
  EXPECT_TRUE(landed) << "no chunk reached the consumer's device while the producer's device-to-host copy ran";
  EXPECT_LE(landed_while_held, 5 * kPiece) << "more landed than the pieces on the host could have sent";
  EXPECT_FALSE(installed_while_held) << "the version was installed before all of it was on the host";

  auto view = consumer.wait_for_version(1, 60000ms);
  ASSERT_TRUE(view) << "version 1 did not arrive once the copy went on";
  EXPECT_EQ(devicemodel::check(rt, view, 23), "");
  EXPECT_EQ(consumer.stats().path, "staged");
}

}  // namespace
