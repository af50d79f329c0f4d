// The device runtime the process selected (MODELCAST_DEVICE: "simulated" in the ordinary suite,
// "cuda" on a machine with a GPU): stream order, events, the digest, IPC between processes.
// Everything here must hold for both implementations.
#include <algorithm>
#include <future>
#include <thread>

#include <gtest/gtest.h>

#include "child_process.h"
#include "core/consumer/device_landing.h"
#include "device/pmix64.h"
#include "device/device_runtime.h"
#include "device/simulated_faults.h"
#include "modelcast/error.h"
#include "peer_paths.h"

using modelcast::device::ByteRange;
using modelcast::device::DeviceRuntime;
using testing_support::ChildProcess;

namespace {

DeviceRuntime& runtime() { return modelcast::device::require_device_runtime("the device tests"); }

std::vector<std::uint64_t> pattern(std::size_t words, std::uint64_t salt) {
  std::vector<std::uint64_t> v(words);
  for (std::size_t i = 0; i < words; ++i) v[i] = (i + 1) * 0x9E3779B97F4A7C15ull ^ salt;
  return v;
}

// Holds a stream at a point until opened: what makes stream order observable without timing.
class Gate {
 public:
  void close_on(DeviceRuntime& rt, void* stream) {
    rt.host_function(stream, [future = opened_.get_future().share()] { future.wait(); });
  }
  void open() { opened_.set_value(); }

 private:
  std::promise<void> opened_;
};

}  // namespace

TEST(DeviceRuntime, WorkWaitsForAnEventOfAnotherStreamAndEventsReportCompletion) {
  auto& rt = runtime();
  const std::size_t n = 64 << 10;
  // Pinned host memory at both ends: CUDA may make a copy from or to pageable memory wait for its
  // stream, and stream a is held at the gate until this thread opens it.
  const auto expected = pattern(n / 8, 1);
  auto* source = static_cast<std::uint64_t*>(rt.allocate_host(n));
  auto* out = static_cast<std::uint64_t*>(rt.allocate_host(n));
  std::copy(expected.begin(), expected.end(), source);
  std::fill(out, out + n / 8, 0);
  void* d = rt.allocate(0, n);
  void* a = rt.create_stream(0);
  void* b = rt.create_stream(0);
  void* e = rt.create_event(0);

  Gate gate;
  gate.close_on(rt, a);
  rt.copy_async(d, source, n, a);
  rt.record(e, a);
  rt.wait(b, e);
  rt.copy_async(out, d, n, b);
  void* after_b = rt.create_event(0);
  rt.record(after_b, b);

  EXPECT_FALSE(rt.ready(e)) << "stream a is held at the gate";
  EXPECT_FALSE(rt.ready(after_b)) << "stream b must wait for stream a's event";
  gate.open();
  rt.synchronize(after_b);
  EXPECT_TRUE(rt.ready(e));
  EXPECT_TRUE(std::equal(expected.begin(), expected.end(), out)) << "stream b copied before stream a's copy";

  rt.release_host(out);
  rt.release_host(source);
  rt.destroy_event(after_b);
  rt.destroy_event(e);
  rt.destroy_stream(b);
  rt.destroy_stream(a);
  rt.release(d);
}

TEST(DeviceRuntime, DeviceDigestEqualsTheHostReference) {
  auto& rt = runtime();
  const std::size_t n = (3 << 20) + 40;  // several kernel segments, an unaligned tail
  std::vector<std::byte> host(n);
  for (std::size_t i = 0; i < n; ++i) host[i] = static_cast<std::byte>((i * 131) ^ (i >> 9));
  void* d = rt.allocate(0, n);
  void* s = rt.create_stream(0);
  rt.copy_async(d, host.data(), n, s);
  std::vector<ByteRange> ranges{{0, 1000}, {1024, 0}, {4096, n - 4096 - 3}, {n - 3, 3}};
  auto digests = rt.digest(0, d, ranges, s);  // ordered after the copy by the stream
  ASSERT_EQ(digests.size(), ranges.size());
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    EXPECT_EQ(digests[i], modelcast::pmix64::digest_host(host.data() + ranges[i].offset, ranges[i].size)) << i;
  }
  rt.destroy_stream(s);
  rt.release(d);
}

TEST(DeviceRuntime, PointerInfoTellsDeviceMemoryFromHostMemory) {
  auto& rt = runtime();
  void* d = rt.allocate(0, 4096);
  auto info = rt.pointer_info(static_cast<char*>(d) + 100);
  EXPECT_EQ(info.kind, modelcast::MemoryKind::kCuda);
  EXPECT_EQ(info.device, 0);
  EXPECT_EQ(info.allocation_base, d);
  std::vector<int> host(16);
  EXPECT_EQ(rt.pointer_info(host.data()).kind, modelcast::MemoryKind::kHost);
  rt.release(d);
}

