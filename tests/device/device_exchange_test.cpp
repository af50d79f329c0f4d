// Device tensors end to end over the public API: a device producer to host and device consumers
// in other processes, a host producer to a device consumer, publish ordered against the
// trainer's stream, and misplaced memory refused. The device is whichever MODELCAST_DEVICE
// selects: the simulation in the ordinary suite, the GPU on a machine with one.
#include <signal.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <future>
#include <mutex>
#include <set>

#include <gtest/gtest.h>

#include "process_status.h"
#include "child_process.h"
#include "device/simulated_faults.h"
#include "core/model/manifest.h"
#include "device_model.h"
#include "eventually.h"
#include "gate.h"
#include "modelcast/consumer.h"
#include "modelcast/error.h"
#include "modelcast/producer.h"
#include "peer_paths.h"

using namespace std::chrono_literals;
using modelcast::MemoryKind;
using modelcast::device::DeviceRuntime;
using testing_support::ChildProcess;
using testing_support::eventually;

namespace {

DeviceRuntime& runtime() { return modelcast::device::require_device_runtime("the device tests"); }

modelcast::ProducerOptions producer_options() {
  modelcast::ProducerOptions options;
  options.model_name = "test";
  options.control_endpoint = "tcp://127.0.0.1:0";
  return options;
}

// Chunks and staging pieces much smaller than the test models: staged routes send each chunk as
// the device-to-host copy reaches it, and a device consumer copies it on as it lands.
modelcast::ProducerOptions small_piece_options() {
  auto options = producer_options();
  options.transfer_chunk_bytes = 64 << 10;
  options.device_stage_bytes = 64 << 10;
  return options;
}

modelcast::ConsumerOptions consumer_options(const std::string& endpoint, MemoryKind memory, int device) {
  modelcast::ConsumerOptions options;
  options.producer_endpoint = endpoint;
  options.model_name = "test";
  options.memory = memory;
  options.device = device;
  return options;
}

// Publishes versions 1..4 of a device model to a peer consumer and checks what it installed
// and over which transport.
void serve_peer_consumer(const std::string& memory, const std::string& transports, const std::string& expected,
                         const std::string& path = "",
                         devicemodel::DeviceModel::Placement placement = devicemodel::DeviceModel::Placement::kOwnAllocations) {
  auto& rt = runtime();
  auto options = small_piece_options();
  modelcast::Producer producer(options);
  devicemodel::DeviceModel model(rt, 0, 512, 12, placement);
  producer.register_tensors(model.refs());
  producer.prepare();
  const int device = devicemodel::other_device(rt);
  ChildProcess peer({peer_paths::device_peer(), "consumer", "--endpoint", producer.control_endpoint(),
                     "--until-version", "4", "--seed", "9", "--memory", memory, "--device", std::to_string(device),
                     "--transports", transports, "--path", path});
  ASSERT_TRUE(producer.wait_for_consumers(1, 60s));
  for (std::uint64_t v = 1; v <= 4; ++v) {
    model.upload(9, v);
    auto ticket = producer.publish(static_cast<std::int64_t>(v));
    ASSERT_EQ(ticket.version, v);
    // One version at a time, so every one is delivered and checked.
    auto line = peer.wait_for_line("installed " + std::to_string(v));
    ASSERT_TRUE(line) << "peer: " << (peer.lines().empty() ? "(nothing)" : peer.lines().back());
    std::string where = memory == "cuda" ? "memory=cuda device=" + std::to_string(device) : "memory=host";
    EXPECT_NE(line->find(where), std::string::npos) << *line;
    EXPECT_NE(line->find("transport=" + expected), std::string::npos) << *line;
  }
  EXPECT_EQ(peer.wait(), 0);
  for (const auto& line : peer.lines()) EXPECT_EQ(line.rfind("corrupt", 0), std::string::npos) << line;
  EXPECT_EQ(producer.stats().failed_snapshots, 0u);
}

}  // namespace

// Device slot -> host slot (staging) -> UCX -> host buffer.
TEST(DeviceExchange, ADeviceProducerServesAHostConsumerInAnotherProcess) {
  serve_peer_consumer("host", "ucx,cuda_ipc", "ucx path=staged");
}

// Same host, device to device: the consumer maps the producer's slot and copies on the device.
TEST(DeviceExchange, ADeviceConsumerOnTheSameHostReadsTheSlotOverCudaIpc) {
  serve_peer_consumer("cuda", "ucx,cuda_ipc", "cuda_ipc path=cuda_ipc");
}

// CUDA IPC on offer, but the consumer insists on staging: the path is forcible.
TEST(DeviceExchange, AConsumerCanForceTheStagedPathWhereCudaIpcWouldServe) {
  serve_peer_consumer("cuda", "cuda_ipc,ucx", "ucx path=staged", "staged");
}

// The same pair without CUDA IPC on offer: staged through host memory at both ends.
TEST(DeviceExchange, ADeviceConsumerWithoutCudaIpcIsServedStagedThroughTheHost) {
  serve_peer_consumer("cuda", "ucx", "ucx path=staged");
}

// Tensors inside one larger allocation, none at its base: the snapshot copies them from their
// offsets, and every path delivers them exactly.
TEST(DeviceExchange, TensorsAtInteriorOffsetsOfOneAllocationArriveExactOverEveryPath) {
  using Placement = devicemodel::DeviceModel::Placement;
  serve_peer_consumer("cuda", "ucx,cuda_ipc", "cuda_ipc path=cuda_ipc", "", Placement::kInteriorOffsets);
  serve_peer_consumer("cuda", "ucx", "ucx path=staged", "", Placement::kInteriorOffsets);
  serve_peer_consumer("host", "ucx,cuda_ipc", "ucx path=staged", "", Placement::kInteriorOffsets);
}

// Versions published back to back while a reader in the consumer process acquires and checks
// views all along: no view ever shows a mix of two versions, on either device route.
void stream_updates_under_a_reader(const std::string& transports, const std::string& path, const std::string& expected) {
  auto& rt = runtime();
  auto options = small_piece_options();
  modelcast::Producer producer(options);
  devicemodel::DeviceModel model(rt, 0, 512);
  producer.register_tensors(model.refs());
  producer.prepare();
  constexpr std::uint64_t kVersions = 24;
  ChildProcess peer({peer_paths::device_peer(), "consumer", "--endpoint", producer.control_endpoint(),
                     "--until-version", std::to_string(kVersions), "--seed", "11", "--memory", "cuda", "--device",
                     std::to_string(devicemodel::other_device(rt)), "--transports", transports, "--path", path,
                     "--read-loop"});
  ASSERT_TRUE(producer.wait_for_consumers(1, 60s));
  for (std::uint64_t v = 1; v <= kVersions; ++v) {
    model.upload(11, v);
    producer.publish(static_cast<std::int64_t>(v));  // no waiting for the consumer in between
  }
  auto reads = peer.wait_for_line("reads ");
  ASSERT_TRUE(reads) << "peer: " << (peer.lines().empty() ? "(nothing)" : peer.lines().back());
  EXPECT_GT(std::stoull(reads->substr(6)), 0u);
  EXPECT_EQ(peer.wait(), 0);
  bool routed = false;
  for (const auto& line : peer.lines()) {
    EXPECT_EQ(line.rfind("corrupt", 0), std::string::npos) << line;
    routed = routed || line.find("transport=" + expected) != std::string::npos;
  }
  EXPECT_TRUE(routed) << "no version came over " << expected;
}

TEST(DeviceExchange, AReaderNeverSeesATornVersionDuringAStreamOfUpdatesOverCudaIpc) {
  stream_updates_under_a_reader("ucx,cuda_ipc", "", "cuda_ipc path=cuda_ipc");
}

TEST(DeviceExchange, AReaderNeverSeesATornVersionDuringAStreamOfUpdatesStaged) {
  stream_updates_under_a_reader("ucx", "", "ucx path=staged");
}

