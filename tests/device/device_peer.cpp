// modelcast-device-peer: the other process of the device tests. Like modelcast-test-peer, one
// line per event on stdout; it reaches the device through the runtime MODELCAST_DEVICE selects.
//   ipc-read  --handle HEX --size N [--device D]  maps a peer's allocation: "pmix64 HEX"
//   producer  --endpoint E --versions N --seed S [--kib K] [--device D] [--relay-fanout F]
//             device tensors; publishes N versions once a consumer joined, then serves until
//             stdin closes; "delivered V to NAME from RELAY" ("-": this producer) per delivery
//   consumer  --endpoint E --until-version N --seed S [--memory host|cuda] [--device D]
//             [--transports a,b] [--path P] [--read-loop] [--transfer-timeout-ms T] [--name N]
//             [--corrupt-after V] [--linger] [--hold-peer-read] [--echo-log] [--group G --group-size N]
//             [--producer-timeout-ms T]
//             checks every installed version ("installed V memory=M
//             device=D transport=T path=P", "corrupt ...", "rejected ..."); with --read-loop a
//             thread also acquires and checks views until the end ("reads N"); --corrupt-after
//             flips a byte of version V where it is held once checked ("corrupted V"); --linger
//             serves peers after the last version until stdin closes (answering "stats" with
//             the stats line as it stands); last "stats aborted=A
//             rejected=R relay_faults=F bytes_relayed=B ipc_open=M" (transfers dropped, versions
//             refused, relays caught, bytes served to peers, other processes' allocations still
//             mapped: simulated device only, "?" elsewhere); --hold-peer-read holds the first copy
//             out of another consumer's export ("holding peer read") until stdin says "release"
//             (simulated device only); --echo-log prints the library's log ("log TEXT")
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <future>
#include <iostream>
#include <string>
#include <thread>

#include <CLI/CLI.hpp>

#include "device/pmix64.h"
#include "device/device_runtime.h"
#include "common/log.h"
#include "common/log_routing.h"
#include "device/simulated_faults.h"
#include "device_model.h"
#include "modelcast/consumer.h"
#include "modelcast/error.h"
#include "modelcast/producer.h"

using namespace std::chrono_literals;
namespace device = modelcast::device;

namespace {

void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

device::IpcHandle parse_handle(const std::string& hex) {
  device::IpcHandle handle{};
  if (hex.size() != handle.size() * 2) throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument, "bad --handle");
  for (std::size_t i = 0; i < handle.size(); ++i) {
    handle[i] = static_cast<std::byte>(std::stoul(hex.substr(2 * i, 2), nullptr, 16));
  }
  return handle;
}

int ipc_read(const std::string& hex, std::size_t size, int dev) {
  auto& runtime = device::require_device_runtime("ipc-read");
  void* base = runtime.open_ipc(parse_handle(hex), dev);
  std::vector<std::byte> host(size);
  runtime.copy_async(host.data(), base, size, nullptr);
  runtime.synchronize_stream(nullptr);
  runtime.close_ipc(base);
  char text[32];
  std::snprintf(text, sizeof text, "%016llx",
                static_cast<unsigned long long>(modelcast::pmix64::digest_host(host.data(), size)));
  say(std::string("pmix64 ") + text);
  return 0;
}

int producer(const std::string& endpoint, std::uint64_t versions, std::uint64_t seed, std::size_t kib, int dev,
             std::size_t relay_fanout) {
  auto& runtime = device::require_device_runtime("producer");
  modelcast::ProducerOptions options;
  options.model_name = "test";
  options.control_endpoint = endpoint;
  options.relay_fanout = relay_fanout;
  // From the producer's service thread while main says "published": one printf per line.
  options.on_delivery = [](const modelcast::Delivery& d) {
    say("delivered " + std::to_string(d.version) + " to " + d.consumer + " from " + (d.relay.empty() ? "-" : d.relay));
  };
  modelcast::Producer producer(options);
  devicemodel::DeviceModel model(runtime, dev, kib);
  producer.register_tensors(model.refs());
  producer.prepare();
  say("ready " + producer.control_endpoint());
  if (!producer.wait_for_consumers(1, 60s)) {
    say("error no consumer joined");
    return 1;
  }
  for (std::uint64_t v = 1; v <= versions; ++v) {
    model.upload(seed, v);
    producer.publish(static_cast<std::int64_t>(v));
    say("published " + std::to_string(v));
  }
  std::string line;
  while (std::getline(std::cin, line)) {
  }
  return 0;
}

