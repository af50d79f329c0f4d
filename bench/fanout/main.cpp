// modelcast-fanout-bench: the processes of the fan-out benchmark (bench/run.sh fanout), each run
// by bench/fanout.sh in its own network namespace behind a rate-limited veth link.
//
//   producer  publishes `versions` versions of a `size`-byte model once `consumers` consumers
//             have joined, each after the last was delivered everywhere, and prints one JSON
//             row: update_ms (publish() call until the last consumer's ack, median over the
//             versions after the first) and producer_bytes (bytes it sent per version, median)
//   consumer  installs versions until `until`, checking words of each tensor, then serves the
//             others (relays) until the producer is gone
//   sink / source
//             the link ceiling: `bytes` over one plain TCP connection through the same links,
//             timed at the source from connect until the sink's one-byte receipt
// Public API only.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "modelcast/consumer.h"
#include "modelcast/error.h"
#include "modelcast/producer.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
constexpr const char* kModel = "fanout";

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// Eight tensors of equal size. Word i of version v is i * kGolden + v: every block changes
// each version (a delta would otherwise send only what changed, which is not what this
// benchmark measures), and a consumer can check any word.
constexpr std::uint64_t kGolden = 0x9E3779B97F4A7C15ull;
struct Model {
  std::vector<std::uint64_t> words;
  std::vector<modelcast::TensorRef> tensors;
  explicit Model(std::size_t bytes) : words(bytes / 8) {
    constexpr std::size_t kTensors = 8;
    const std::size_t each = words.size() / kTensors;
    stamp(0);
    for (std::size_t t = 0; t < kTensors; ++t) {
      modelcast::TensorRef ref;
      ref.spec.name = "w" + std::to_string(t);
      ref.spec.dtype = modelcast::DType::kI64;
      ref.spec.shape = {static_cast<std::int64_t>(t + 1 == kTensors ? words.size() - t * each : each)};
      ref.data = words.data() + t * each;
      tensors.push_back(ref);
    }
  }
  void stamp(std::uint64_t version) {
    for (std::size_t i = 0; i < words.size(); ++i) words[i] = i * kGolden + version;
  }
};

int run_producer(const std::string& endpoint, std::size_t bytes, int versions, std::size_t consumers,
                 std::size_t relay_fanout) {
  std::mutex mutex;
  std::condition_variable cv;
  std::map<std::uint64_t, std::vector<modelcast::Delivery>> delivered;
  modelcast::ProducerOptions options;
  options.model_name = kModel;
  options.control_endpoint = endpoint;
  options.allow_plaintext_remote = true;  // namespaces of this benchmark only
  options.relay_fanout = relay_fanout;
  options.on_delivery = [&](const modelcast::Delivery& d) {
    std::lock_guard lock(mutex);
    delivered[d.version].push_back(d);
    cv.notify_all();
  };
  Model model(bytes);
  modelcast::Producer producer(options);
  for (auto& t : model.tensors) producer.register_tensor(t);
  producer.prepare();
  if (!producer.wait_for_consumers(consumers, 120s)) throw std::runtime_error("consumers did not join in 120 s");
  std::vector<double> update_ms, sent, relayed;
  for (int v = 1; v <= versions; ++v) {
    model.stamp(static_cast<std::uint64_t>(v));
    auto ticket = producer.publish(v);
    std::unique_lock lock(mutex);
    if (!cv.wait_for(lock, 600s, [&] { return delivered[ticket.version].size() >= consumers; })) {
      throw std::runtime_error("version " + std::to_string(v) + " did not reach every consumer in 600 s");
    }
    if (v == 1) continue;  // connections and buffers are set up during the first
    double slowest = 0, bytes_sent = 0, bytes_relayed = 0;
    for (const auto& d : delivered[ticket.version]) {
      slowest = std::max(slowest, std::chrono::duration<double, std::milli>(d.since_publish).count());
      (d.relay.empty() ? bytes_sent : bytes_relayed) += static_cast<double>(d.bytes);
    }
    update_ms.push_back(slowest);
    // Diagnostic (stderr): each consumer's delivery, in order, and who served it: a chain of
    // relays shows as evenly spaced steps, whose spacing is the cost of one hop.
    std::vector<std::pair<double, std::string>> order;
    for (const auto& d : delivered[ticket.version]) {
      order.emplace_back(std::chrono::duration<double, std::milli>(d.since_publish).count(),
                         d.consumer + "<" + (d.relay.empty() ? std::string("producer") : d.relay));
    }
    std::sort(order.begin(), order.end());
    std::fprintf(stderr, "version %d:", v);
    for (const auto& [ms, who] : order) std::fprintf(stderr, " %.0f %s", ms, who.c_str());
    std::fprintf(stderr, "\n");
    sent.push_back(bytes_sent);
    relayed.push_back(bytes_relayed);
  }
  nlohmann::ordered_json row;
  row["consumers"] = consumers;
  row["size_mib"] = static_cast<double>(bytes) / (1 << 20);
  row["update_ms"] = median(update_ms);
  row["producer_bytes"] = median(sent);
  row["relay_bytes"] = median(relayed);
  row["relay_fanout"] = relay_fanout;
  row["update_ms_samples"] = update_ms;
  std::printf("%s\n", row.dump().c_str());
  return 0;
}