// A consumer that joins before the producer's slots exist is routed for host slots; the first
// publish puts them on the device and drops it so that it joins again for a route that fits.
// The producer announces to joined consumers only, so it tells the consumer it was dropped:
// the consumer joins again at once, not after a producer_timeout without announcements.
TEST(DeviceExchange, AConsumerJoinedBeforeTheSlotsMovedToTheDeviceIsToldAndJoinsAgain) {
  auto& rt = runtime();
  auto options = small_piece_options();
  modelcast::Producer producer(options);
  devicemodel::DeviceModel model(rt, 0, 512);
  producer.register_tensors(model.refs());
  auto consumer_opts = consumer_options(producer.control_endpoint(), MemoryKind::kHost, 0);
  consumer_opts.producer_timeout = 60s;  // so that only being told can explain a quick rejoin
  modelcast::Consumer consumer(consumer_opts);
  ASSERT_TRUE(producer.wait_for_consumers(1, 60s));
  model.upload(5, 1);
  const auto published = std::chrono::steady_clock::now();
  producer.publish(1);
  auto view = consumer.wait_for_version(1, 60s);
  ASSERT_TRUE(view);
  EXPECT_LT(std::chrono::steady_clock::now() - published, 10s);
  EXPECT_EQ(consumer.stats().path, "staged");
  EXPECT_EQ(consumer.stats().reconnects, 0u) << "it rejoined only after producer_timeout";
}

// A consumer that dies while versions are in flight to it costs the producer nothing it keeps:
// publishing goes on, another consumer gets every later version exactly. With two slots, one
// holds the newest version and the other is written next, so a lease the dead consumer kept
// would stop publish() for good: going on proves the lease was reclaimed.
void survive_a_killed_consumer(const std::string& transports, const std::string& expected) {
  auto& rt = runtime();
  auto options = small_piece_options();
  options.lease_timeout = 1000ms;
  options.snapshot_slots = 2;
  modelcast::Producer producer(options);
  devicemodel::DeviceModel model(rt, 0, 512);
  producer.register_tensors(model.refs());
  producer.prepare();
  const std::string device = std::to_string(devicemodel::other_device(rt));
  auto victim = std::make_unique<ChildProcess>(std::vector<std::string>{
      peer_paths::device_peer(), "consumer", "--endpoint", producer.control_endpoint(), "--until-version", "1000",
      "--seed", "13", "--memory", "cuda", "--device", device, "--transports", transports});
  constexpr std::uint64_t kVersions = 10;
  ChildProcess survivor({peer_paths::device_peer(), "consumer", "--endpoint", producer.control_endpoint(),
                         "--until-version", std::to_string(kVersions), "--seed", "13", "--memory", "cuda", "--device",
                         device, "--transports", transports});
  ASSERT_TRUE(producer.wait_for_consumers(2, 60s));
  model.upload(13, 1);
  producer.publish(1);
  ASSERT_TRUE(victim->wait_for_line("installed 1"));
  ASSERT_TRUE(survivor.wait_for_line("installed 1"));
  model.upload(13, 2);
  producer.publish(2);
  victim.reset();  // SIGKILL, with version 2 announced and on its way
  for (std::uint64_t v = 3; v <= kVersions; ++v) {
    model.upload(13, v);
    producer.publish(static_cast<std::int64_t>(v));
  }
  EXPECT_EQ(survivor.wait(), 0);
  bool last = false;
  for (const auto& line : survivor.lines()) {
    EXPECT_EQ(line.rfind("corrupt", 0), std::string::npos) << line;
    last = last || (line.rfind("installed " + std::to_string(kVersions), 0) == 0 &&
                    line.find("transport=" + expected) != std::string::npos);
  }
  EXPECT_TRUE(last) << "the survivor did not get the last version over " << expected;
  EXPECT_EQ(producer.stats().failed_snapshots, 0u);
}

TEST(DeviceExchange, AConsumerKilledWhileVersionsAreInFlightLeavesTheProducerServingOverCudaIpc) {
  survive_a_killed_consumer("ucx,cuda_ipc", "cuda_ipc path=cuda_ipc");
}

TEST(DeviceExchange, AConsumerKilledWhileVersionsAreInFlightLeavesTheProducerServingStaged) {
  survive_a_killed_consumer("ucx", "ucx path=staged");
}

// A device consumer (seed 17, until `until`) whose device copies flip one byte, byte 1000 of the
// second version (the consumer copies each version into device memory once), sent version 1
// (installed) and then version 2. Null, the failure added, where version 1 did not arrive.
std::unique_ptr<ChildProcess> flipping_consumer_sent_two_versions(modelcast::Producer& producer,
                                                                  devicemodel::DeviceModel& model,
                                                                  const std::string& transports, int until) {
  std::vector<modelcast::TensorSpec> specs;
  for (const auto& ref : model.refs()) specs.push_back(ref.spec);
  std::uint64_t version_bytes = 0;
  modelcast::plan_layout(specs, &version_bytes);
  auto peer = std::make_unique<ChildProcess>(
      std::vector<std::string>{peer_paths::device_peer(), "consumer", "--endpoint", producer.control_endpoint(),
                               "--until-version", std::to_string(until), "--seed", "17", "--memory", "cuda", "--device",
                               std::to_string(devicemodel::other_device(runtime())), "--transports", transports},
      std::vector<std::string>{"MODELCAST_SIMULATED_FLIP_BYTE=" + std::to_string(version_bytes + 1000)});
  if (!producer.wait_for_consumers(1, 60s)) {
    ADD_FAILURE() << "the consumer did not join";
    return nullptr;
  }
  model.upload(17, 1);
  producer.publish(1);
  if (!peer->wait_for_line("installed 1")) {
    ADD_FAILURE() << "version 1 was not installed: " << joined_lines(*peer);
    return nullptr;
  }
  model.upload(17, 2);
  producer.publish(2);
  return peer;
}

// One byte flipped as a version lands in the consumer's device memory (after the transport,
// where only the device digest can see it): that version is rejected naming the tensor and
// never installed, and the next one is. Only the simulated device can flip a byte on demand.
void reject_a_corrupt_version(const std::string& transports, const std::string& expected) {
  auto& rt = runtime();
  if (rt.name() != "simulated") GTEST_SKIP() << "flipping a byte in flight needs the simulated device";
  auto options = small_piece_options();
  modelcast::Producer producer(options);
  devicemodel::DeviceModel model(rt, 0, 512);
  producer.register_tensors(model.refs());
  producer.prepare();
  std::vector<modelcast::TensorSpec> specs;
  for (const auto& ref : model.refs()) specs.push_back(ref.spec);
  std::uint64_t version_bytes = 0;
  const auto layout = modelcast::plan_layout(specs, &version_bytes);
  auto peer_process = flipping_consumer_sent_two_versions(producer, model, transports, 3);
  ASSERT_TRUE(peer_process);
  auto& peer = *peer_process;
  auto rejected = peer.wait_for_line("rejected ");
  ASSERT_TRUE(rejected) << "a corrupt version was not rejected";
  EXPECT_NE(rejected->find("version 2"), std::string::npos) << *rejected;
  std::string tensor;
  for (const auto& t : layout) {
    if (1000 >= t.offset && 1000 < t.offset + t.size) tensor = t.spec.name;
  }
  EXPECT_NE(rejected->find("'" + tensor + "'"), std::string::npos) << *rejected << " (expected tensor " << tensor << ")";
  model.upload(17, 3);
  producer.publish(3);
  auto third = peer.wait_for_line("installed 3");
  ASSERT_TRUE(third) << "peer: " << (peer.lines().empty() ? "(nothing)" : peer.lines().back());
  EXPECT_NE(third->find("transport=" + expected), std::string::npos) << *third;
  EXPECT_EQ(peer.wait(), 0);
  for (const auto& line : peer.lines()) {
    EXPECT_EQ(line.rfind("corrupt", 0), std::string::npos) << line;
    EXPECT_EQ(line.rfind("installed 2", 0), std::string::npos) << "the corrupt version was installed";
  }
}

TEST(DeviceExchange, ACorruptByteIsDetectedOnTheDeviceAndTheVersionRejectedStaged) {
  reject_a_corrupt_version("ucx", "ucx path=staged");
}

