// modelcast-sharded-bench: the processes of the sharded benchmark (bench/run.sh sharded), each run
// by bench/sharded.sh in its own network namespace behind a rate-limited veth link.
//
//   producer  rank `rank` of `ranks`: registers its dim-0 piece (rows) of every tensor of a model of
//             `bytes` bytes (tensors of `row-bytes`-byte f32 rows), waits for `consumers` consumers,
//             then publishes steps 1..versions, each once every consumer acked the one before and
//             every rank got there too (files in `barrier-dir`: the ranks of one trainer publish
//             a step at about the same time, as a training loop's steps keep them together)
//   consumer  told rank 0's endpoint, keeps `want` of every tensor ("whole", or "shard:D:K:N": part K
//             of N along dimension D), checks the first and last element of every part it holds at
//             every step, and prints one JSON row: update_ms (the newest rank's publish() call until
//             this consumer installed the step, median over the steps after the first), wanted_bytes
//             (of one step) and bytes_received (per step after the first, median)
// Public API only. Element (r, c) of tensor t at step s is t * 2^40 + r * cols + c + s * 2^52 as a
// double's value truncated to float: distinct per place and step wherever a check looks.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>
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
constexpr const char* kModel = "sharded";
constexpr int kTensors = 4;

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// The value every process computes for element (row, col) of tensor t at step s: the low bits
// count places, the step sits above them, so a stale or misplaced element differs.
float value(int t, std::int64_t row, std::int64_t col, std::int64_t cols, std::int64_t step) {
  return static_cast<float>((t * 1000003 + row * cols + col) % 1000000) + static_cast<float>(step) * 1048576.0f;
}

struct Shape {
  std::int64_t rows, cols;
};
Shape shape_of(std::size_t bytes, std::size_t row_bytes) {
  const std::int64_t cols = static_cast<std::int64_t>(row_bytes / 4);
  return {static_cast<std::int64_t>(bytes / kTensors / row_bytes), cols};
}

std::pair<std::int64_t, std::int64_t> chunk(std::int64_t size, std::size_t k, std::size_t n) {
  const std::int64_t step = (size + static_cast<std::int64_t>(n) - 1) / static_cast<std::int64_t>(n);
  const std::int64_t begin = std::min<std::int64_t>(size, step * static_cast<std::int64_t>(k));
  return {begin, std::min<std::int64_t>(size, begin + step) - begin};
}

// Marks this rank at `step` and waits until every rank is there. The benchmark's processes share
// the file system, not a network they could use without adding to what is measured.
void barrier(const std::string& dir, std::uint32_t rank, std::uint32_t ranks, int step) {
  if (dir.empty()) return;
  auto name = [&](std::uint32_t r) { return dir + "/r" + std::to_string(r) + "-s" + std::to_string(step); };
  if (FILE* f = std::fopen(name(rank).c_str(), "w")) std::fclose(f);
  for (std::uint32_t r = 0; r < ranks; ++r) {
    for (int tries = 0; tries < 600000; ++tries) {
      if (FILE* f = std::fopen(name(r).c_str(), "r")) {
        std::fclose(f);
        break;
      }
      std::this_thread::sleep_for(1ms);
    }
  }
}

int run_producer(const std::string& endpoint, std::uint32_t rank, std::uint32_t ranks,
                 const std::vector<std::string>& rank_endpoints, std::size_t bytes, std::size_t row_bytes, int versions,
                 std::size_t consumers, std::size_t chunk_bytes, const std::string& ready_file,
                 const std::string& barrier_dir) {
  const Shape shape = shape_of(bytes, row_bytes);
  const auto [row0, rows] = chunk(shape.rows, rank, ranks);
  std::vector<std::vector<float>> pieces(kTensors, std::vector<float>(static_cast<std::size_t>(rows * shape.cols)));
  auto fill = [&](std::int64_t step) {
    for (int t = 0; t < kTensors; ++t) {
      for (std::int64_t r = 0; r < rows; ++r) {
        for (std::int64_t c = 0; c < shape.cols; ++c) pieces[t][r * shape.cols + c] = value(t, row0 + r, c, shape.cols, step);
      }
    }
  };
  std::mutex mutex;
  std::condition_variable cv;
  std::map<std::uint64_t, std::size_t> delivered;
  modelcast::ProducerOptions options;
  options.model_name = kModel;
  options.control_endpoint = endpoint;
  options.allow_plaintext_remote = true;  // namespaces of this benchmark only
  options.transfer_chunk_bytes = chunk_bytes;
  options.rank = rank;
  options.rank_count = ranks;
  if (rank == 0) options.rank_endpoints = rank_endpoints;
  options.on_delivery = [&](const modelcast::Delivery& d) {
    std::lock_guard lock(mutex);
    delivered[d.version]++;
    cv.notify_all();
  };
  modelcast::Producer producer(options);
  for (int t = 0; t < kTensors; ++t) {
    modelcast::TensorRef ref{{"w" + std::to_string(t), modelcast::DType::kF32, {rows, shape.cols}}, pieces[t].data()};
    ref.global_shape = {shape.rows, shape.cols};
    ref.global_offset = {row0, 0};
    producer.register_tensor(ref);
  }
  producer.prepare();
  if (!ready_file.empty()) {  // tells the script this rank is bound (the others start after)
    if (FILE* f = std::fopen(ready_file.c_str(), "w")) std::fclose(f);
  }
  if (!producer.wait_for_consumers(consumers, 120s)) throw std::runtime_error("consumers did not join in 120 s");
  for (int v = 1; v <= versions; ++v) {
    fill(v);
    barrier(barrier_dir, rank, ranks, v);
    auto ticket = producer.publish(v);
    std::unique_lock lock(mutex);
    if (!cv.wait_for(lock, 600s, [&] { return delivered[ticket.version] >= consumers; })) {
      throw std::runtime_error("rank " + std::to_string(rank) + ": step " + std::to_string(v) +
                               " did not reach every consumer in 600 s");
    }
  }
  return 0;
}