int run_consumer(const std::string& endpoint, const std::string& name, std::uint64_t until) {
  modelcast::ConsumerOptions options;
  options.producer_endpoint = endpoint;
  options.model_name = kModel;
  options.consumer_name = name;
  options.allow_plaintext_remote = true;
  options.producer_timeout = 10s;
  modelcast::Consumer consumer(options);
  std::uint64_t seen = 0;
  while (seen < until) {
    auto view = consumer.wait_for_version(seen + 1, 600s);
    if (!view) {
      std::fprintf(stderr, "%s: no version after %llu: %s\n", name.c_str(), static_cast<unsigned long long>(seen),
                   consumer.stats().last_error.c_str());
      return 1;
    }
    std::uint64_t index = 0;  // of the tensor's first word in the model
    for (const auto& t : view.tensors()) {
      const auto* words = static_cast<const std::uint64_t*>(t.data);
      const std::uint64_t count = t.size_bytes() / 8;
      const bool right = count == 0 || (words[0] == index * kGolden + view.version() &&
                                        words[count - 1] == (index + count - 1) * kGolden + view.version());
      index += count;
      if (!right) {
        std::fprintf(stderr, "%s: version %llu holds the wrong bytes\n", name.c_str(),
                     static_cast<unsigned long long>(view.version()));
        return 3;
      }
    }
    seen = view.version();
  }
  // Other consumers may still be fetching the last version's blocks from this one: serve on
  // until the producer is gone (it exits once every consumer has the last version).
  const auto lost = consumer.stats().reconnects;
  for (auto deadline = Clock::now() + 120s; consumer.stats().reconnects == lost && Clock::now() < deadline;) {
    std::this_thread::sleep_for(20ms);
  }
  return 0;
}

int run_sink(int port, std::size_t bytes) {
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  if (bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 || listen(listener, 1) != 0) {
    throw std::runtime_error(std::string("sink: cannot listen: ") + std::strerror(errno));
  }
  std::printf("listening\n");
  std::fflush(stdout);
  int connection = accept(listener, nullptr, nullptr);
  std::vector<char> buffer(1 << 20);
  std::size_t got = 0;
  while (got < bytes) {
    auto n = read(connection, buffer.data(), buffer.size());
    if (n <= 0) throw std::runtime_error("sink: connection ended early");
    got += static_cast<std::size_t>(n);
  }
  char done = 1;
  if (write(connection, &done, 1) != 1) throw std::runtime_error("sink: cannot acknowledge");
  close(connection);
  close(listener);
  return 0;
}

int run_source(const std::string& host, int port, std::size_t bytes) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &address.sin_addr) != 1) throw std::runtime_error("source: bad host " + host);
  std::vector<char> buffer(1 << 20, 'x');
  auto start = Clock::now();
  int connection = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(connection, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    throw std::runtime_error(std::string("source: cannot connect: ") + std::strerror(errno));
  }
  std::size_t sent = 0;
  while (sent < bytes) {
    auto n = write(connection, buffer.data(), std::min(buffer.size(), bytes - sent));
    if (n <= 0) throw std::runtime_error("source: connection ended early");
    sent += static_cast<std::size_t>(n);
  }
  char done = 0;
  if (read(connection, &done, 1) != 1) throw std::runtime_error("source: no receipt");
  std::printf("%.3f\n", std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  close(connection);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"modelcast-fanout-bench: processes of bench/run.sh fanout"};
  app.require_subcommand(1);
  std::string endpoint, name = "consumer", host;
  std::size_t bytes = 64u << 20, consumers = 1;
  int versions = 4, port = 0;
  std::uint64_t until = 0;
  auto* producer = app.add_subcommand("producer");
  producer->add_option("--endpoint", endpoint)->required();
  producer->add_option("--bytes", bytes);
  producer->add_option("--versions", versions)->check(CLI::Range(2, 1000));
  producer->add_option("--consumers", consumers)->check(CLI::Range(1, 256));
  std::size_t relay_fanout = 0;
  producer->add_option("--relay-fanout", relay_fanout, "ProducerOptions::relay_fanout (0: no relays)");
  auto* consumer = app.add_subcommand("consumer");
  consumer->add_option("--endpoint", endpoint)->required();
  consumer->add_option("--name", name);
  consumer->add_option("--until", until)->required();
  auto* sink = app.add_subcommand("sink");
  sink->add_option("--port", port)->required();
  sink->add_option("--bytes", bytes)->required();
  auto* source = app.add_subcommand("source");
  source->add_option("--host", host)->required();
  source->add_option("--port", port)->required();
  source->add_option("--bytes", bytes)->required();
  CLI11_PARSE(app, argc, argv);
  try {
    if (*producer) return run_producer(endpoint, bytes, versions, consumers, relay_fanout);
    if (*consumer) return run_consumer(endpoint, name, until);
    if (*sink) return run_sink(port, bytes);
    return run_source(host, port, bytes);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "modelcast-fanout-bench: %s\n", e.what());
    return 1;
  }
}