struct ConsumerArgs {
  std::string endpoint;
  std::uint64_t until = 1;
  std::uint64_t seed = 1;
  std::string memory = "host";
  int device = 0;
  std::vector<std::string> transports;
  std::string path;
  bool read_loop = false;
  std::int64_t transfer_timeout_ms = 0;
  std::string name;
  std::uint64_t corrupt_after = 0;
  bool linger = false;
  bool hold_peer_read = false;
  bool echo_log = false;
  std::string group;
  std::uint32_t group_size = 0;
  std::int64_t producer_timeout_ms = 0;
};

int consumer(const ConsumerArgs& args) {
  const std::string& endpoint = args.endpoint;
  const std::uint64_t until = args.until, seed = args.seed, corrupt_after = args.corrupt_after;
  const std::string& name = args.name;
  const bool read_loop = args.read_loop, linger = args.linger;
  const std::chrono::milliseconds transfer_timeout(args.transfer_timeout_ms);
  if (args.echo_log) {
    // The library's log on stdout, so a test can wait for what it says while it closes.
    modelcast::log::set_level(spdlog::level::info);
    modelcast::log::set_handler([](spdlog::level::level_enum, std::string_view, std::string_view text) {
      say("log " + std::string(text));
    });
  }
  device::DeviceRuntime* runtime = device::device_runtime();
  // A peer's read of another consumer's exported version, held at its first copy until the
  // test writes "release" (simulated device only). The thread that waits for it ends with the
  // process when the hold is never reached (it is detached on every way out).
  struct Detached {
    std::thread thread;
    ~Detached() {
      if (thread.joinable()) thread.detach();
    }
  } held_read;
  if (args.hold_peer_read) {
    auto* faults = runtime ? device::simulated_faults(*runtime) : nullptr;
    if (!faults) throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument, "--hold-peer-read needs the simulated device");
    if (args.linger) throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument, "--hold-peer-read reads stdin: no --linger");
    auto release = std::make_shared<std::promise<void>>();
    auto reached = faults->hold_copy_from_peer(1, release->get_future().share());
    held_read.thread = std::thread([reached, release] {
      reached.wait();
      say("holding peer read");
      std::string line;
      while (std::getline(std::cin, line) && line != "release") {
      }
      release->set_value();
    });
  }
  modelcast::ConsumerOptions options;
  if (!name.empty()) options.consumer_name = name;
  options.producer_endpoint = endpoint;
  options.model_name = "test";
  options.memory = args.memory == "cuda" ? modelcast::MemoryKind::kCuda : modelcast::MemoryKind::kHost;
  options.device = args.device;
  options.transports = args.transports;
  options.path = args.path;
  if (transfer_timeout.count() > 0) options.transfer_timeout = transfer_timeout;
  if (args.producer_timeout_ms > 0) options.producer_timeout = std::chrono::milliseconds(args.producer_timeout_ms);
  options.group = args.group;
  options.group_size = args.group_size;
  std::atomic<bool> corrupt{false};
  std::function<std::string()> transport = [] { return std::string("?"); };
  options.on_update = [&](const modelcast::ModelView& view) {
    std::string problem = runtime ? devicemodel::check(*runtime, view, seed) : testmodel::check(view, seed);
    if (!problem.empty()) {
      say("corrupt " + problem);
      corrupt = true;
    }
    auto first = view.tensors().front();
    if (view.version() == corrupt_after) {
      // The bytes a peer reading this version would get: its memory goes bad after the check.
      std::byte byte{};
      if (runtime) {
        runtime->copy_async(&byte, first.data, 1, nullptr);
        runtime->synchronize_stream(nullptr);
        byte ^= std::byte{0x5a};
        runtime->copy_async(const_cast<void*>(first.data), &byte, 1, nullptr);
        runtime->synchronize_stream(nullptr);
      } else {
        const_cast<std::byte*>(first.bytes().data())[0] ^= std::byte{0x5a};
      }
      say("corrupted " + std::to_string(view.version()));
    }
    say("installed " + std::to_string(view.version()) + " memory=" +
        std::string(modelcast::memory_kind_name(first.spec->memory)) + " device=" + std::to_string(first.spec->device) +
        " transport=" + transport());
  };
  options.on_error = [](const modelcast::Error& e) { say(std::string("rejected ") + e.what()); };
  modelcast::Consumer consumer(options);
  transport = [&] {
    auto stats = consumer.stats();
    return stats.transport + " path=" + stats.path;
  };
  // A reader that acquires and checks the newest version over and over while updates land: a
  // view must never show a version half replaced by the next.
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> reads{0};
  std::thread reader;
  if (read_loop) {
    reader = std::thread([&] {
      while (!stop) {
        auto view = consumer.acquire();
        if (!view) view = consumer.wait_for_version(1, 100ms);  // nothing installed yet
        if (!view) continue;
        std::string problem = runtime ? devicemodel::check(*runtime, view, seed) : testmodel::check(view, seed);
        if (!problem.empty()) {
          say("corrupt (reader) " + problem);
          corrupt = true;
        }
        reads++;
      }
    });
  }
  std::uint64_t seen = 0;
  int status = 0;
  while (seen < until) {
    auto view = consumer.wait_for_version(seen + 1, 60s);
    if (!view) {
      say("timeout waiting for version " + std::to_string(seen + 1) + ": " + consumer.stats().last_error);
      status = 2;
      break;
    }
    seen = view.version();
  }
  if (reader.joinable()) {
    stop = true;
    reader.join();
    say("reads " + std::to_string(reads.load()));
  }
  // Mappings of other processes' allocations still open (the simulated device counts them).
  auto ipc_open = [&]() -> std::string {
    auto* faults = runtime ? device::simulated_faults(*runtime) : nullptr;
    return faults ? std::to_string(faults->open_ipc_mappings()) : std::string("?");
  };
  auto say_stats = [&] {
    auto stats = consumer.stats();
    say("stats aborted=" + std::to_string(stats.transfers_aborted) + " rejected=" +
        std::to_string(stats.versions_rejected) + " relay_faults=" + std::to_string(stats.relay_faults) +
        " bytes_relayed=" + std::to_string(stats.bytes_relayed) + " ipc_open=" + ipc_open());
  };
  // A relay counts what it served when the producer says its reader installed it: after the
  // producer counted the reader's ack. A test asks ("stats") until the two agree.
  if (linger && status == 0) {
    std::string line;
    while (std::getline(std::cin, line)) {
      if (line == "stats") say_stats();
    }
  }
  say_stats();
  if (status) return status;
  return corrupt ? 3 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"modelcast device test peer"};
  std::string endpoint, hex, memory = "host";
  std::uint64_t versions = 1, seed = 1;
  std::size_t kib = 256, size = 0;
  int dev = 0;
  auto* read = app.add_subcommand("ipc-read");
  read->add_option("--handle", hex)->required();
  read->add_option("--size", size)->required();
  read->add_option("--device", dev);
  auto* prod = app.add_subcommand("producer");
  prod->add_option("--endpoint", endpoint)->required();
  prod->add_option("--versions", versions);
  prod->add_option("--seed", seed);
  prod->add_option("--kib", kib);
  prod->add_option("--device", dev);
  std::size_t relay_fanout = 0;
  prod->add_option("--relay-fanout", relay_fanout, "ProducerOptions::relay_fanout");
  auto* cons = app.add_subcommand("consumer");
  ConsumerArgs c;
  cons->add_option("--endpoint", c.endpoint)->required();
  cons->add_option("--until-version", c.until);
  cons->add_option("--seed", c.seed);
  cons->add_option("--memory", c.memory)->check(CLI::IsMember({"host", "cuda"}));
  cons->add_option("--device", c.device);
  cons->add_option("--transports", c.transports)->delimiter(',');
  cons->add_option("--path", c.path);
  cons->add_flag("--read-loop", c.read_loop, "a thread acquires and checks views while updates land");
  cons->add_option("--transfer-timeout-ms", c.transfer_timeout_ms, "ConsumerOptions::transfer_timeout (0: default)");
  cons->add_option("--name", c.name, "ConsumerOptions::consumer_name");
  cons->add_option("--corrupt-after", c.corrupt_after, "flip a byte of this version where it is held, once checked");
  cons->add_flag("--linger", c.linger, "after the last version, keep serving peers until stdin closes");
  cons->add_flag("--hold-peer-read", c.hold_peer_read,
                 "hold the first copy from another consumer's export until stdin says \"release\"");
  cons->add_option("--producer-timeout-ms", c.producer_timeout_ms, "ConsumerOptions::producer_timeout (0: default)");
  cons->add_option("--group", c.group, "ConsumerOptions::group");
  cons->add_option("--group-size", c.group_size, "ConsumerOptions::group_size");
  cons->add_flag("--echo-log", c.echo_log, "print the library's log lines on stdout (\"log ...\")");
  app.require_subcommand(1);
  CLI11_PARSE(app, argc, argv);
  try {
    if (*read) return ipc_read(hex, size, dev);
    if (*prod) return producer(endpoint, versions, seed, kib, dev, relay_fanout);
    return consumer(c);
  } catch (const modelcast::Error& e) {
    say(std::string("error ") + e.what());
    return 1;
  }
}