TEST(DeviceRuntime, AnotherProcessMapsAnExportedAllocationAndThisOneCannot) {
  auto& rt = runtime();
  const std::size_t n = 1 << 20;
  auto bytes = pattern(n / 8, 7);
  void* d = rt.allocate(0, n);
  rt.copy_async(d, bytes.data(), n, nullptr);
  rt.synchronize_stream(nullptr);

  auto handle = rt.export_allocation(d);
  std::string hex;
  for (auto b : handle) {
    char two[3];
    std::snprintf(two, sizeof two, "%02x", static_cast<unsigned>(b));
    hex += two;
  }
  ChildProcess peer({peer_paths::device_peer(), "ipc-read", "--handle", hex, "--size", std::to_string(n)});
  auto line = peer.wait_for_line("pmix64 ");
  ASSERT_TRUE(line) << "peer: " << (peer.lines().empty() ? "(nothing)" : peer.lines().back());
  char expected[32];
  std::snprintf(expected, sizeof expected, "%016llx",
                static_cast<unsigned long long>(modelcast::pmix64::digest_host(bytes.data(), n)));
  EXPECT_EQ(line->substr(7), expected);
  EXPECT_EQ(peer.wait(), 0);

  // CUDA's rules the library relies on: IPC is between processes, and only whole allocations.
  try {
    rt.open_ipc(handle, 0);
    ADD_FAILURE() << "opened this process's own handle";
  } catch (const modelcast::Error& e) {
    EXPECT_EQ(e.code(), modelcast::ErrorCode::kTransport);
  }
  EXPECT_THROW(rt.export_allocation(static_cast<char*>(d) + 256), modelcast::Error);
  rt.release(d);
}

TEST(DeviceRuntime, TheSimulationRefusesCopiesPastAnAllocationsEnd) {
  // A GPU faults (or corrupts a neighbour) here; the simulation says so at once.
  auto sim = modelcast::device::make_simulated_runtime();
  void* d = sim->allocate(0, 1000);
  std::vector<std::byte> host(2000);
  EXPECT_THROW(sim->copy_async(d, host.data(), 1001, nullptr), modelcast::Error);
  EXPECT_THROW(sim->copy_async(host.data(), static_cast<char*>(d) + 500, 501, nullptr), modelcast::Error);
  EXPECT_NO_THROW(sim->copy_async(d, host.data(), 1000, nullptr));
  EXPECT_THROW(sim->allocate(5, 16), modelcast::Error);
  sim->release(d);
}

// The injected copy failure behaves as CUDA reports an asynchronous one: the copy waits its
// turn on the stream, writes nothing, and the next event recorded after it says so once; the
// stream's later work, and the next synchronisation, go on normally.
TEST(DeviceRuntime, TheSimulationsInjectedCopyFailureSurfacesOnceAtTheNextEvent) {
  auto sim = modelcast::device::make_simulated_runtime();
  auto* faults = modelcast::device::simulated_faults(*sim);
  ASSERT_NE(faults, nullptr);
  std::promise<void> never;
  EXPECT_THROW(faults->fail_copy_to_host(0, never.get_future().share()), modelcast::Error);
  EXPECT_THROW(faults->fail_copy_to_host(1, {}), modelcast::Error);
  const std::size_t n = 4096;
  void* d = sim->allocate(0, n);
  void* stream = sim->create_stream(0);
  void* event = sim->create_event(0);
  std::vector<std::byte> source(n, std::byte{7}), first(n), second(n), third(n);
  sim->copy_async(d, source.data(), n, stream);
  std::promise<void> release;
  faults->fail_copy_to_host(2, release.get_future().share());
  sim->copy_async(first.data(), d, n, stream);   // the first copy to the host: not the one
  sim->copy_async(second.data(), d, n, stream);  // the second: held, then fails
  sim->record(event, stream);
  EXPECT_FALSE(sim->ready(event)) << "the failing copy must wait for its release";
  release.set_value();
  EXPECT_THROW(sim->synchronize(event), modelcast::Error);
  EXPECT_EQ(first, source);
  EXPECT_EQ(second, std::vector<std::byte>(n)) << "a failed copy wrote something";
  sim->copy_async(third.data(), d, n, stream);
  sim->record(event, stream);
  EXPECT_NO_THROW(sim->synchronize(event));
  EXPECT_EQ(third, source);
  EXPECT_NO_THROW(sim->synchronize_stream(stream));
  sim->destroy_event(event);
  sim->destroy_stream(stream);
  sim->release(d);
}