// The device-to-host copy of a staged version fails after a consumer's fetch of it was answered:
// the producer withdraws the fetch, and the consumer drops it at once (its transfer timeout is
// ten minutes, so waiting for that would fail the test), keeps the version before, and takes
// the next one exactly. Only the simulated device fails a copy on demand.
void drop_a_fetch_whose_host_copy_failed(const std::string& memory) {
  auto& rt = runtime();
  auto* faults = modelcast::device::simulated_faults(rt);
  if (!faults) GTEST_SKIP() << "failing a device copy on demand needs the simulated device";
  auto options = small_piece_options();
  modelcast::Producer producer(options);
  devicemodel::DeviceModel model(rt, 0, 512);
  producer.register_tensors(model.refs());
  producer.prepare();
  ChildProcess peer({peer_paths::device_peer(), "consumer", "--endpoint", producer.control_endpoint(),
                     "--until-version", "3", "--seed", "19", "--memory", memory, "--device",
                     std::to_string(devicemodel::other_device(rt)), "--transports", "ucx", "--transfer-timeout-ms",
                     "600000"});
  ASSERT_TRUE(producer.wait_for_consumers(1, 60s));
  model.upload(19, 1);
  producer.publish(1);
  ASSERT_TRUE(peer.wait_for_line("installed 1"));
  // Version 1's lease is over once its delivery is counted: a lease seen later is version 2's.
  ASSERT_TRUE(eventually([&] { return producer.stats().deliveries == 1; }, 60s));
  // Declared after the producer, so leaving the test by any path lets the held copy go first,
  // and disarms a fault not reached.
  std::promise<void> release;
  struct Disarm {
    modelcast::device::SimulatedFaults* faults;
    ~Disarm() { faults->disarm(); }
  } disarm{faults};
  // 512 KiB in 64 KiB pieces: the fourth piece of version 2 is held, then fails, with three
  // pieces on the host and their chunks posted to the consumer.
  faults->fail_copy_to_host(4, release.get_future().share());
  model.upload(19, 2);
  producer.publish(2);
  ASSERT_TRUE(eventually([&] { return producer.stats().fetches_in_flight == 1; }, 60s))
      << "the consumer's fetch of version 2 was not answered";
  release.set_value();
  ASSERT_TRUE(eventually([&] { return producer.stats().failed_deliveries == 1; }, 60s)) << "the fetch was not withdrawn";
  EXPECT_EQ(producer.stats().failed_snapshots, 1u);
  model.upload(19, 3);
  producer.publish(3);
  auto third = peer.wait_for_line("installed 3");
  ASSERT_TRUE(third) << "peer: " << (peer.lines().empty() ? "(nothing)" : peer.lines().back());
  EXPECT_NE(third->find("transport=ucx path=staged"), std::string::npos) << *third;
  EXPECT_EQ(peer.wait(), 0);
  std::string stats;
  for (const auto& line : peer.lines()) {
    EXPECT_EQ(line.rfind("corrupt", 0), std::string::npos) << line;
    EXPECT_EQ(line.rfind("installed 2", 0), std::string::npos) << "a version whose host copy failed was installed";
    if (line.rfind("stats ", 0) == 0) stats = line;
  }
  // One transfer dropped (the withdrawn one), nothing rejected: a refusal before the answer
  // would have been dropped without counting.
  EXPECT_EQ(stats.rfind("stats aborted=1 rejected=0 ", 0), 0u) << stats;
  // The peer's last ack may still be on its way when it exits.
  EXPECT_TRUE(eventually([&] { return producer.stats().deliveries == 2; })) << producer.stats().deliveries;
}

TEST(DeviceExchange, AHostConsumerDropsAFetchTheProducerWithdrawsWhenItsHostCopyFails) {
  drop_a_fetch_whose_host_copy_failed("host");
}

TEST(DeviceExchange, ADeviceConsumerDropsAFetchTheProducerWithdrawsWhenItsHostCopyFails) {
  drop_a_fetch_whose_host_copy_failed("cuda");
}

// A consumer that joins before the producer knows its tensors are on a device was routed for
// host slots; once the device slots exist it is routed again, onto CUDA IPC.
TEST(DeviceExchange, AConsumerThatJoinedBeforeTheDeviceSlotsExistedIsReroutedOntoCudaIpc) {
  auto& rt = runtime();
  modelcast::Producer producer(producer_options());
  const int device = devicemodel::other_device(rt);
  ChildProcess peer({peer_paths::device_peer(), "consumer", "--endpoint", producer.control_endpoint(),
                     "--until-version", "2", "--seed", "4", "--memory", "cuda", "--device", std::to_string(device)});
  ASSERT_TRUE(producer.wait_for_consumers(1, 60s)) << "the consumer joins while nothing is registered";
  devicemodel::DeviceModel model(rt, 0, 256);
  producer.register_tensors(model.refs());
  producer.prepare();
  for (std::uint64_t v = 1; v <= 2; ++v) {
    model.upload(4, v);
    producer.publish(static_cast<std::int64_t>(v));
    auto line = peer.wait_for_line("installed " + std::to_string(v));
    ASSERT_TRUE(line) << "peer: " << (peer.lines().empty() ? "(nothing)" : peer.lines().back());
    EXPECT_NE(line->find("transport=cuda_ipc path=cuda_ipc"), std::string::npos) << *line;
  }
  EXPECT_EQ(peer.wait(), 0);
  for (const auto& line : peer.lines()) EXPECT_EQ(line.rfind("corrupt", 0), std::string::npos) << line;
}

// While every consumer reads the device slot over CUDA IPC, no version is copied to host memory
// (the copy would compete with their reads for the GPU). A host consumer that joins then gets
// the newest version all the same: its fetch has the copy made, the chunks following it; and the
// next version is copied at once, a consumer that needs it being joined.
TEST(DeviceExchange, OnlyAConsumerThatReceivesThroughHostMemoryHasVersionsCopiedThere) {
  auto& rt = runtime();
  modelcast::Producer producer(small_piece_options());
  devicemodel::DeviceModel model(rt, 0, 512, 12);
  producer.register_tensors(model.refs());
  producer.prepare();
  const int device = devicemodel::other_device(rt);
  ChildProcess ipc({peer_paths::device_peer(), "consumer", "--endpoint", producer.control_endpoint(),
                    "--until-version", "3", "--seed", "5", "--memory", "cuda", "--device", std::to_string(device),
                    "--transports", "ucx,cuda_ipc"});
  ASSERT_TRUE(producer.wait_for_consumers(1, 60s));
  for (std::uint64_t v = 1; v <= 2; ++v) {
    model.upload(5, v);
    producer.publish(static_cast<std::int64_t>(v));
    auto line = ipc.wait_for_line("installed " + std::to_string(v));
    ASSERT_TRUE(line) << "ipc peer: " << (ipc.lines().empty() ? "(nothing)" : ipc.lines().back());
    EXPECT_NE(line->find("transport=cuda_ipc"), std::string::npos) << *line;
  }
  EXPECT_EQ(producer.stats().host_copies, 0u) << "versions read only over CUDA IPC were copied to host memory";

  ChildProcess host({peer_paths::device_peer(), "consumer", "--endpoint", producer.control_endpoint(),
                     "--until-version", "3", "--seed", "5", "--memory", "host", "--transports", "ucx"});
  auto line = host.wait_for_line("installed 2");
  ASSERT_TRUE(line) << "host peer: " << (host.lines().empty() ? "(nothing)" : host.lines().back());
  EXPECT_NE(line->find("memory=host"), std::string::npos) << *line;
  EXPECT_NE(line->find("transport=ucx"), std::string::npos) << *line;
  EXPECT_EQ(producer.stats().host_copies, 1u) << "the late host consumer's fetch did not have version 2 copied";

  model.upload(5, 3);
  producer.publish(3);
  ASSERT_TRUE(ipc.wait_for_line("installed 3"));
  ASSERT_TRUE(host.wait_for_line("installed 3"));
  EXPECT_EQ(producer.stats().host_copies, 2u);
  EXPECT_EQ(ipc.wait(), 0);
  EXPECT_EQ(host.wait(), 0);
  for (const auto* peer : {&ipc, &host}) {
    for (const auto& l : peer->lines()) EXPECT_EQ(l.rfind("corrupt", 0), std::string::npos) << l;
  }
  EXPECT_EQ(producer.stats().failed_snapshots, 0u);
}