int run_consumer(const std::string& endpoint, const std::string& name, const std::string& want, int until,
                 std::size_t bytes, std::size_t row_bytes, std::size_t producers) {
  modelcast::ConsumerOptions options;
  options.producer_endpoint = endpoint;
  options.model_name = kModel;
  options.consumer_name = name;
  options.allow_plaintext_remote = true;
  options.producer_timeout = 10s;
  if (want != "whole") {
    std::size_t dim = 0, k = 0, n = 0;
    if (std::sscanf(want.c_str(), "shard:%zu:%zu:%zu", &dim, &k, &n) != 3) throw std::runtime_error("bad --want " + want);
    options.wants = {modelcast::TensorWant::shard("*", dim, k, n)};
  }
  const Shape shape = shape_of(bytes, row_bytes);
  modelcast::Consumer consumer(options);
  std::vector<double> update_ms, received;
  std::uint64_t last_bytes = 0;
  std::int64_t step = 0;
  std::uint64_t version = 0;
  while (step < until) {
    auto view = consumer.wait_for_version(version + 1, 600s);
    if (!view) throw std::runtime_error(name + ": no step after " + std::to_string(step) + ": " + consumer.stats().last_error);
    version = view.version();
    step = view.step();
    for (int t = 0; t < kTensors; ++t) {
      auto v = view.tensor("w" + std::to_string(t));
      const std::int64_t r0 = v.is_part() ? v.box_offset[0] : 0, c0 = v.is_part() ? v.box_offset[1] : 0;
      const auto& ext = v.shape();
      const auto* f = static_cast<const float*>(v.data);
      const std::size_t n = v.size_bytes() / 4;
      if (n == 0) continue;
      if (f[0] != value(t, r0, c0, shape.cols, step) ||
          f[n - 1] != value(t, r0 + ext[0] - 1, c0 + ext[1] - 1, shape.cols, step)) {
        throw std::runtime_error(name + ": step " + std::to_string(step) + " holds the wrong bytes in w" + std::to_string(t));
      }
    }
    const auto stats = consumer.stats();
    if (step > 1) {
      update_ms.push_back(std::chrono::duration<double, std::milli>(view.update_latency()).count());
      received.push_back(static_cast<double>(stats.bytes_received - last_bytes));
    }
    last_bytes = stats.bytes_received;
  }
  nlohmann::ordered_json row;
  row["producers"] = producers;
  row["layout"] = want;
  row["size_mib"] = static_cast<double>(bytes) / (1 << 20);
  row["update_ms"] = median(update_ms);
  row["wanted_bytes"] = consumer.stats().wanted_bytes;
  row["bytes_received"] = median(received);
  row["update_ms_samples"] = update_ms;
  std::printf("%s\n", row.dump().c_str());
  return 0;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"modelcast-sharded-bench: processes of bench/run.sh sharded"};
  app.require_subcommand(1);
  std::string endpoint, name = "consumer", want = "whole", rank_endpoints, ready_file, barrier_dir;
  std::size_t bytes = 64u << 20, row_bytes = 1u << 20, consumers = 1, chunk_bytes = 1u << 20, producers = 1;
  std::uint32_t rank = 0, ranks = 1;
  int versions = 4;
  auto* producer = app.add_subcommand("producer");
  producer->add_option("--endpoint", endpoint)->required();
  producer->add_option("--rank", rank);
  producer->add_option("--ranks", ranks);
  producer->add_option("--rank-endpoints", rank_endpoints, "rank 0: every rank's endpoint, comma-separated");
  producer->add_option("--consumers", consumers);
  producer->add_option("--chunk-bytes", chunk_bytes);
  producer->add_option("--ready-file", ready_file);
  producer->add_option("--barrier-dir", barrier_dir, "a directory the ranks meet in before each step");
  auto* consumer = app.add_subcommand("consumer");
  consumer->add_option("--endpoint", endpoint)->required();
  consumer->add_option("--name", name);
  consumer->add_option("--want", want);
  consumer->add_option("--producers", producers);
  for (auto* sub : {producer, consumer}) {
    sub->add_option("--bytes", bytes);
    sub->add_option("--row-bytes", row_bytes);
    sub->add_option("--versions", versions)->check(CLI::Range(2, 1000));
  }
  CLI11_PARSE(app, argc, argv);
  try {
    if (*producer) {
      return run_producer(endpoint, rank, ranks, split(rank_endpoints), bytes, row_bytes, versions, consumers, chunk_bytes,
                          ready_file, barrier_dir);
    }
    return run_consumer(endpoint, name, want, versions, bytes, row_bytes, producers);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "modelcast-sharded-bench: %s\n", e.what());
    return 1;
  }
}