// A held copy to the host waits its turn and then its release, and copies as usual; the count
// of bytes copied from host to device grows as each such copy completes, not when it is queued.
TEST(DeviceRuntime, TheSimulationHoldsACopyToTheHostUntilReleasedAndCountsCopiesToTheDevice) {
  auto sim = modelcast::device::make_simulated_runtime();
  auto* faults = modelcast::device::simulated_faults(*sim);
  ASSERT_NE(faults, nullptr);
  std::promise<void> never;
  EXPECT_THROW(faults->hold_copy_to_host(0, never.get_future().share()), modelcast::Error);
  EXPECT_THROW(faults->hold_copy_to_host(1, {}), modelcast::Error);
  const std::size_t n = 4096;
  void* d = sim->allocate(0, n);
  void* other = sim->allocate(1, n);
  void* stream = sim->create_stream(0);
  void* event = sim->create_event(0);
  std::vector<std::byte> source(n, std::byte{9}), back(n);
  Gate gate;
  gate.close_on(*sim, stream);
  sim->copy_async(d, source.data(), n, stream);
  sim->copy_async(other, d, n, stream);  // device to device: not counted
  sim->record(event, stream);
  EXPECT_EQ(faults->copied_host_to_device(), 0u) << "counted when queued, not when done";
  gate.open();
  sim->synchronize(event);
  EXPECT_EQ(faults->copied_host_to_device(), n);
  std::promise<void> release;
  auto reached = faults->hold_copy_to_host(2, release.get_future().share());
  std::vector<std::byte> first(n);
  sim->copy_async(first.data(), d, n, stream);  // the first copy to the host: not the one
  sim->copy_async(back.data(), d, n, stream);   // the second: held
  sim->record(event, stream);
  ASSERT_EQ(reached.wait_for(std::chrono::seconds(20)), std::future_status::ready) << "the held copy was not reached";
  EXPECT_EQ(first, source);
  EXPECT_FALSE(sim->ready(event)) << "the held copy must wait for its release";
  EXPECT_EQ(back, std::vector<std::byte>(n)) << "the held copy ran before its release";
  release.set_value();
  EXPECT_NO_THROW(sim->synchronize(event));
  EXPECT_EQ(back, source);
  EXPECT_EQ(faults->copied_host_to_device(), n);
  sim->destroy_event(event);
  sim->destroy_stream(stream);
  sim->release(other);
  sim->release(d);
}

// Work that CUDA refuses across devices: an event recorded on another device's stream, a
// kernel (the digest) queued on another device's stream. Copies may cross devices.
TEST(DeviceRuntime, TheSimulationRefusesEventsAndDigestsOnAnotherDevicesStream) {
  auto sim = modelcast::device::make_simulated_runtime(2);
  void* d = sim->allocate(0, 4096);
  void* stream0 = sim->create_stream(0);
  void* stream1 = sim->create_stream(1);
  void* event0 = sim->create_event(0);
  EXPECT_THROW(sim->record(event0, stream1), modelcast::Error);
  EXPECT_NO_THROW(sim->record(event0, stream0));
  EXPECT_NO_THROW(sim->record(event0, nullptr));
  std::vector<ByteRange> ranges{{0, 4096}};
  EXPECT_THROW(sim->digest(0, d, ranges, stream1), modelcast::Error);
  EXPECT_NO_THROW(sim->digest(0, d, ranges, stream0));
  sim->destroy_event(event0);
  sim->destroy_stream(stream1);
  sim->destroy_stream(stream0);
  sim->release(d);
}

// CUDA forbids any CUDA call from a host function (it fails or deadlocks); the simulation ends
// the process instead of letting it pass, so such a call cannot hide until a GPU runs the code.
TEST(DeviceRuntimeDeathTest, TheSimulationRefusesARuntimeCallFromAHostFunction) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        auto sim = modelcast::device::make_simulated_runtime();
        void* stream = sim->create_stream(0);
        sim->host_function(stream, [&] { sim->destroy_event(sim->create_event(0)); });
        sim->synchronize_stream(stream);
      },
      "create_event called from a host function");
}