// A device producer's persist option writes its versions from their host copies: every byte in
// the files is the trainer's, read back by the independent reader.
TEST(DeviceExchange, DeviceVersionsArePersistedFromTheirHostCopy) {
  auto& rt = runtime();
  auto dir = std::filesystem::temp_directory_path() / ("modelcast-device-persist-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::mutex mutex;
  std::condition_variable cv;
  std::set<std::uint64_t> persisted;
  auto options = producer_options();
  options.persist.directory = dir.string();
  options.persist.keep = 5;
  options.persist.on_persisted = [&](std::uint64_t version, const std::string&) {
    std::lock_guard lock(mutex);
    persisted.insert(version);
    cv.notify_all();
  };
  {
    modelcast::Producer producer(options);
    devicemodel::DeviceModel model(rt, 0, 256);
    producer.register_tensors(model.refs());
    for (std::uint64_t v = 1; v <= 3; ++v) {
      model.upload(6, v);
      producer.publish(static_cast<std::int64_t>(v));
      std::unique_lock lock(mutex);  // one at a time: a busy writer would skip versions
      ASSERT_TRUE(cv.wait_for(lock, 60s, [&] { return persisted.count(v) > 0; })) << "version " << v;
    }
  }
  ChildProcess reader({peer_paths::python(), peer_paths::read_safetensors_py(), (dir / "test").string(), "6"});
  EXPECT_EQ(reader.wait(), 0);
  int ok = 0;
  for (const auto& line : reader.lines()) {
    EXPECT_EQ(line.rfind("ok ", 0), 0u) << line;
    ok += line.rfind("ok ", 0) == 0;
  }
  EXPECT_EQ(ok, 3);
  std::filesystem::remove_all(dir);
}

TEST(DeviceExchange, AForcedPathTheMemoriesCannotUseIsRefusedSayingWhy) {
  auto& rt = runtime();
  modelcast::Producer producer(producer_options());
  devicemodel::DeviceModel model(rt, 0, 64, 2);
  producer.register_tensors(model.refs());
  producer.prepare();
  std::promise<std::string> refused;
  auto options = consumer_options(producer.control_endpoint(), MemoryKind::kHost, 0);
  options.path = "cuda_ipc";  // a host consumer has nothing to map a device slot into
  std::once_flag once;
  options.on_error = [&](const modelcast::Error& e) { std::call_once(once, [&] { refused.set_value(e.what()); }); };
  modelcast::Consumer consumer(options);
  auto answer = refused.get_future();
  ASSERT_EQ(answer.wait_for(60s), std::future_status::ready);
  std::string why = answer.get();
  EXPECT_NE(why.find("cuda_ipc"), std::string::npos) << why;
  EXPECT_EQ(consumer.stats().versions_installed, 0u);
  options.path = "teleport";
  EXPECT_THROW(modelcast::Consumer{options}, modelcast::Error);
}

TEST(DeviceExchange, AHostProducerServesADeviceConsumerWhoseViewsHoldDevicePointers) {
  auto& rt = runtime();
  ChildProcess producer({peer_paths::test_peer(), "producer", "--endpoint", "tcp://127.0.0.1:0", "--versions", "3",
                         "--seed", "5", "--kib", "512", "--wait-consumers", "1"});
  auto ready = producer.wait_for_line("ready ");
  ASSERT_TRUE(ready);
  const int device = devicemodel::other_device(rt);
  modelcast::Consumer consumer(consumer_options(ready->substr(6), MemoryKind::kCuda, device));
  auto view = consumer.wait_for_version(3, 60s);
  ASSERT_TRUE(view) << consumer.stats().last_error;
  for (const auto& t : view.tensors()) {
    EXPECT_EQ(t.spec->memory, MemoryKind::kCuda);
    EXPECT_EQ(t.spec->device, device);
    auto info = rt.pointer_info(t.data);
    EXPECT_EQ(info.kind, MemoryKind::kCuda) << t.name() << ": the view must point into device memory";
    EXPECT_EQ(info.device, device);
  }
  EXPECT_EQ(devicemodel::check(rt, view, 5), "");
}

// Relays reach device consumers too: a device consumer that joins late gets its versions from
// a host consumer that holds them, lands them in its host buffer block by block (each checked
// against the producer's block digests), and copies them to the device.
TEST(DeviceExchange, ADeviceConsumerReceivesARelayedVersionAndItsViewsHoldDevicePointers) {
  auto& rt = runtime();
  ChildProcess producer({peer_paths::test_peer(), "producer", "--endpoint", "tcp://127.0.0.1:0", "--versions", "0",
                         "--seed", "5", "--kib", "512", "--chunk-kib", "64", "--relay-fanout", "1"});
  auto ready = producer.wait_for_line("ready ");
  ASSERT_TRUE(ready);
  const std::string endpoint = ready->substr(6);
  ChildProcess relay({peer_paths::test_peer(), "consumer", "--endpoint", endpoint, "--name", "host-relay",
                      "--seed", "5", "--until-version", "2", "--linger"});
  ASSERT_TRUE(producer.ask("publish", "published 1"));
  ASSERT_TRUE(relay.wait_for_line("installed 1"));
  const int device = devicemodel::other_device(rt);
  modelcast::Consumer consumer(consumer_options(endpoint, MemoryKind::kCuda, device));
  auto view = consumer.wait_for_version(1, 60s);
  ASSERT_TRUE(view) << consumer.stats().last_error;
  EXPECT_EQ(devicemodel::check(rt, view, 5), "");
  ASSERT_TRUE(producer.ask("publish", "published 2"));
  view = consumer.wait_for_version(2, 60s);
  ASSERT_TRUE(view) << consumer.stats().last_error;
  ASSERT_TRUE(relay.wait_for_line("installed 2"));
  for (const auto& t : view.tensors()) EXPECT_EQ(rt.pointer_info(t.data).kind, MemoryKind::kCuda) << t.name();
  EXPECT_EQ(devicemodel::check(rt, view, 5), "");
  EXPECT_EQ(consumer.stats().relay_faults, 0u);
  // Version 1 came whole from the host consumer, the only holder then besides the producer
  // (version 2 came from the producer or the relay, whichever the device consumer asked second).
  relay.close_stdin();
  EXPECT_EQ(relay.wait(), 0);
  std::uint64_t relayed = 0;
  for (const auto& line : relay.lines()) {
    if (line.rfind("bytes_relayed ", 0) == 0) relayed = std::stoull(line.substr(14));
  }
  EXPECT_GE(relayed, 512u * 1024u);
}

// A relay whose copy went bad in memory, then one that stalls: the device consumer catches the
// first at its first bad block and the second after transfer_timeout without progress, leaves
// the relay's landing unfinished, and gets the version from the producer, every byte checked on
// the device.
TEST(DeviceExchange, ADeviceConsumerRoutesAroundARelayThatSendsBadBytesOrStalls) {
  auto& rt = runtime();
  ChildProcess producer({peer_paths::test_peer(), "producer", "--endpoint", "tcp://127.0.0.1:0", "--versions", "0",
                         "--seed", "5", "--kib", "1024", "--chunk-kib", "64", "--relay-fanout", "1"});
  auto ready = producer.wait_for_line("ready ");
  ASSERT_TRUE(ready);
  const std::string endpoint = ready->substr(6);
  ChildProcess bad({peer_paths::test_peer(), "consumer", "--endpoint", endpoint, "--name", "bad-relay", "--seed", "5",
                    "--until-version", "1", "--corrupt-after", "1", "--linger"});
  ASSERT_TRUE(producer.ask("publish", "published 1"));
  ASSERT_TRUE(bad.wait_for_line("corrupted 1"));
  auto options = consumer_options(endpoint, MemoryKind::kCuda, devicemodel::other_device(rt));
  options.transfer_timeout = 1s;
  {
    // Joins late: the only holder of version 1 besides the producer is the bad relay.
    modelcast::Consumer consumer(options);
    auto view = consumer.wait_for_version(1, 60s);
    ASSERT_TRUE(view) << consumer.stats().last_error;
    EXPECT_EQ(devicemodel::check(rt, view, 5), "");
    EXPECT_EQ(consumer.stats().relay_faults, 1u) << consumer.stats().last_error;
    EXPECT_NE(consumer.stats().last_error.find("bad-relay"), std::string::npos) << consumer.stats().last_error;
  }
  bad.close_stdin();
  EXPECT_EQ(bad.wait(), 0);

  ChildProcess stalled({peer_paths::test_peer(), "consumer", "--endpoint", endpoint, "--name", "stalled-relay",
                        "--seed", "5", "--until-version", "2", "--linger"});
  ASSERT_TRUE(producer.ask("publish", "published 2"));
  ASSERT_TRUE(stalled.wait_for_line("installed 2"));
  // Stopped, it still counts as a holder of version 2 until the producer finds it silent.
  ASSERT_TRUE(testing_support::stop_process(stalled.pid()));
  modelcast::Consumer consumer(options);
  auto view = consumer.wait_for_version(2, 60s);
  ::kill(stalled.pid(), SIGCONT);
  ASSERT_TRUE(view) << consumer.stats().last_error;
  EXPECT_EQ(devicemodel::check(rt, view, 5), "");
  EXPECT_EQ(consumer.stats().relay_faults, 1u) << consumer.stats().last_error;
  stalled.close_stdin();
  EXPECT_EQ(stalled.wait(), 0);
}

// And they serve: a device consumer on a staged route keeps the host buffer its version landed
// in (its views hold only device memory) and relays from it, the installed version to another
// device consumer that joins late and the next version while it still arrives. The peer checks
// every byte on its device.
TEST(DeviceExchange, AStagedDeviceConsumerRelaysFromTheHostBufferItsVersionsLandIn) {
  auto& rt = runtime();
  ChildProcess producer({peer_paths::test_peer(), "producer", "--endpoint", "tcp://127.0.0.1:0", "--versions", "0",
                         "--seed", "5", "--kib", "512", "--chunk-kib", "64", "--relay-fanout", "1"});
  auto ready = producer.wait_for_line("ready ");
  ASSERT_TRUE(ready);
  const std::string endpoint = ready->substr(6);
  const int device = devicemodel::other_device(rt);
  modelcast::Consumer consumer(consumer_options(endpoint, MemoryKind::kCuda, device));
  ASSERT_TRUE(producer.ask("publish", "published 1"));
  auto view = consumer.wait_for_version(1, 60s);
  ASSERT_TRUE(view) << consumer.stats().last_error;
  ASSERT_NE(consumer.stats().path, "cuda_ipc") << "this test needs a route that lands in host buffers";
  // The only holder of version 1 besides the producer is the device consumer.
  ChildProcess peer({peer_paths::device_peer(), "consumer", "--endpoint", endpoint, "--until-version", "2", "--seed",
                     "5", "--memory", "cuda", "--device", std::to_string(device)});
  ASSERT_TRUE(peer.wait_for_line("installed 1"));
  ASSERT_TRUE(eventually([&] { return consumer.stats().bytes_relayed >= 512u * 1024u; }, 60s))
      << "the device consumer relayed " << consumer.stats().bytes_relayed << " bytes; " << consumer.stats().last_error;
  ASSERT_TRUE(producer.ask("publish", "published 2"));
  view = consumer.wait_for_version(2, 60s);
  ASSERT_TRUE(view) << consumer.stats().last_error;
  EXPECT_EQ(devicemodel::check(rt, view, 5), "");
  for (const auto& t : view.tensors()) EXPECT_EQ(rt.pointer_info(t.data).kind, MemoryKind::kCuda) << t.name();
  ASSERT_TRUE(peer.wait_for_line("installed 2"));
  EXPECT_EQ(peer.wait(), 0);
  for (const auto& line : peer.lines()) EXPECT_EQ(line.rfind("corrupt", 0), std::string::npos) << line;
  EXPECT_EQ(consumer.stats().relay_faults, 0u);
}

// Deltas reach staged device consumers: the unchanged blocks are copied from the host buffer
// the version it holds landed in, only the changed ones cross the transport, and every byte of
// every version is checked on the device, including after versions it skipped.
TEST(DeviceExchange, AStagedDeviceConsumerReceivesOnlyTheChangedBlocks) {
  auto& rt = runtime();
  constexpr int kChangePct = 25;
  constexpr std::uint64_t kModelKib = 2048;
  ChildProcess producer({peer_paths::test_peer(), "producer", "--endpoint", "tcp://127.0.0.1:0", "--versions", "0",
                         "--seed", "5", "--kib", std::to_string(kModelKib), "--chunk-kib", "64", "--change-pct",
                         std::to_string(kChangePct)});
  auto ready = producer.wait_for_line("ready ");
  ASSERT_TRUE(ready);
  modelcast::Consumer consumer(consumer_options(ready->substr(6), MemoryKind::kCuda, devicemodel::other_device(rt)));
  auto publish_and_check = [&](std::uint64_t v) {
    ASSERT_TRUE(producer.ask("publish", "published " + std::to_string(v)));
    auto view = consumer.wait_for_version(v, 60s);
    ASSERT_TRUE(view) << "version " << v << ": " << consumer.stats().last_error;
    ASSERT_NE(consumer.stats().path, "cuda_ipc") << "this test needs a route that lands in host buffers";
    EXPECT_EQ(devicemodel::check(rt, view, 5, kChangePct), "") << "version " << view.version();
  };
  for (std::uint64_t v = 1; v <= 5; ++v) publish_and_check(v);
  // Back to back: the consumer may skip some, and its delta is then against an older base.
  for (std::uint64_t v = 6; v <= 8; ++v) ASSERT_TRUE(producer.ask("publish", "published " + std::to_string(v)));
  publish_and_check(9);
  auto stats = consumer.stats();
  EXPECT_EQ(stats.versions_rejected, 0u) << stats.last_error;
  // A quarter of the tensors change a version: whole versions would be 6 models or more.
  const double models = static_cast<double>(stats.bytes_received) / (kModelKib * 1024.0);
  EXPECT_GT(models, 1.0) << "the first version must come whole";
  EXPECT_LT(models, 0.6 * static_cast<double>(stats.versions_installed))
      << models << " models' worth received for " << stats.versions_installed << " versions";
}

namespace {

// A device consumer process on the CUDA IPC route (device_peer), holding versions up to `until`.
std::unique_ptr<ChildProcess> ipc_consumer(const std::string& endpoint, const std::string& name, std::uint64_t until,
                                           std::vector<std::string> extra = {}) {
  std::vector<std::string> argv{peer_paths::device_peer(), "consumer", "--endpoint", endpoint, "--name", name,
                                "--until-version", std::to_string(until), "--seed", "9", "--memory", "cuda",
                                "--device", std::to_string(devicemodel::other_device(runtime())), "--transports",
                                "cuda_ipc"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return std::make_unique<ChildProcess>(argv);
}

// A counter from the peer's last line ("stats ... key=N ..."); -1 when missing.
long long peer_stat(ChildProcess& peer, const std::string& key) {
  for (auto it = peer.lines().rbegin(); it != peer.lines().rend(); ++it) {
    if (it->rfind("stats ", 0) != 0) continue;
    auto at = it->find(" " + key + "=");
    if (at == std::string::npos) return -1;
    return std::stoll(it->substr(at + key.size() + 2));
  }
  return -1;
}

void expect_exact(ChildProcess& peer) {
  for (const auto& line : peer.lines()) EXPECT_EQ(line.rfind("corrupt ", 0), std::string::npos) << line;
}

// A device producer with relays on (a relay serves one reader at a time) and its model.
struct RelayingDeviceProducer {
  explicit RelayingDeviceProducer(std::size_t kib,
                                  std::chrono::milliseconds lease_timeout = producer_options().lease_timeout)
      : producer([lease_timeout] {
          auto options = producer_options();
          options.relay_fanout = 1;
          options.lease_timeout = lease_timeout;
          return options;
        }()),
        model(runtime(), 0, kib) {
    producer.register_tensors(model.refs());
    producer.prepare();
  }
  void publish(std::uint64_t version) {
    model.upload(9, version);
    producer.publish(static_cast<std::int64_t>(version));
  }
  std::string endpoint() const { return producer.control_endpoint(); }
  modelcast::Producer producer;
  devicemodel::DeviceModel model;
};

// A device consumer holding version 1 (lingering, its log on stdout, and a producer_timeout far
// beyond any read: what it waits for is the reader, not that bound) and a second one whose copy
// out of the first one's export is held half way until it is sent "release".
struct HeldRelayRead {
  std::unique_ptr<ChildProcess> holder, reader;
};

void start_held_relay_read(RelayingDeviceProducer& p, const std::string& holder_name, HeldRelayRead& out) {
  auto& producer = p.producer;
  out.holder = ipc_consumer(p.endpoint(), holder_name, 1, {"--linger", "--echo-log", "--producer-timeout-ms", "60000"});
  ASSERT_TRUE(producer.wait_for_consumers(1, 60s));
  p.publish(1);
  ASSERT_TRUE(out.holder->wait_for_line("installed 1")) << joined_lines(*out.holder);
  // The producer knows it holds version 1, which makes it the one to read from.
  ASSERT_TRUE(eventually([&] { return producer.stats().deliveries >= 1; }, 60s));
  out.reader = ipc_consumer(p.endpoint(), "ipc-held-reader", 1, {"--hold-peer-read"});
  ASSERT_TRUE(out.reader->wait_for_line("holding peer read")) << joined_lines(*out.reader);
}

}  // namespace

// Two device consumers of one process (an inference server with a consumer per replica): the
// producer had the second read the first one's export over CUDA IPC, which cannot open a handle
// its own process exported. Every such read failed, counted a relay fault and had a good relay
// distrusted for a minute. The producer serves the second itself.
TEST(DeviceExchange, TwoDeviceConsumersOfOneProcessAreNotGivenEachOthersExportToRead) {
  auto& rt = runtime();
  ChildProcess producer({peer_paths::device_peer(), "producer", "--endpoint", "tcp://127.0.0.1:0", "--versions", "1",
                         "--seed", "5", "--kib", "512", "--relay-fanout", "1"});
  auto ready = producer.wait_for_line("ready ");
  ASSERT_TRUE(ready);
  auto options = consumer_options(ready->substr(6), MemoryKind::kCuda, 0);
  options.serve_peers = true;
  options.consumer_name = "first";
  modelcast::Consumer first(options);
  ASSERT_TRUE(first.wait_for_version(1, 60s)) << first.stats().last_error;
  ASSERT_EQ(first.stats().path, "cuda_ipc");  // a relay of it would be read one-sided
  // The producer knows the first holds version 1, which makes it the relay to choose.
  ASSERT_TRUE(producer.wait_for_line("delivered 1 to first from -")) << joined_lines(producer);
  options.consumer_name = "second";
  modelcast::Consumer second(options);
  auto view = second.wait_for_version(1, 60s);
  ASSERT_TRUE(view) << second.stats().last_error;
  EXPECT_EQ(devicemodel::check(rt, view, 5), "");
  EXPECT_EQ(second.stats().relay_faults, 0u) << second.stats().last_error;
  EXPECT_TRUE(producer.wait_for_line("delivered 1 to second from -")) << joined_lines(producer);
}

// Device consumers on one host serve each other over CUDA IPC: one that joins late reads the
// version out of another's device buffer (which that one pins and exports when the producer
// asks, and unpins when the reader is done) instead of the producer's slot, and checks every
// byte on its device against the producer's digests.
TEST(DeviceExchange, ADeviceConsumerReadsAnotherDeviceConsumersVersionOverCudaIpc) {
  auto& rt = runtime();
  RelayingDeviceProducer p(512);
  auto& producer = p.producer;
  auto holder = ipc_consumer(p.endpoint(), "ipc-holder", 1, {"--linger"});
  ASSERT_TRUE(producer.wait_for_consumers(1, 60s));
  p.publish(1);
  auto installed = holder->wait_for_line("installed 1");
  ASSERT_TRUE(installed) << joined_lines(*holder);
  ASSERT_NE(installed->find("transport=cuda_ipc"), std::string::npos) << *installed;
  auto reader = ipc_consumer(p.endpoint(), "ipc-reader", 1);
  installed = reader->wait_for_line("installed 1");
  ASSERT_TRUE(installed) << joined_lines(*reader);
  EXPECT_NE(installed->find("memory=cuda"), std::string::npos) << *installed;
  EXPECT_EQ(reader->wait(), 0) << joined_lines(*reader);
  expect_exact(*reader);
  EXPECT_EQ(peer_stat(*reader, "relay_faults"), 0) << joined_lines(*reader);
  // Done with the holder's buffer before its ack lets the holder free it: no mapping is left.
  if (rt.name() == "simulated") {
    EXPECT_EQ(peer_stat(*reader, "ipc_open"), 0) << joined_lines(*reader);
  }
  // The reader's ack may still be on its way when it exits.
  ASSERT_TRUE(eventually([&] { return producer.stats().deliveries == 2; })) << producer.stats().deliveries;
  auto stats = producer.stats();
  EXPECT_EQ(stats.relayed_deliveries, 1u);
  EXPECT_GE(stats.bytes_relayed, 512u * 1024u);
  // The holder counts what it served once the producer tells it the reader installed it: a
  // message that follows the ack the producer counted.
  EXPECT_TRUE(eventually([&] {
    holder->ask("stats", "stats ");
    return peer_stat(*holder, "bytes_relayed") == static_cast<long long>(stats.bytes_relayed);
  })) << joined_lines(*holder);
  holder->close_stdin();
  EXPECT_EQ(holder->wait(), 0) << joined_lines(*holder);
  EXPECT_EQ(peer_stat(*holder, "bytes_relayed"), static_cast<long long>(stats.bytes_relayed)) << joined_lines(*holder);
}

// Eight device consumers joining one after another: each reads version 1 out of one that holds
// it (a relay serves one reader at a time here), so the producer's slot is read once for all
// eight, and every byte is checked on each reader's device.
TEST(DeviceExchange, EightDeviceConsumersJoiningInTurnReadTheVersionFromEachOtherNotTheProducer) {
  RelayingDeviceProducer p(256);
  auto& producer = p.producer;
  p.publish(1);
  std::vector<std::unique_ptr<ChildProcess>> consumers;
  for (int i = 0; i < 8; ++i) {
    consumers.push_back(ipc_consumer(p.endpoint(), "ipc-" + std::to_string(i), 1, {"--linger"}));
    ASSERT_TRUE(consumers.back()->wait_for_line("installed 1")) << joined_lines(*consumers.back());
    // The next one joins once the producer knows this one holds the version.
    ASSERT_TRUE(eventually([&] { return producer.stats().deliveries == consumers.size(); }, 60s));
  }
  auto stats = producer.stats();
  EXPECT_EQ(stats.relayed_deliveries, 7u);
  EXPECT_EQ(stats.bytes_relayed, 7 * stats.bytes_sent) << "one model from the producer, seven from relays";
  EXPECT_EQ(stats.relay_faults, 0u);
  // Each relay counts what it served once the producer tells it its reader installed it.
  auto served_now = [&] {
    long long sum = 0;
    for (auto& c : consumers) {
      c->ask("stats", "stats ");
      sum += peer_stat(*c, "bytes_relayed");
    }
    return sum;
  };
  EXPECT_TRUE(eventually([&] { return served_now() == static_cast<long long>(stats.bytes_relayed); }));
  long long served = 0;
  for (auto& c : consumers) {
    c->close_stdin();
    EXPECT_EQ(c->wait(), 0) << joined_lines(*c);
    expect_exact(*c);
    EXPECT_EQ(peer_stat(*c, "relay_faults"), 0) << joined_lines(*c);
    served += peer_stat(*c, "bytes_relayed");
  }
  EXPECT_EQ(served, static_cast<long long>(stats.bytes_relayed));
}

// A holder whose device copy went bad after it was checked: the reader's check on its device
// catches it, blames the holder (it never rejects the version) and reads the producer's slot.
// Then a holder that stopped answering: the reader, unanswered, asks again and the producer
// serves it. Every byte is checked on the reader's device.
TEST(DeviceExchange, ADeviceConsumerRoutesAroundAnIpcHolderWithBadBytesOrStopped) {
  // The stopped holder must still be a member when the late reader joins, or the producer serves
  // the reader itself and no relay fails: the producer drops a consumer silent for its lease
  // timeout, and under compute-sanitizer a peer takes 11 s to start (beyond the default 10 s).
  RelayingDeviceProducer p(512, 120s);
  auto& producer = p.producer;
  auto bad = ipc_consumer(p.endpoint(), "ipc-bad-holder", 1, {"--corrupt-after", "1", "--linger"});
  ASSERT_TRUE(producer.wait_for_consumers(1, 60s));
  p.publish(1);
  ASSERT_TRUE(bad->wait_for_line("corrupted 1")) << joined_lines(*bad);
  auto reader = ipc_consumer(p.endpoint(), "ipc-reader", 1);
  ASSERT_TRUE(reader->wait_for_line("installed 1")) << joined_lines(*reader);
  EXPECT_EQ(reader->wait(), 0) << joined_lines(*reader);
  expect_exact(*reader);
  EXPECT_EQ(peer_stat(*reader, "relay_faults"), 1) << joined_lines(*reader);
  EXPECT_EQ(peer_stat(*reader, "rejected"), 0) << joined_lines(*reader);
  bool named = false;
  for (const auto& line : reader->lines()) named = named || line.find("ipc-bad-holder") != std::string::npos;
  EXPECT_TRUE(named) << "the reader's report names the holder:\n" << joined_lines(*reader);
  EXPECT_EQ(producer.stats().relay_faults, 1u);
  bad->close_stdin();
  EXPECT_EQ(bad->wait(), 0) << joined_lines(*bad);
  EXPECT_EQ(peer_stat(*bad, "bytes_relayed"), 0) << "nothing it served was installed";

  auto stopped = ipc_consumer(p.endpoint(), "ipc-stopped-holder", 2, {"--linger"});
  const auto delivered = producer.stats().deliveries;
  p.publish(2);
  ASSERT_TRUE(stopped->wait_for_line("installed 2")) << joined_lines(*stopped);
  // Stopped once the producer knows it holds version 2, which makes it the one to read from.
  ASSERT_TRUE(eventually([&] { return producer.stats().deliveries > delivered; }, 60s));
  ASSERT_TRUE(testing_support::stop_process(stopped->pid()));
  auto late = ipc_consumer(p.endpoint(), "ipc-late-reader", 2);
  auto installed = late->wait_for_line("installed 2");
  ::kill(stopped->pid(), SIGCONT);
  ASSERT_TRUE(installed) << joined_lines(*late);
  EXPECT_EQ(late->wait(), 0) << joined_lines(*late);
  expect_exact(*late);
  EXPECT_EQ(producer.stats().relay_faults, 2u) << "the stopped holder is counted as a relay that failed";
  stopped->close_stdin();
  EXPECT_EQ(stopped->wait(), 0) << joined_lines(*stopped);
  EXPECT_EQ(peer_stat(*stopped, "bytes_relayed"), 0);
}

// A rank of a group holds the next version verified but keeps serving the one before until the
// group switches; that prepared version is what a slower rank reads over CUDA IPC, instead of
// the producer's slot.
TEST(DeviceExchange, ARankReadsTheVersionAnotherRankOfItsGroupHoldsPreparedOverCudaIpc) {
  RelayingDeviceProducer p(512);
  auto& producer = p.producer;
  const std::vector<std::string> group{"--group", "tp", "--group-size", "2"};
  auto fast = ipc_consumer(p.endpoint(), "ipc-rank-0", 2, group);
  auto slow = ipc_consumer(p.endpoint(), "ipc-rank-1", 2, group);
  ASSERT_TRUE(producer.wait_for_consumers(2, 60s));
  p.publish(1);
  for (auto* rank : {fast.get(), slow.get()}) ASSERT_TRUE(rank->wait_for_line("installed 1")) << joined_lines(*rank);
  ASSERT_TRUE(eventually([&] { return producer.stats().deliveries == 2; }, 60s));
  const auto relayed = producer.stats().relayed_deliveries;
  // The slow rank asks for version 2 only once the fast one holds it prepared (acked, not
  // installed: the group has not switched).
  ASSERT_TRUE(testing_support::stop_process(slow->pid()));
  p.publish(2);
  auto prepared = eventually([&] { return producer.stats().deliveries == 3; }, 60s);
  ::kill(slow->pid(), SIGCONT);
  ASSERT_TRUE(prepared);
  for (auto* rank : {fast.get(), slow.get()}) {
    ASSERT_TRUE(rank->wait_for_line("installed 2")) << joined_lines(*rank);
    EXPECT_EQ(rank->wait(), 0) << joined_lines(*rank);
    expect_exact(*rank);
    EXPECT_EQ(peer_stat(*rank, "relay_faults"), 0) << joined_lines(*rank);
  }
  EXPECT_EQ(producer.stats().relayed_deliveries, relayed + 1) << "the slow rank read the fast one's prepared version";
  EXPECT_EQ(producer.stats().relay_faults, 0u);
}

// A device consumer that closes while a peer reads its exported version keeps the buffer until
// the producer says the reader is done: freed under the copy, it would hand the reader whatever
// reuses the memory (the simulated device overwrites a released exported allocation, as a GPU
// reuses freed memory at once).
TEST(DeviceExchange, AConsumerClosingWhileAPeerReadsItsVersionWaitsForTheReader) {
  if (runtime().name() != "simulated") GTEST_SKIP() << "holds a peer's copy half way: simulated device only";
  // The shortest silence the producer allows (5 s; lease_timeout below that does not shorten it).
  RelayingDeviceProducer p(512, 1000ms);
  auto& producer = p.producer;
  HeldRelayRead read;
  ASSERT_NO_FATAL_FAILURE(start_held_relay_read(p, "ipc-closing-holder", read));
  auto& [holder, reader] = read;
  holder->close_stdin();
  // Without the wait it would free its buffer and exit here, under the reader's copy.
  ASSERT_TRUE(holder->wait_for_line("log model 'test': closing: waiting")) << joined_lines(*holder);
  // A reader may take longer than the producer's silence bound; a holder that stopped pinging
  // while it waits would be dropped, its reader's fetch withdrawn and its wait left to the bound.
  EXPECT_FALSE(eventually([&] { return producer.stats().consumers < 2; }, 7s))
      << "the closing holder was dropped as silent:\n" << joined_lines(*holder);
  reader->send_line("release");
  ASSERT_TRUE(reader->wait_for_line("installed 1")) << joined_lines(*reader);
  EXPECT_EQ(reader->wait(), 0) << joined_lines(*reader);
  expect_exact(*reader);
  EXPECT_EQ(peer_stat(*reader, "relay_faults"), 0) << "it read the version, not freed memory:\n" << joined_lines(*reader);
  EXPECT_EQ(holder->wait(), 0) << joined_lines(*holder);
  for (const auto& line : holder->lines()) {
    EXPECT_EQ(line.rfind("log model 'test': closing with", 0), std::string::npos) << "the producer's cancel ended the wait: " << line;
  }
  EXPECT_EQ(producer.stats().relayed_deliveries, 1u);
  EXPECT_EQ(producer.stats().relay_faults, 0u);
}

// A producer that dropped a relay (silent past its bound) sends it no cancel for what it had
// exported: it forgot the orders. The relay, joining again, must drop them itself, or it keeps
// the buffers pinned for good and, closing, waits for readers that are long gone.
TEST(DeviceExchange, ARelayDroppedWhileAPeerReadsItsVersionUnpinsItWhenItJoinsAgain) {
  if (runtime().name() != "simulated") GTEST_SKIP() << "holds a peer's copy half way: simulated device only";
  RelayingDeviceProducer p(512, 1000ms);  // dropped after 5 s of silence
  auto& producer = p.producer;
  HeldRelayRead read;
  ASSERT_NO_FATAL_FAILURE(start_held_relay_read(p, "ipc-dropped-holder", read));
  auto& [holder, reader] = read;
  ASSERT_TRUE(testing_support::stop_process(holder->pid()));
  const bool dropped = eventually([&] { return producer.stats().consumers == 1; }, 60s);
  ::kill(holder->pid(), SIGCONT);
  ASSERT_TRUE(dropped) << "the stopped holder was never dropped";
  reader->send_line("release");
  ASSERT_TRUE(reader->wait_for_line("installed 1")) << joined_lines(*reader);
  EXPECT_EQ(reader->wait(), 0) << joined_lines(*reader);
  expect_exact(*reader);
  // The holder finds itself forgotten and joins again; its join is what unpins the export.
  ASSERT_TRUE(holder->wait_for_line("log model 'test': joined")) << joined_lines(*holder);
  holder->close_stdin();
  EXPECT_EQ(holder->wait(), 0) << joined_lines(*holder);
  for (const auto& line : holder->lines()) {
    EXPECT_EQ(line.rfind("log model 'test': closing", 0), std::string::npos) << "an order the producer forgot is still pinned: " << line;
  }
  EXPECT_EQ(producer.stats().relayed_deliveries, 0u) << "the reader's relayed fetch ended with its relay";
}

TEST(DeviceExchange, PublishOrdersItsCopiesAfterTheTrainersStreamWithoutWaitingForIt) {
  auto& rt = runtime();
  modelcast::Producer producer(producer_options());
  devicemodel::DeviceModel model(rt, 0, 256, 4);
  producer.register_tensors(model.refs());
  producer.prepare();
  modelcast::Consumer consumer(consumer_options(producer.control_endpoint(), MemoryKind::kHost, 0));
  ASSERT_TRUE(producer.wait_for_consumers(1, 60s));

  void* trainer = rt.create_stream(0);
  std::promise<void> gate;
  rt.host_function(trainer, [opened = gate.get_future().share()] { opened.wait(); });
  model.upload(3, 1, trainer);  // the step that makes version 1, queued behind the gate
  auto ticket = producer.publish(1, {}, modelcast::DeviceOrder{trainer, nullptr});
  void* marker = rt.create_event(0);
  rt.record(marker, trainer);
  EXPECT_FALSE(rt.ready(marker)) << "publish() returned while the trainer's stream is still held: it did not wait";
  model.upload(3, 2, trainer);  // the next step overwrites the weights: only after the snapshot
  gate.set_value();

  auto view = consumer.wait_for_version(ticket.version, 60s);
  ASSERT_TRUE(view) << consumer.stats().last_error;
  ASSERT_EQ(view.version(), 1u);
  EXPECT_EQ(devicemodel::check(rt, view, 3), "") << "the snapshot must hold the weights of step 1 exactly";
  rt.synchronize_stream(trainer);
  rt.destroy_event(marker);
  rt.destroy_stream(trainer);
}

TEST(DeviceExchange, MisplacedMemoryIsRefusedNamingTheTensor) {
  auto& rt = runtime();
  modelcast::Producer producer(producer_options());
  std::vector<float> host(64);
  modelcast::TensorSpec spec{"w", modelcast::DType::kF32, {64}, MemoryKind::kCuda, 0};
  try {
    producer.register_tensor({spec, host.data()});
    ADD_FAILURE() << "a host pointer was taken as device memory";
  } catch (const modelcast::Error& e) {
    EXPECT_EQ(e.code(), modelcast::ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("'w'"), std::string::npos) << e.what();
  }
  void* d = rt.allocate(0, 256);
  // 256 bytes from byte 128 of a 256-byte allocation: refused, and the producer still takes tensors.
  try {
    producer.register_tensor({spec, static_cast<std::byte*>(d) + 128});
    ADD_FAILURE() << "a tensor running past its allocation was taken";
  } catch (const modelcast::Error& e) {
    EXPECT_EQ(e.code(), modelcast::ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("tensor 'w' runs past the end of its device allocation: its 256 bytes start 128 "
                                         "bytes into an allocation of 256 bytes"),
              std::string::npos)
        << e.what();
  }
  producer.register_tensor({spec, d});
  modelcast::TensorSpec host_spec{"b", modelcast::DType::kF32, {64}, MemoryKind::kHost, 0};
  EXPECT_THROW(producer.register_tensor({host_spec, host.data()}), modelcast::Error) << "one place per producer";

  auto options = consumer_options("tcp://127.0.0.1:1", MemoryKind::kCuda, rt.device_count());
  EXPECT_THROW(modelcast::Consumer{options}, modelcast::Error) << "a device that does not exist";
  std::vector<std::byte> a(1024), b(1024);
  options.device = 0;
  options.caller_buffers = {a, b};
  EXPECT_THROW(modelcast::Consumer{options}, modelcast::Error) << "caller buffers are host memory";
  rt.release(d);
}

TEST(DeviceExchange, AStagingPieceBelowTheMinimumIsRefusedNamingTheOption) {
  auto options = producer_options();
  options.device_stage_bytes = 4096;
  try {
    modelcast::Producer producer(options);
    FAIL() << "a 4 KiB staging piece was accepted";
  } catch (const modelcast::Error& e) {
    EXPECT_EQ(e.code(), modelcast::ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("device_stage_bytes"), std::string::npos) << e.what();
  }
}

// Device consumers as the ranks of one server (ConsumerOptions::group): a rank that holds the
// next version verified on its device keeps serving the version before until the slow rank
// holds it too; then both switch. Every byte is checked on the device.
TEST(DeviceExchange, DeviceRanksOfAGroupSwitchOnlyOnceTheSlowOneHoldsTheVersion) {
  auto& rt = runtime();
  ChildProcess producer({peer_paths::test_peer(), "producer", "--endpoint", "tcp://127.0.0.1:0", "--versions", "0",
                         "--seed", "7", "--kib", "512"});
  auto ready = producer.wait_for_line("ready ");
  ASSERT_TRUE(ready);
  testing_support::Gate gate;
  std::atomic<bool> held{false};
  auto rank_options = [&](const std::string& name) {
    auto options = consumer_options(ready->substr(6), MemoryKind::kCuda, devicemodel::other_device(rt));
    options.consumer_name = name;
    options.group = "tp";
    options.group_size = 2;
    options.buffers = 3;
    return options;
  };
  modelcast::Consumer rank0(rank_options("rank0"));
  auto slow = rank_options("rank1");
  slow.on_update = [&](const modelcast::ModelView&) {
    if (!held.exchange(true)) gate.wait();
  };
  modelcast::Consumer rank1(slow);
  testing_support::Gate::Opener open_at_exit(gate);
  ASSERT_TRUE(producer.ask("publish", "published 1"));
  for (auto* rank : {&rank0, &rank1}) {
    auto view = rank->wait_for_version(1, 60s);
    ASSERT_TRUE(view) << rank->stats().last_error;
    EXPECT_EQ(devicemodel::check(rt, view, 7), "");
  }
  ASSERT_TRUE(testing_support::eventually([&] { return held.load(); }, 60s));
  ASSERT_TRUE(producer.ask("publish", "published 2"));
  ASSERT_TRUE(testing_support::eventually([&] { return rank0.stats().prepared_version == 2; }, 60s))
      << rank0.stats().last_error;
  EXPECT_EQ(rank0.acquire().version(), 1u) << "rank 0 switched without the slow rank";
  gate.open();
  for (auto* rank : {&rank0, &rank1}) {
    auto view = rank->wait_for_version(2, 60s);
    ASSERT_TRUE(view) << rank->stats().last_error;
    EXPECT_EQ(view.version(), 2u);
    EXPECT_EQ(devicemodel::check(rt, view, 7), "");
    EXPECT_EQ(rank->stats().versions_rejected, 0u) << rank->stats().last_error;
  }
}

// A device consumer reading the producer's slot over CUDA IPC (one-sided: nothing is sent, so
// nothing renews the read's lease) whose read starts only after the lease lapsed: a publish
// takes the slot, and the read gets the newer version's bytes, which fail their check. The
// version was sound: it is fetched again (the newest, by then), not rejected, and the producer
// is not told it was refused.
TEST(DeviceExchange, AReadOfTheProducersSlotAfterItsLeaseLapsedIsFetchedAgainNotRejected) {
  auto& rt = runtime();
  if (!modelcast::device::simulated_faults(rt)) GTEST_SKIP() << "holding a read on demand needs the simulated device";
  auto options = producer_options();
  options.snapshot_slots = 2;
  options.lease_timeout = 300ms;
  modelcast::Producer producer(options);
  devicemodel::DeviceModel model(rt, 0, 512);
  producer.register_tensors(model.refs());
  producer.prepare();
  auto reader = ipc_consumer(producer.control_endpoint(), "ipc-late-reader", 3, {"--hold-peer-read"});
  ASSERT_TRUE(producer.wait_for_consumers(1, 60s));
  model.upload(9, 1);
  producer.publish(1);
  ASSERT_TRUE(reader->wait_for_line("holding peer read")) << joined_lines(*reader);
  model.upload(9, 2);
  producer.publish(2);
  model.upload(9, 3);
  producer.publish(3);  // two slots: version 1's, once its lease lapsed
  ASSERT_TRUE(eventually([&] { return producer.stats().leases_expired >= 1; }, 60s));
  reader->send_line("release");
  EXPECT_EQ(reader->wait(), 0) << joined_lines(*reader);
  expect_exact(*reader);
  for (const auto& line : reader->lines()) EXPECT_EQ(line.rfind("rejected ", 0), std::string::npos) << line;
  EXPECT_TRUE(std::any_of(reader->lines().begin(), reader->lines().end(),
                          [](const std::string& l) { return l.rfind("installed 3 ", 0) == 0; }))
      << joined_lines(*reader);
  // The late read did get a newer version's bytes (else this tested nothing).
  EXPECT_EQ(peer_stat(*reader, "aborted"), 1) << joined_lines(*reader);
}

// Read over CUDA IPC out of the producer's own slot, bytes that fail their check may be a newer
// version's (the read's lease lapsed: nothing tells the consumer), so the version is fetched
// again once; here the flip hit the first read only, and the second is exact. Never installed
// corrupt, and not rejected.
TEST(DeviceExchange, ACorruptByteReadOverCudaIpcIsDetectedOnTheDeviceAndTheVersionFetchedAgain) {
  auto& rt = runtime();
  if (rt.name() != "simulated") GTEST_SKIP() << "flipping a byte in flight needs the simulated device";
  auto options = small_piece_options();
  modelcast::Producer producer(options);
  devicemodel::DeviceModel model(rt, 0, 512);
  producer.register_tensors(model.refs());
  producer.prepare();
  auto peer_process = flipping_consumer_sent_two_versions(producer, model, "ucx,cuda_ipc", 2);
  ASSERT_TRUE(peer_process);
  auto& peer = *peer_process;
  auto second = peer.wait_for_line("installed 2");
  ASSERT_TRUE(second) << joined_lines(peer);
  EXPECT_NE(second->find("transport=cuda_ipc path=cuda_ipc"), std::string::npos) << *second;
  EXPECT_EQ(peer.wait(), 0) << joined_lines(peer);
  for (const auto& line : peer.lines()) {
    EXPECT_EQ(line.rfind("corrupt", 0), std::string::npos) << line;
    EXPECT_EQ(line.rfind("rejected ", 0), std::string::npos) << line;
  }
  EXPECT_EQ(peer_stat(peer, "aborted"), 1) << "the flipped read was not caught: " << joined_lines(peer);
}
