// modelcast-test-peer: the other processes of the multi-process tests. Prints one line per
// event on stdout ("installed V", "published V", "torn ...") so a test can follow it.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <future>
#include <mutex>
#include <random>
#include <memory>
#include <algorithm>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>

#include <CLI/CLI.hpp>

#include "modelcast/consumer.h"
#include "modelcast/error.h"
#include "modelcast/producer.h"
#include "test_model.h"

using namespace std::chrono_literals;

namespace {

void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

// Keys on the command line: a producer's key file and the consumer keys it admits; a consumer's
// key file and the producer key it pins.
struct Keys {
  std::string key_file;
  std::string producer_key;
  std::vector<std::string> allowed;
};

// Producer options the load tests tune; 0 keeps the library's default.
struct Tuning {
  std::size_t max_consumers = 0;
  std::uint64_t lease_timeout_ms = 0;
  std::size_t chunk_kib = 0;
  std::size_t relay_fanout = 0;
  std::vector<std::string> transports;  // empty: the default
  // Rank `rank` of `ranks` of a sharded model: each tensor of the test model is this rank's piece,
  // rows rank * n .. (rank + 1) * n of a tensor `ranks` times as long (rank 0 also gets every
  // rank's endpoint, its own entry unread).
  std::uint32_t rank = 0;
  std::uint32_t ranks = 1;
  std::vector<std::string> rank_endpoints;
};

// How a consumer behaves as a relay: whether it serves peers, and a fault to play.
struct RelayRole {
  bool serve = true;
  // After installing this version, flip a byte of it in memory: from then on this consumer
  // holds (and relays) bytes that no longer match the producer's digests, as a relay whose
  // memory went bad would. 0: never.
  std::uint64_t corrupt_after = 0;
  bool linger = false;  // after the last version, serve until stdin closes
  // A member of this group of group_size consumers that switch versions together; empty: none.
  std::string group;
  std::uint32_t group_size = 0;
};

std::string stats_line(const modelcast::Producer& producer) {
  auto s = producer.stats();
  return "consumers=" + std::to_string(s.consumers) + " fetches_in_flight=" + std::to_string(s.fetches_in_flight) +
         " leases_expired=" + std::to_string(s.leases_expired) + " deliveries=" + std::to_string(s.deliveries) +
         " bad_messages=" + std::to_string(s.bad_messages) + " latest_version=" + std::to_string(s.latest_version) +
         " bytes_sent=" + std::to_string(s.bytes_sent) + " relayed_deliveries=" + std::to_string(s.relayed_deliveries) +
         " bytes_relayed=" + std::to_string(s.bytes_relayed) + " relay_faults=" + std::to_string(s.relay_faults);
}

int run_consumer(const std::string& endpoint, const std::string& name, std::uint64_t until_version,
                 std::uint64_t seed, int reader_threads, const Keys& keys, std::uint64_t transfer_timeout_ms,
                 int change_pct, const RelayRole& role) {
  modelcast::ConsumerOptions options;
  options.serve_peers = role.serve;
  options.group = role.group;
  options.group_size = role.group_size;
  if (transfer_timeout_ms != 0) options.transfer_timeout = std::chrono::milliseconds(transfer_timeout_ms);
  options.key_file = keys.key_file;
  options.producer_public_key = keys.producer_key;
  options.producer_endpoint = endpoint;
  options.model_name = "test";
  options.consumer_name = name;
  // Runs once per installed version, in order: the exact sequence the test checks.
  std::atomic<bool> corrupt{false};
  options.on_update = [&](const modelcast::ModelView& view) {
    if (auto problem = testmodel::check(view, seed, change_pct); !problem.empty()) {
      say("corrupt " + problem);
      corrupt = true;
    }
    if (view.version() == role.corrupt_after) {
      auto first = view.tensors().front();
      const_cast<std::byte*>(first.bytes().data())[0] ^= std::byte{0x5a};
      say("corrupted " + std::to_string(view.version()));
    }
    say("installed " + std::to_string(view.version()));
  };
  modelcast::Consumer consumer(options);
  say("started");  // its transports are made
  // "joined" once the producer accepted the join (stats name the transport it chose then).
  for (auto deadline = std::chrono::steady_clock::now() + 60s; std::chrono::steady_clock::now() < deadline;) {
    if (!consumer.stats().transport.empty()) {
      say("joined");
      break;
    }
    std::this_thread::sleep_for(1ms);
  }

  // Readers acquire views as an inference server would while versions stream in; every byte of
  // every view must belong to that view's version.
  std::atomic<bool> stop{false};
  std::atomic<bool> torn{false};
  std::atomic<std::uint64_t> checks{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < reader_threads; ++r) {
    readers.emplace_back([&] {
      while (!stop) {
        auto view = consumer.acquire();
        if (!view) continue;
        if (auto problem = testmodel::check(view, seed, change_pct); !problem.empty()) {
          say("torn " + problem);
          torn = true;
          return;
        }
        checks++;
      }
    });
  }
  std::uint64_t seen = 0;
  int status = 0;
  while (seen < until_version) {
    auto view = consumer.wait_for_version(seen + 1, 60s);
    if (!view) {
      say("timeout waiting for version " + std::to_string(seen + 1) + ": " + consumer.stats().last_error);
      status = 2;
      break;
    }
    seen = view.version();
  }
  if (corrupt) status = 3;
  stop = true;
  for (auto& t : readers) t.join();
  if (torn) return 4;
  if (reader_threads > 0 && status == 0) say("reader checks " + std::to_string(checks.load()));
  // Serving peers goes on until the test closes stdin (or kills this process): a relay that
  // has all it wanted may still be feeding others.
  // "stats" answers "relay-stats bytes_relayed=B": a relay counts what it sent when its sends
  // end, which may be after the receiver's ack; a test asks until the producer's count agrees.
  if (role.linger) {
    std::string line;
    while (std::getline(std::cin, line)) {
      if (line == "stats") say("relay-stats bytes_relayed=" + std::to_string(consumer.stats().bytes_relayed));
    }
  }
  if (status == 0) {
    auto stats = consumer.stats();
    say("bytes_received " + std::to_string(stats.bytes_received));
    say("bytes_relayed " + std::to_string(stats.bytes_relayed));
    say("relay_faults " + std::to_string(stats.relay_faults));
    say("transfers_aborted " + std::to_string(stats.transfers_aborted));
  }
  return status;
}

// Consumers stopped at random points of transfers: each cycle starts a consumer, waits for its
// first version, then stops it a random 0 to `within_ms` ms later while the producer goes on
// publishing, so the next version is usually arriving. Odd cycles destroy it while a view still
// holds its transport (the progress thread then outlives the receive buffers: the case that
// crashed), even ones after dropping the view. The last consumer is left to the process exit.
// Prints "stopped I" per cycle and "rss_kib N" after cycles/10 and after the last.
std::size_t resident_kib() {
  std::ifstream status("/proc/self/status");
  std::string key;
  std::size_t value = 0;
  while (status >> key) {
    if (key == "VmRSS:" && status >> value) return value;
  }
  return 0;
}

int run_stopper(const std::string& endpoint, const std::string& name, int cycles, int within_ms, std::uint64_t seed) {
  std::mt19937_64 random(seed);
  auto options_for = [&](int cycle) {
    modelcast::ConsumerOptions options;
    options.producer_endpoint = endpoint;
    options.model_name = "test";
    options.consumer_name = name + "-" + std::to_string(cycle);
    return options;
  };
  for (int cycle = 0; cycle < cycles; ++cycle) {
    auto consumer = std::make_unique<modelcast::Consumer>(options_for(cycle));
    auto view = consumer->wait_for_version(1, 60s);
    if (!view) {
      say("timeout cycle " + std::to_string(cycle) + ": " + consumer->stats().last_error);
      return 2;
    }
    // Not a synchronisation: the random point of the next transfer where this consumer stops.
    std::this_thread::sleep_for(std::chrono::microseconds(random() % (1000 * static_cast<std::uint64_t>(within_ms) + 1)));
    if (cycle % 2 == 1) {
      consumer.reset();
      view = {};
    } else {
      view = {};
      consumer.reset();
    }
    say("stopped " + std::to_string(cycle));
    if (cycle + 1 == std::max(1, cycles / 10)) say("rss_kib " + std::to_string(resident_kib()));
  }
  say("rss_kib " + std::to_string(resident_kib()));
  modelcast::Consumer last(options_for(cycles));
  if (!last.wait_for_version(1, 60s)) return 2;
  std::this_thread::sleep_for(std::chrono::microseconds(random() % (1000 * static_cast<std::uint64_t>(within_ms) + 1)));
  say("exiting");
  return 0;
}

// Trainers that stop while a version is on its way: each cycle starts a producer on `endpoint`,
// publishes version 1 and waits until a consumer has it, publishes version 2, then stops a random
// 0 to `within_ms` ms after the consumer's fetch of it started, often with its sends in flight. Even cycles destroy the
// producer; odd ones destroy it from another thread while this one publishes version 3. The
// last is left to the end of the process. Prints "stopped I in_flight=F" per cycle (F: fetches
// under way just before the stop), "rss_kib N" after cycles/10 and after the last.
int run_producer_stopper(const std::string& endpoint, int cycles, int within_ms, std::uint64_t seed, std::size_t kib) {
  std::mt19937_64 random(seed);
  auto model = testmodel::make(kib);
  auto random_point = [&] {
    // Not a synchronisation: the random point of the transfer where the producer stops.
    std::this_thread::sleep_for(std::chrono::microseconds(random() % (1000 * static_cast<std::uint64_t>(within_ms) + 1)));
  };
  auto start = [&](std::unique_ptr<modelcast::Producer>& producer) {
    auto delivered = std::make_shared<std::promise<void>>();
    auto once = std::make_shared<std::once_flag>();
    modelcast::ProducerOptions options;
    options.model_name = "test";
    options.control_endpoint = endpoint;
    options.on_delivery = [delivered, once](const modelcast::Delivery& d) {
      if (d.version == 1) std::call_once(*once, [&] { delivered->set_value(); });
    };
    producer = std::make_unique<modelcast::Producer>(options);
    for (auto& t : model) producer->register_tensor({t.spec, t.words.data()});
    testmodel::fill(model, seed, 1);
    producer->publish(1);
    if (delivered->get_future().wait_for(60s) != std::future_status::ready) return false;
    testmodel::fill(model, seed, 2);
    producer->publish(2);
    // The stopping point is drawn from the transfer's start: the consumer's fetch comes a few
    // milliseconds after the publish, and over shared memory it is over a few later.
    const auto give_up = std::chrono::steady_clock::now() + 1s;
    while (producer->stats().fetches_in_flight == 0 && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::yield();
    }
    return true;
  };
  for (int cycle = 0; cycle < cycles; ++cycle) {
    std::unique_ptr<modelcast::Producer> producer;
    if (!start(producer)) {
      say("timeout cycle " + std::to_string(cycle));
      return 2;
    }
    random_point();
    const auto in_flight = producer->stats().fetches_in_flight;
    if (cycle % 2 == 0) {
      producer.reset();
    } else {
      // publish() racing the destructor is the caller's bug; a publish that returned is not.
      testmodel::fill(model, seed, 3);
      producer->publish(3);
      std::thread([&] { producer.reset(); }).join();
    }
    say("stopped " + std::to_string(cycle) + " in_flight=" + std::to_string(in_flight));
    if (cycle + 1 == std::max(1, cycles / 10)) say("rss_kib " + std::to_string(resident_kib()));
  }
  say("rss_kib " + std::to_string(resident_kib()));
  std::unique_ptr<modelcast::Producer> last;
  if (!start(last)) return 2;
  random_point();
  say("exiting");
  return 0;
}

int run_producer(const std::string& endpoint, std::uint64_t versions, std::uint64_t seed, std::size_t kib,
                 std::size_t wait_consumers, const Keys& keys, const Tuning& tuning, int change_pct) {
  modelcast::ProducerOptions options;
  if (tuning.max_consumers != 0) options.max_consumers = tuning.max_consumers;
  if (tuning.lease_timeout_ms != 0) options.lease_timeout = std::chrono::milliseconds(tuning.lease_timeout_ms);
  if (tuning.chunk_kib != 0) options.transfer_chunk_bytes = tuning.chunk_kib << 10;
  options.relay_fanout = tuning.relay_fanout;
  options.key_file = keys.key_file;
  options.allowed_consumer_keys = keys.allowed;
  options.transports = tuning.transports;
  options.model_name = "test";
  options.control_endpoint = endpoint;
  options.rank = tuning.rank;
  options.rank_count = tuning.ranks;
  options.rank_endpoints = tuning.rank_endpoints;
  modelcast::Producer producer(options);
  auto model = testmodel::make(kib);
  for (auto& t : model) {
    modelcast::TensorRef ref{t.spec, t.words.data()};
    if (tuning.ranks > 1) {
      ref.global_shape = {t.spec.shape[0] * tuning.ranks};
      ref.global_offset = {t.spec.shape[0] * tuning.rank};
    }
    producer.register_tensor(ref);
  }
  producer.prepare();
  say("ready " + producer.control_endpoint());
  if (wait_consumers > 0 && !producer.wait_for_consumers(wait_consumers, 60s)) {
    say("error no consumer joined");
    return 1;
  }
  for (std::uint64_t v = 1; v <= versions; ++v) {
    testmodel::fill(model, seed, v, change_pct);
    producer.publish(static_cast<std::int64_t>(v));
    say("published " + std::to_string(v));
  }
  // Serve until the test closes our stdin (or kills us). Commands on stdin, one a line:
  //   publish                  publish the next version ("published V stall_us=S")
  //   stats                    "stats consumers=... fetches_in_flight=... ..."
  //   await-consumers-at-most N MS
  //                            "stats ..." once at most N consumers are joined, or
  //                            "timeout stats ..." after MS milliseconds
  // Other lines are ignored.
  std::uint64_t next = versions + 1;
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream words(line);
    std::string command;
    words >> command;
    if (command == "publish") {
      testmodel::fill(model, seed, next, change_pct);
      auto ticket = producer.publish(static_cast<std::int64_t>(next));
      say("published " + std::to_string(next) + " stall_us=" +
          std::to_string(std::chrono::duration_cast<std::chrono::microseconds>(ticket.stall).count()));
      ++next;
    } else if (command == "stats") {
      say("stats " + stats_line(producer));
    } else if (command == "await-consumers-at-most") {
      std::size_t most = 0;
      std::uint64_t ms = 0;
      words >> most >> ms;
      auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
      bool reached = false;
      while (!(reached = producer.stats().consumers <= most) && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::yield();
      }
      say(std::string(reached ? "" : "timeout ") + "stats " + stats_line(producer));
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"modelcast test peer"};
  std::string endpoint, name = "peer";
  std::uint64_t versions = 1, seed = 1;
  std::size_t kib = 256;
  int readers = 0;
  auto* consumer = app.add_subcommand("consumer");
  consumer->add_option("--endpoint", endpoint)->required();
  consumer->add_option("--name", name);
  consumer->add_option("--until-version", versions);
  consumer->add_option("--seed", seed);
  consumer->add_option("--readers", readers);
  Keys keys;
  consumer->add_option("--key-file", keys.key_file);
  consumer->add_option("--producer-key", keys.producer_key);
  int stop_cycles = 0, stop_within_ms = 50;
  consumer->add_option("--stop-cycles", stop_cycles, "stop consumers at random points instead (run_stopper)");
  consumer->add_option("--stop-within-ms", stop_within_ms);
  std::uint64_t transfer_timeout_ms = 0;
  consumer->add_option("--transfer-timeout-ms", transfer_timeout_ms);
  int change_pct = 100;
  consumer->add_option("--change-pct", change_pct, "versions change this share of tensors (testmodel::fill)");
  RelayRole role;
  consumer->add_flag("!--no-serve", role.serve, "decline to relay to other consumers");
  consumer->add_option("--corrupt-after", role.corrupt_after, "flip a byte of this version once installed");
  consumer->add_flag("--linger", role.linger, "after the last version, keep serving until stdin closes");
  consumer->add_option("--group", role.group, "a member of this group (ConsumerOptions::group)");
  consumer->add_option("--group-size", role.group_size, "the group's members");
  auto* producer = app.add_subcommand("producer");
  producer->add_option("--endpoint", endpoint)->required();
  producer->add_option("--versions", versions);
  producer->add_option("--seed", seed);
  producer->add_option("--kib", kib);
  std::size_t wait_consumers = 0;
  producer->add_option("--wait-consumers", wait_consumers);
  producer->add_option("--key-file", keys.key_file);
  producer->add_option("--allow-key", keys.allowed);
  Tuning tuning;
  producer->add_option("--max-consumers", tuning.max_consumers);
  producer->add_option("--lease-timeout-ms", tuning.lease_timeout_ms);
  producer->add_option("--chunk-kib", tuning.chunk_kib);
  producer->add_option("--change-pct", change_pct, "versions change this share of tensors (testmodel::fill)");
  producer->add_option("--transports", tuning.transports)->delimiter(',');
  producer->add_option("--relay-fanout", tuning.relay_fanout);
  producer->add_option("--rank", tuning.rank, "this producer's rank of a sharded model");
  producer->add_option("--ranks", tuning.ranks, "the sharded model's producer ranks");
  producer->add_option("--rank-endpoints", tuning.rank_endpoints, "rank 0: every rank's endpoint")->delimiter(',');
  int producer_stop_cycles = 0;
  producer->add_option("--stop-cycles", producer_stop_cycles, "stop producers at random points instead");
  producer->add_option("--stop-within-ms", stop_within_ms);
  app.require_subcommand(1);
  CLI11_PARSE(app, argc, argv);
  try {
    if (*consumer && stop_cycles > 0) return run_stopper(endpoint, name, stop_cycles, stop_within_ms, seed);
    if (*producer && producer_stop_cycles > 0) {
      return run_producer_stopper(endpoint, producer_stop_cycles, stop_within_ms, seed, kib);
    }
    if (*consumer) return run_consumer(endpoint, name, versions, seed, readers, keys, transfer_timeout_ms, change_pct, role);
    return run_producer(endpoint, versions, seed, kib, wait_consumers, keys, tuning, change_pct);
  } catch (const modelcast::Error& e) {
    say(std::string("error ") + e.what());
    return 1;
  }
}