// A device consumer whose device allocation fails (a model too large for the device) rejects
// that version and can still land the next one: the failure must not use up a buffer.
TEST(DeviceLanding, AFailedAllocationLeavesThePoolUsable) {
  auto& rt = runtime();
  modelcast::consumer::DeviceLanding landing(rt, 0, 1);
  std::vector<std::byte> host(4096, std::byte{0x5a});
  modelcast::detail::ReceiveBuffer receive;
  receive.memory = host;
  modelcast::Manifest huge;
  huge.total_bytes = std::uint64_t{1} << 62;
  EXPECT_THROW(landing.land(huge, receive, false), modelcast::Error);
  EXPECT_TRUE(landing.available());
  modelcast::Manifest small;
  small.total_bytes = host.size();
  auto landed = landing.land(small, receive, false);
  ASSERT_NE(landed.buffer, nullptr);
  std::vector<std::byte> back(host.size());
  rt.copy_async(back.data(), landed.buffer->base, back.size(), nullptr);
  rt.synchronize_stream(nullptr);
  EXPECT_EQ(back, host);
}

// A device consumer copies each chunk on to the device as the received prefix grows: what was
// advanced is on the device before complete() is called, and complete() adds the rest.
TEST(DeviceLanding, ThePrefixReceivedSoFarIsCopiedBeforeTheRestArrives) {
  auto& rt = runtime();
  modelcast::consumer::DeviceLanding landing(rt, 0, 1);
  const std::size_t words = 96 << 10, half = words / 2;
  auto expected = pattern(words, 7);
  std::vector<std::uint64_t> host(words, 0);
  modelcast::detail::ReceiveBuffer receive;
  receive.memory = std::span<std::byte>(reinterpret_cast<std::byte*>(host.data()), host.size() * 8);
  modelcast::Manifest manifest;
  manifest.total_bytes = receive.memory.size();
  manifest.tensors.resize(2);
  manifest.tensors[0].offset = 0;
  manifest.tensors[0].size = half * 8;
  manifest.tensors[1].offset = half * 8;
  manifest.tensors[1].size = (words - half) * 8;

  landing.begin(manifest.total_bytes, receive);
  EXPECT_FALSE(landing.available()) << "a landing in progress left its buffer to others";
  std::copy(expected.begin(), expected.begin() + half, host.begin());
  landing.advance(half * 8);
  landing.advance(half * 8 - 64);  // a prefix never shrinks: nothing is copied again
  rt.synchronize_stream(landing.stream());
  std::copy(expected.begin() + half, expected.end(), host.begin() + half);
  // The first half is on the device already: overwriting it in host memory now must not
  // change what lands (a landing that copied everything at complete() would take this).
  std::vector<std::uint64_t> first_half(expected.begin(), expected.begin() + half);
  std::fill(host.begin(), host.begin() + half, 0xDEADull);
  auto landed = landing.complete(manifest, true);
  ASSERT_NE(landed.buffer, nullptr);
  std::vector<std::uint64_t> back(words);
  rt.copy_async(back.data(), landed.buffer->base, words * 8, nullptr);
  rt.synchronize_stream(nullptr);
  EXPECT_TRUE(std::equal(back.begin(), back.begin() + half, first_half.begin()))
      << "the advanced prefix was copied again at complete(), or never";
  EXPECT_TRUE(std::equal(back.begin() + half, back.end(), expected.begin() + half));
  ASSERT_EQ(landed.digests.size(), 2u);
  EXPECT_EQ(landed.digests[0], modelcast::pmix64::digest_host(expected.data(), half * 8));
  EXPECT_EQ(landed.digests[1], modelcast::pmix64::digest_host(expected.data() + half, (words - half) * 8));
  EXPECT_FALSE(landing.landing());
}

// An abandoned landing gives its device buffer back: the next version can land.
TEST(DeviceLanding, AnAbandonedLandingFreesItsBufferForTheNext) {
  auto& rt = runtime();
  modelcast::consumer::DeviceLanding landing(rt, 0, 1);
  std::vector<std::byte> host(256 << 10, std::byte{0x11});
  modelcast::detail::ReceiveBuffer receive;
  receive.memory = host;
  landing.begin(host.size(), receive);
  landing.advance(host.size() / 2);
  EXPECT_FALSE(landing.available());
  landing.abandon();
  EXPECT_FALSE(landing.landing());
  EXPECT_TRUE(landing.available());
  modelcast::Manifest manifest;
  manifest.total_bytes = host.size();
  auto landed = landing.land(manifest, receive, false);
  std::vector<std::byte> back(host.size());
  rt.copy_async(back.data(), landed.buffer->base, back.size(), nullptr);
  rt.synchronize_stream(nullptr);
  EXPECT_EQ(back, host);
}
