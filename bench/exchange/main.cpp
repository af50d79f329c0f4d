// modelcast-exchange-bench: the exchange benchmark (bench/run.sh exchange).
//
// `run` measures, for each model size and consumer count, under the UCX environment it was
// started with (bench/exchange.sh starts it once per transport):
//   update_ms        publish() call until the version is installed in every consumer process:
//                    per version the largest ModelView::update_latency() over the consumers
//                    (CLOCK_REALTIME at install minus CLOCK_REALTIME at the publish() call), median
//   stall_ms         PublishTicket::stall, median
//   memcpy_ms        one memcpy of the model's size between warm, pre-faulted buffers, taken
//                    right before each publish (paired with it), median
//   ucx_ceiling_ms   our own UCP loop (ucx_ceiling.cpp): a sender in the producer's process,
//                    a receiver in each consumer process, same chunks, tagged rendezvous,
//                    registered memory, error mode and UCX env; one transfer right before each
//                    published version (paired with it), median
//   file_baseline_ms write + fsync + rename, readers poll every 1 ms and read with O_DIRECT,
//                    start of the write until the last reader is done, median
//   notify_us_p99    ConsumerStats::last_notify_latency per version per consumer, p99
//   changed_pct      the share of the model's blocks (transfer chunks) each version changes:
//                    100 changes every block (training that touches every weight), less a
//                    random set of blocks, so the consumer receives a delta
//   wire_bytes       bytes the producer sent per consumer per version (Delivery::bytes), median
//   serve_p99_ms     rows marked "serving" (one consumer, every block changing, run again after
//                    the plain row): a reader thread in the consumer runs an inference-like pass
//                    (reads every weight of the newest view) in a loop while the measured versions
//                    arrive, paused while the ceilings and diagnostics run; p99 of its pass times
//                    (nearest rank: with under 100 passes, the slowest). serve_idle_p99_ms: the
//                    same passes, in the same process, right before, with nothing arriving
// and writes a JSON array (one object per configuration, with the samples under "extra").
// `report` merges such files and prints the table or the JSON of the issue.
// Each repetition runs: UCX ceiling transfer, memcpy (+ diagnostics), publish() and wait for
// every consumer's ack, so the ratios compare samples taken under the same machine load.
// `consumer` and `file-read` are the child processes it starts itself.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <tuple>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "common.h"
#include "common/digest.h"
#include "file_baseline.h"
#include "modelcast/consumer.h"
#include "modelcast/error.h"
#include "modelcast/producer.h"
#include "ucx_ceiling.h"

namespace {

using namespace std::chrono_literals;
using json = nlohmann::ordered_json;

constexpr std::size_t kChunkBytes = 32u << 20;  // modelcast's default transfer_chunk_bytes
constexpr const char* kModelName = "bench";

double to_ms(std::chrono::nanoseconds d) { return std::chrono::duration<double, std::milli>(d).count(); }

void progress(const char* format, auto... args) {
  std::fprintf(stderr, format, args...);
  std::fflush(stderr);
}

// ~100 tensors of mixed dtypes adding up to exactly `size` bytes, in one pre-faulted block
// (the trainer's weights). Two embedding-sized tensors, the rest equal, 256-byte multiples.
struct Model {
  bench::TouchedBuffer storage;
  std::vector<modelcast::TensorRef> tensors;
  std::vector<std::size_t> offsets;

  explicit Model(std::size_t size) : storage(size) {
    using modelcast::DType;
    constexpr std::size_t kTensors = 96;
    const DType dtypes[] = {DType::kF32, DType::kBF16, DType::kF16, DType::kF32, DType::kI8};
    std::size_t embed = size / 8 / 256 * 256;
    std::size_t rest = size - 2 * embed;
    std::size_t each = rest / (kTensors - 2) / 256 * 256;
    std::size_t offset = 0;
    for (std::size_t i = 0; i < kTensors; ++i) {
      std::size_t bytes = (i == 0 || i == kTensors - 1) ? embed : each;
      if (i == kTensors - 2) bytes = size - offset - embed;  // the remainder
      DType dtype = (i == 0 || i == kTensors - 1) ? DType::kF32 : dtypes[i % 5];
      modelcast::TensorRef ref;
      ref.spec.name = i == 0 ? "embed.tokens" : i == kTensors - 1 ? "head.weight" : "layers." + std::to_string(i);
      ref.spec.dtype = dtype;
      ref.spec.shape = {static_cast<std::int64_t>(bytes / modelcast::dtype_size(dtype))};
      ref.data = storage.data() + offset;
      tensors.push_back(ref);
      offsets.push_back(offset);
      offset += bytes;
    }
    auto* words = reinterpret_cast<std::uint64_t*>(storage.data());
    for (std::size_t i = 0; i < size / 8; ++i) words[i] = i * 0x9E3779B97F4A7C15ull;
  }

  // "Training": the weights change between publishes. At 100 % the first word of each tensor is
  // the version (which consumers check) and so is the first word of every block; below, the
  // first word of a random `changed_pct` share of the blocks (at least one unless 0).
  void stamp(std::uint64_t version, int changed_pct, std::size_t block_bytes, std::uint64_t seed) {
    const std::size_t blocks = (storage.size() + block_bytes - 1) / block_bytes;
    if (changed_pct >= 100) {
      for (auto offset : offsets) std::memcpy(storage.data() + offset, &version, sizeof version);
      for (std::size_t b = 0; b < blocks; ++b) std::memcpy(storage.data() + b * block_bytes, &version, sizeof version);
      return;
    }
    std::vector<std::size_t> order(blocks);
    for (std::size_t b = 0; b < blocks; ++b) order[b] = b;
    std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + version;
    for (std::size_t b = blocks; b > 1; --b) {  // Fisher-Yates with a splitmix step
      x += 0x9E3779B97F4A7C15ull;
      std::uint64_t z = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
      std::swap(order[b - 1], order[(z ^ (z >> 27)) % b]);
    }
    const auto changed = changed_pct <= 0 ? 0 : std::max<std::size_t>(1, blocks * static_cast<std::size_t>(changed_pct) / 100);
    // Unique across rows: a row run after another with the same seed picks the same blocks, and
    // writing the same version number into them again would change nothing.
    const std::uint64_t value = (++stamps_ << 32) | version;
    for (std::size_t i = 0; i < changed; ++i) {
      std::memcpy(storage.data() + order[i] * block_bytes, &value, sizeof value);
    }
  }
  std::uint64_t stamps_ = 0;

  // XOR of each tensor's XXH3-64: what the consumer's last version must hash to.
  std::uint64_t digest() const {
    std::uint64_t d = 0;
    for (const auto& t : tensors) d ^= modelcast::digest_bytes(t.data, t.spec.size_bytes());
    return d;
  }
};

// ---- consumer process ----------------------------------------------------------------------

struct Sample {
  std::uint64_t version;
  std::int64_t update_ns;
  std::int64_t notify_ns;
  bool content_ok;
};

// The consumer process. Its receive buffers are its own (ConsumerOptions::caller_buffers, two,
// like buffers = 2) so that the UCX ceiling's receiver can use the one no view holds between
// two versions: no extra memory, and both transfers land in the same pages.
// An inference-like pass: every weight of the newest view read once.
volatile std::uint64_t serve_sink = 0;
double serve_pass(modelcast::Consumer& consumer) {
  auto t0 = bench::steady_ns();
  auto view = consumer.acquire();
  std::uint64_t sum = 0;
  for (const auto& tensor : view.tensors()) {
    const auto* words = static_cast<const std::uint64_t*>(tensor.data);
    for (std::size_t i = 0; i < tensor.size_bytes() / 8; ++i) sum += words[i];
  }
  serve_sink = sum;
  return static_cast<double>(bench::steady_ns() - t0) / 1e6;
}

int run_consumer(const std::string& endpoint, int index, std::size_t size, std::size_t buffer_count, bool stamped,
                 bool owned) {
  // Owned buffers (delta rows): modelcast's own, so a delta leaves blocks the buffer still holds
  // where they are; the ceiling then receives into a buffer of its own (one more model's worth).
  std::vector<bench::TouchedBuffer> buffers;
  for (std::size_t i = 0; i < (owned ? 1 : buffer_count); ++i) buffers.emplace_back(size);
  bench::UcpReceiver ceiling(kChunkBytes);
  for (auto& b : buffers) ceiling.map(b.data(), size);

  std::mutex mutex;
  std::condition_variable changed;
  std::vector<Sample> samples;
  std::atomic<modelcast::Consumer*> self{nullptr};

  modelcast::ConsumerOptions options;
  options.producer_endpoint = endpoint;
  options.model_name = kModelName;
  options.consumer_name = "bench-consumer-" + std::to_string(index);
  if (owned) {
    options.buffers = buffer_count;
  } else {
    for (auto& b : buffers) options.caller_buffers.emplace_back(b.data(), size);
  }
  // Runs on the consumer's service thread right after the install, before it reads the next
  // announcement: last_notify_latency still belongs to this version.
  options.on_update = [&](const modelcast::ModelView& view) {
    Sample s{view.version(), view.update_latency().count(), 0, true};
    if (auto* consumer = self.load()) s.notify_ns = consumer->stats().last_notify_latency.count();
    for (const auto& tensor : view.tensors()) {
      std::uint64_t word = 0;
      std::memcpy(&word, tensor.data, sizeof word);
      if (stamped && word != view.version()) s.content_ok = false;
    }
    std::lock_guard lock(mutex);
    samples.push_back(s);
    changed.notify_all();
  };
  modelcast::Consumer consumer(options);
  self = &consumer;
  bench::write_line(bench::kParentWriteFd, "addr " + ceiling.address());

  // The serving reader (thread `server`) owns serve_ms until `serving` is cleared and it is joined.
  // It is paused (between two passes) while the parent measures its ceilings: a pass that shared
  // the machine with the benchmark's own transfer and copies is no measure of modelcast's
  // interference. `paused`, `in_pass` and `serving` are under serve_mutex.
  std::vector<double> serve_idle_ms, serve_ms;
  std::mutex serve_mutex;
  std::condition_variable serve_cv;
  bool serving = false, paused = false, in_pass = false;
  std::thread server;
  std::string pending;
  for (;;) {
    std::optional<std::string> line;
    ceiling.wait_for_command(bench::kParentReadFd, pending, line);
    if (line->rfind("serve-idle ", 0) == 0) {
      for (int i = std::stoi(line->substr(11)); i > 0; --i) serve_idle_ms.push_back(serve_pass(consumer));
      serving = true;
      server = std::thread([&] {
        for (;;) {
          {
            std::unique_lock lock(serve_mutex);
            serve_cv.wait(lock, [&] { return !paused || !serving; });
            if (!serving) return;
            in_pass = true;
          }
          const double ms = serve_pass(consumer);
          {
            std::lock_guard lock(serve_mutex);
            in_pass = false;
            serve_ms.push_back(ms);
          }
          serve_cv.notify_all();
        }
      });
      bench::write_line(bench::kParentWriteFd, "serving");
    } else if (*line == "pause" || *line == "resume") {
      {
        std::unique_lock lock(serve_mutex);
        paused = *line == "pause";
        if (paused) serve_cv.wait(lock, [&] { return !in_pass; });
      }
      serve_cv.notify_all();
      if (*line == "pause") bench::write_line(bench::kParentWriteFd, "paused");
    } else if (line->rfind("ceiling ", 0) == 0) {
      // The buffer the current version does not live in; modelcast writes into it only
      // during a fetch, and none runs between the producer's versions.
      auto view = consumer.acquire();
      const std::byte* current = view ? static_cast<const std::byte*>(view.tensors().front().data) : nullptr;
      std::byte* target = nullptr;
      for (auto& b : buffers) {
        if (owned || !(current >= b.data() && current < b.data() + size)) target = b.data();
      }
      ceiling.receive(std::stoi(line->substr(8)), target, size, bench::kParentWriteFd);
    } else if (line->rfind("finish ", 0) == 0) {
      std::uint64_t versions = std::stoull(line->substr(7));
      std::unique_lock lock(mutex);
      bool all = changed.wait_for(lock, 300s, [&] { return !samples.empty() && samples.back().version >= versions; });
      if (!all) {
        std::fprintf(stderr, "bench consumer %d: version %llu did not arrive (%s)\n", index,
                     static_cast<unsigned long long>(versions), consumer.stats().last_error.c_str());
        return 1;
      }
      lock.unlock();
      if (server.joinable()) {
        {
          std::lock_guard serve_lock(serve_mutex);
          serving = false;
        }
        serve_cv.notify_all();
        server.join();
        std::string report = "serve";
        for (double ms : serve_idle_ms) report += " i" + std::to_string(ms);
        for (double ms : serve_ms) report += " b" + std::to_string(ms);
        bench::write_line(bench::kParentWriteFd, report);
      }
      lock.lock();
      for (const auto& s : samples) {
        bench::write_line(bench::kParentWriteFd, "sample " + std::to_string(s.version) + " " +
                                                     std::to_string(s.update_ns) + " " + std::to_string(s.notify_ns) +
                                                     " " + (s.content_ok ? "1" : "0"));
      }
      // Every byte of the last version, hashed off the clock: a delta that assembled the wrong
      // bytes shows here even where the per-version stamp check cannot look.
      std::uint64_t digest = 0;
      auto view = consumer.acquire();
      for (const auto& tensor : view.tensors()) digest ^= modelcast::digest_bytes(tensor.data, tensor.size_bytes());
      bench::write_line(bench::kParentWriteFd, "digest " + std::to_string(view.version()) + " " + std::to_string(digest));
      bench::write_line(bench::kParentWriteFd, "end");
      return 0;
    } else {
      std::fprintf(stderr, "bench consumer %d: unknown command '%s'\n", index, line->c_str());
      return 2;
    }
  }
}

volatile std::uint64_t digest_sink = 0;

// ---- producer side: the exchange -----------------------------------------------------------

struct ExchangeResult {
  std::vector<double> update_ms;    // per measured version: max over consumers
  std::vector<double> delivery_ms;  // per measured version: max on_delivery since_publish (incl. the ack's trip)
  std::vector<double> stall_ms;
  std::vector<double> memcpy_ms;
  std::vector<double> tensor_copy_ms;  // diagnostic: the same bytes copied tensor by tensor, as publish() does
  std::vector<double> xxh3_ms;         // diagnostic: modelcast's XXH3-64 (digest_bytes) over every tensor once (one side's digest work)
  std::vector<double> notify_us;    // per measured version per consumer
  std::vector<double> ceiling_ms;   // the UCX ceiling, one transfer right before each version
  std::vector<double> notify_after_stall_us;  // per version per consumer: notify minus that version's stall
  std::vector<double> wire_bytes;   // per measured version per consumer: Delivery::bytes
  std::vector<double> serve_idle_ms, serve_ms;  // the serving reader's passes (serve rows only)
  int bad_content = 0;
};

ExchangeResult measure_exchange(Model& model, std::size_t size, int consumers, int warmup, int reps,
                                std::size_t slots, std::size_t buffers, bool integrity, int changed_pct, bool serve) {
  std::mutex mutex;
  std::condition_variable delivered_cv;
  std::map<std::uint64_t, std::vector<double>> delivered;  // version -> since_publish ms per consumer
  std::map<std::uint64_t, std::vector<double>> sent;       // version -> bytes sent per consumer

  modelcast::ProducerOptions options;
  options.model_name = kModelName;
  options.control_endpoint = "tcp://127.0.0.1:0";
  options.snapshot_slots = slots;
  options.integrity = integrity;
  options.transfer_chunk_bytes = kChunkBytes;
  options.on_delivery = [&](const modelcast::Delivery& d) {
    std::lock_guard lock(mutex);
    delivered[d.version].push_back(to_ms(d.since_publish));
    sent[d.version].push_back(static_cast<double>(d.bytes));
    delivered_cv.notify_all();
  };
  modelcast::Producer producer(options);
  for (auto& t : model.tensors) producer.register_tensor(t);
  producer.prepare();

  bench::TouchedBuffer copy_target(size);  // memcpy target, then the ceiling's send buffer
  bench::UcpSender ceiling(copy_target.data(), size, kChunkBytes);
  std::string self = bench::self_exe();
  int total = warmup + reps;
  std::vector<bench::Child> children;
  auto cleanup = [&] {
    for (auto& child : children) {
      if (child.pid > 0) kill(child.pid, SIGTERM);
      bench::reap(child);
    }
    children.clear();
  };
  ExchangeResult result;
  try {
    for (int i = 0; i < consumers; ++i) {
      children.push_back(bench::spawn_child({self, "consumer", "--endpoint", producer.control_endpoint(), "--index",
                                             std::to_string(i), "--size", std::to_string(size), "--buffers",
                                             // A reader holds a view through each pass: a third
                                             // buffer lets a version land meanwhile.
                                             std::to_string(serve ? std::max<std::size_t>(buffers, 3) : buffers),
                                             "--stamped", changed_pct >= 100 ? "1" : "0",
                                             "--owned", changed_pct < 100 || serve ? "1" : "0"}));
    }
    for (auto& child : children) {
      auto line = bench::read_line(child.from_child, child.pending, 300000);
      if (!line || line->rfind("addr ", 0) != 0) throw std::runtime_error("a consumer process did not start");
      ceiling.connect(line->substr(5));
    }
    if (!producer.wait_for_consumers(static_cast<std::size_t>(consumers), 120s)) {
      throw std::runtime_error("consumers did not join within 120 s");
    }
    std::map<std::uint64_t, double> stall;
    for (int v = 1; v <= total; ++v) {
      if (serve && v == warmup + 1) {
        for (auto& child : children) bench::write_line(child.to_child, "serve-idle 20");
        for (auto& child : children) {
          auto line = bench::read_line(child.from_child, child.pending, 300000);
          if (!line || *line != "serving") throw std::runtime_error("the serving reader did not start");
        }
      }
      // Serving passes count while versions arrive, not while the ceilings below run.
      const bool pause_serving = serve && v > warmup;
      if (pause_serving) {
        for (auto& child : children) bench::write_line(child.to_child, "pause");
        for (auto& child : children) {
          auto line = bench::read_line(child.from_child, child.pending, 300000);
          if (!line || *line != "paused") throw std::runtime_error("the serving reader did not pause");
        }
      }
      double ceiling_ms = ceiling.transfer(v, children);
      auto t0 = bench::steady_ns();
      std::memcpy(copy_target.data(), model.storage.data(), size);
      double copy_ms = static_cast<double>(bench::steady_ns() - t0) / 1e6;
      t0 = bench::steady_ns();
      for (std::size_t i = 0; i < model.tensors.size(); ++i) {
        std::memcpy(copy_target.data() + model.offsets[i], model.tensors[i].data, model.tensors[i].spec.size_bytes());
      }
      double tensor_copy_ms = static_cast<double>(bench::steady_ns() - t0) / 1e6;
      t0 = bench::steady_ns();
      std::uint64_t digest = 0;
      for (std::size_t i = 0; i < model.tensors.size(); ++i) {
        digest ^= modelcast::digest_bytes(copy_target.data() + model.offsets[i], model.tensors[i].spec.size_bytes());
      }
      double xxh3_ms = static_cast<double>(bench::steady_ns() - t0) / 1e6;
      digest_sink = digest;
      model.stamp(static_cast<std::uint64_t>(v), changed_pct, kChunkBytes, size);
      if (pause_serving) {
        for (auto& child : children) bench::write_line(child.to_child, "resume");
      }
      auto called = bench::realtime_ns();
      auto ticket = producer.publish(v);
      if (std::getenv("BENCH_TRACE")) {  // lines comparable with MODELCAST_LOG_LEVEL=debug's timestamps
        auto t = static_cast<std::time_t>(called / 1000000000);
        std::tm tm{};
        localtime_r(&t, &tm);
        std::fprintf(stderr, "[%02d:%02d:%02d.%03d] bench: publish(v%d) called, returned after %.1f ms\n", tm.tm_hour,
                     tm.tm_min, tm.tm_sec, static_cast<int>(called / 1000000 % 1000), v, to_ms(ticket.stall));
      }
      if (ticket.version != static_cast<std::uint64_t>(v)) throw std::runtime_error("unexpected version numbering");
      std::unique_lock lock(mutex);
      if (!delivered_cv.wait_for(lock, 300s, [&] { return delivered[ticket.version].size() >= static_cast<std::size_t>(consumers); })) {
        throw std::runtime_error("version " + std::to_string(v) + " did not reach every consumer in 300 s");
      }
      if (v > warmup) {
        result.stall_ms.push_back(to_ms(ticket.stall));
        result.memcpy_ms.push_back(copy_ms);
        result.ceiling_ms.push_back(ceiling_ms);
        result.tensor_copy_ms.push_back(tensor_copy_ms);
        result.xxh3_ms.push_back(xxh3_ms);
        result.delivery_ms.push_back(*std::max_element(delivered[ticket.version].begin(), delivered[ticket.version].end()));
        for (double bytes : sent[ticket.version]) result.wire_bytes.push_back(bytes);
      }
    }
    std::map<std::uint64_t, double> update;  // version -> max over consumers
    for (auto& child : children) bench::write_line(child.to_child, "finish " + std::to_string(total));
    for (auto& child : children) {
      for (;;) {
        auto line = bench::read_line(child.from_child, child.pending, 120000);
        if (!line) throw std::runtime_error("a consumer process stopped reporting");
        if (*line == "end") break;
        if (line->rfind("serve ", 0) == 0) {
          std::istringstream words(line->substr(6));
          std::string word;
          while (words >> word) (word[0] == 'i' ? result.serve_idle_ms : result.serve_ms).push_back(std::stod(word.substr(1)));
          continue;
        }
        if (line->rfind("digest ", 0) == 0) {
          std::istringstream words(line->substr(7));
          std::uint64_t version = 0, digest = 0;
          words >> version >> digest;
          if (version != static_cast<std::uint64_t>(total) || digest != model.digest()) result.bad_content++;
          continue;
        }
        std::istringstream in(*line);
        std::string word;
        std::uint64_t version = 0;
        std::int64_t update_ns = 0, notify_ns = 0;
        int ok = 0;
        in >> word >> version >> update_ns >> notify_ns >> ok;
        if (!ok) result.bad_content++;
        if (version <= static_cast<std::uint64_t>(warmup)) continue;
        update[version] = std::max(update[version], static_cast<double>(update_ns) / 1e6);
        result.notify_us.push_back(static_cast<double>(notify_ns) / 1e3);
        std::size_t measured = version - static_cast<std::uint64_t>(warmup) - 1;
        if (measured < result.stall_ms.size()) {
          result.notify_after_stall_us.push_back(static_cast<double>(notify_ns) / 1e3 - result.stall_ms[measured] * 1e3);
        }
      }
    }
    for (auto& [version, ms] : update) result.update_ms.push_back(ms);
    for (auto& child : children) {
      if (!bench::reap(child)) throw std::runtime_error("a consumer process failed");
    }
    children.clear();
  } catch (...) {
    cleanup();
    throw;
  }
  return result;
}

json summary(std::size_t size, int consumers, const std::string& transport, int changed_pct, const ExchangeResult& x,
             const std::vector<double>& file) {
  const auto& ceiling = x.ceiling_ms;
  auto number = [](double v) { return std::isnan(v) ? json(nullptr) : json(std::round(v * 1000) / 1000); };
  json row;
  row["size_bytes"] = size;
  row["consumers"] = consumers;
  row["transport"] = transport;
  row["update_ms"] = number(bench::median(x.update_ms));
  row["stall_ms"] = number(bench::median(x.stall_ms));
  row["memcpy_ms"] = number(bench::median(x.memcpy_ms));
  row["ucx_ceiling_ms"] = number(bench::median(ceiling));
  row["file_baseline_ms"] = number(bench::median(file));
  row["notify_us_p99"] = number(bench::percentile(x.notify_us, 99));
  row["changed_pct"] = changed_pct;
  row["wire_bytes"] = number(bench::median(x.wire_bytes));
  if (!x.serve_ms.empty()) {
    row["serve_p99_ms"] = number(bench::percentile(x.serve_ms, 99));
    row["serve_idle_p99_ms"] = number(bench::percentile(x.serve_idle_ms, 99));
  }
  json extra;
  extra["update_ms_samples"] = x.update_ms;
  extra["delivery_ms_samples"] = x.delivery_ms;
  extra["delivery_ms"] = number(bench::median(x.delivery_ms));
  extra["stall_ms_samples"] = x.stall_ms;
  extra["memcpy_ms_samples"] = x.memcpy_ms;
  extra["ucx_ceiling_ms_samples"] = ceiling;
  extra["file_baseline_ms_samples"] = file;
  extra["tensor_copy_ms"] = number(bench::median(x.tensor_copy_ms));
  extra["tensor_copy_ms_samples"] = x.tensor_copy_ms;
  extra["xxh3_ms"] = number(bench::median(x.xxh3_ms));
  extra["xxh3_ms_samples"] = x.xxh3_ms;
  extra["notify_us_samples"] = x.notify_us;
  extra["notify_us_median"] = number(bench::median(x.notify_us));
  extra["notify_after_stall_us_median"] = number(bench::median(x.notify_after_stall_us));
  // Ratios of paired samples (same repetition, same machine load), then the median.
  std::vector<double> stall_over_memcpy, update_over_bound;
  for (std::size_t i = 0; i < x.stall_ms.size() && i < x.memcpy_ms.size(); ++i) {
    stall_over_memcpy.push_back(x.stall_ms[i] / x.memcpy_ms[i]);
  }
  for (std::size_t i = 0; changed_pct >= 100 && i < x.update_ms.size() && i < x.stall_ms.size() && i < x.ceiling_ms.size();
       ++i) {
    update_over_bound.push_back(x.update_ms[i] / (x.stall_ms[i] + 1.25 * x.ceiling_ms[i]));
  }
  extra["paired_stall_over_memcpy"] = number(bench::median(stall_over_memcpy));
  extra["paired_update_over_bound"] = number(bench::median(update_over_bound));
  extra["wire_bytes_samples"] = x.wire_bytes;
  extra["serve_ms_samples"] = x.serve_ms;
  extra["serve_idle_ms_samples"] = x.serve_idle_ms;
  extra["bad_content"] = x.bad_content;
  row["extra"] = extra;
  return row;
}

struct RunOptions {
  std::string transport = "shm";
  std::vector<std::size_t> sizes_mib = {16, 256, 1024};
  std::vector<int> consumers = {1, 4};
  std::vector<int> changed_pcts = {0, 1, 10, 100};
  bool serve = true;
  int reps = 7;
  int warmup = 2;
  int file_reps = 5;
  std::size_t buffers = 2;
  std::size_t slots = 0;  // 0: 3 up to 256 MiB, 2 above
  bool no_integrity = false;
  std::string tmpdir = "build-bench/tmp/exchange";
  std::string out;
};

int run(const RunOptions& o) {
  json rows = json::array();
  auto save = [&] {
    if (o.out.empty()) return;
    std::ofstream(o.out) << rows.dump(2) << "\n";
  };
  for (auto mib : o.sizes_mib) {
    std::size_t size = mib << 20;
    Model model(size);
    for (int consumers : o.consumers) {
     for (int pct : o.changed_pcts) {
      // Delta rows (below 100 %) for one consumer: the fan-out rows are whole updates.
      if (pct < 100 && consumers != 1) continue;
      // The serving reader shares the cores with the transfer: its row is a run of its own, so
      // the plain row's update, stall and notify figures stay comparable.
      for (bool serve : {false, true}) {
      if (serve && (consumers != 1 || pct < 100 || !o.serve)) continue;
      progress("[%s] %zu MiB, %d consumer(s), %d %% changed%s: ", o.transport.c_str(), mib, consumers, pct,
               serve ? ", serving" : "");
      auto t0 = bench::steady_ns();
      std::size_t slots = o.slots ? o.slots : (mib > 256 ? 2 : 3);
      auto x =
          measure_exchange(model, size, consumers, o.warmup, o.reps, slots, o.buffers, !o.no_integrity, pct, serve);
      progress("update %.1f ms, stall %.1f ms, memcpy %.1f ms, ceiling %.1f ms, wire %.1f MiB; ",
               bench::median(x.update_ms), bench::median(x.stall_ms), bench::median(x.memcpy_ms),
               bench::median(x.ceiling_ms), bench::median(x.wire_bytes) / (1 << 20));
      std::vector<double> file, file_write;
      if (o.file_reps > 0 && pct >= 100 && !serve) {
        file = bench::measure_file_baseline(model.storage.data(), size, consumers, o.tmpdir, o.file_reps, &file_write);
        progress("file %.1f ms; ", bench::median(file));
      }
      progress("(%.1f s)\n", static_cast<double>(bench::steady_ns() - t0) / 1e9);
      auto row = summary(size, consumers, o.transport, pct, x, file);
      row["serving"] = serve;
      row["extra"]["file_write_fsync_ms"] = bench::median(file_write);
      row["extra"]["file_write_fsync_ms_samples"] = file_write;
      row["extra"]["snapshot_slots"] = slots;
      row["extra"]["consumer_buffers"] = o.buffers;
      row["extra"]["integrity"] = !o.no_integrity;
      row["extra"]["tensors"] = model.tensors.size();
      row["extra"]["warmup_versions"] = o.warmup;
      if (x.bad_content) throw std::runtime_error("a consumer saw the wrong content");
      rows.push_back(row);
      save();
      }
     }
    }
  }
  if (o.out.empty()) std::printf("%s\n", rows.dump(2).c_str());
  return 0;
}

// ---- report --------------------------------------------------------------------------------

double field(const json& row, const char* name) {
  return row.contains(name) && row[name].is_number() ? row[name].get<double>() : std::nan("");
}

int report(const std::vector<std::string>& files, bool as_json) {
  json rows = json::array();
  for (const auto& file : files) {
    std::ifstream in(file);
    if (!in) throw std::runtime_error("cannot read " + file);
    json part = json::parse(in);
    for (auto& row : part) rows.push_back(row);
  }
  std::stable_sort(rows.begin(), rows.end(), [](const json& a, const json& b) {
    auto pct = [](const json& row) { return row.contains("changed_pct") ? row["changed_pct"].get<int>() : 100; };
    auto serving = [](const json& row) { return row.value("serving", false); };
    return std::tuple(a["size_bytes"].get<std::size_t>(), a["consumers"].get<int>(), pct(a), serving(a)) <
           std::tuple(b["size_bytes"].get<std::size_t>(), b["consumers"].get<int>(), pct(b), serving(b));
  });
  if (as_json) {
    json out = json::array();
    const char* fields[] = {"size_bytes", "consumers", "transport", "changed_pct", "serving", "update_ms", "stall_ms",
                            "memcpy_ms", "ucx_ceiling_ms", "file_baseline_ms", "notify_us_p99", "wire_bytes",
                            "serve_p99_ms", "serve_idle_p99_ms"};
    for (auto& row : rows) {
      json o = json::object();
      for (auto* f : fields) o[f] = row.contains(f) ? row[f] : json(nullptr);
      out.push_back(o);
    }
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  auto pct_of = [](const json& row) { return row.contains("changed_pct") ? row["changed_pct"].get<int>() : 100; };
  std::printf("rows marked + ran with the serving reader (serve_p99 / serve_idle_p99 ms at the end)\n");
  std::printf("%-8s %4s %-4s %4s %10s %9s %9s %10s %10s %13s %9s | %12s %19s %11s\n", "size", "cons", "tpt", "chg%",
              "update_ms", "stall_ms", "memcpy_ms", "ceiling_ms", "file_ms", "notify_p99_us", "wire_MiB",
              "stall/memcpy", "update/(st+1.25ce)", "file/update");
  for (auto& row : rows) {
    double size = static_cast<double>(row["size_bytes"].get<std::size_t>());
    double update = field(row, "update_ms"), stall = field(row, "stall_ms"), copy = field(row, "memcpy_ms");
    double ceiling = field(row, "ucx_ceiling_ms"), file = field(row, "file_baseline_ms");
    double notify = field(row, "notify_us_p99");
    std::string label = size >= (1u << 30) ? std::to_string(static_cast<int>(size / (1u << 30))) + " GiB"
                                           : std::to_string(static_cast<int>(size / (1u << 20))) + " MiB";
    std::printf("%-8s %4d %-4s %3d%s %10.1f %9.1f %9.1f %10.1f %10.1f %13.0f %9.1f | %12.2f %19.2f %11.1f", label.c_str(),
                row["consumers"].get<int>(), row["transport"].get<std::string>().c_str(), pct_of(row),
                row.value("serving", false) ? "+" : " ", update, stall, copy, ceiling, file, notify,
                field(row, "wire_bytes") / (1 << 20), stall / copy,
                // The ceiling sends the whole model: against a delta's few blocks it bounds nothing.
                pct_of(row) >= 100 ? update / (stall + 1.25 * ceiling) : std::nan(""), file / update);
    if (row.contains("serve_p99_ms")) {
      std::printf("   serve %.1f / idle %.1f", field(row, "serve_p99_ms"), field(row, "serve_idle_p99_ms"));
    }
    std::printf("\n");
  }
  std::printf("\ndiagnostics (medians): tensor_copy = the memcpy done tensor by tensor as publish() does; xxh3 = "
              "XXH3-64 over the model once (the digest work on each side); delivery = publish() until the last ack "
              "(on_delivery); notify-stall = notify minus that version's stall; paired = median of per-repetition ratios; file_write = write + fsync\n");
  std::printf("%-8s %4s %-4s %15s %9s %12s %13s %17s %12s %14s %15s %14s\n", "size", "cons", "tpt", "tensor_copy_ms",
              "xxh3_ms", "delivery_ms", "notify_us_p50", "notify-stall_us", "stall/tcopy", "paired st/mc",
              "paired up/bound", "file_write_ms");
  for (auto& row : rows) {
    double size = static_cast<double>(row["size_bytes"].get<std::size_t>());
    const json& extra = row.contains("extra") ? row["extra"] : json::object();
    double tcopy = field(extra, "tensor_copy_ms");
    std::string label = size >= (1u << 30) ? std::to_string(static_cast<int>(size / (1u << 30))) + " GiB"
                                           : std::to_string(static_cast<int>(size / (1u << 20))) + " MiB";
    std::printf("%-8s %4d %-4s %15.1f %9.1f %12.1f %13.0f %17.0f %12.2f %14.2f %15.2f %14.1f\n", label.c_str(),
                row["consumers"].get<int>(), row["transport"].get<std::string>().c_str(), tcopy,
                field(extra, "xxh3_ms"), field(extra, "delivery_ms"), field(extra, "notify_us_median"),
                field(extra, "notify_after_stall_us_median"), field(row, "stall_ms") / tcopy,
                field(extra, "paired_stall_over_memcpy"), field(extra, "paired_update_over_bound"),
                field(extra, "file_write_fsync_ms"));
  }
  // The targets the exchange was built to meet.
  auto find = [&](int consumers, int pct = 100, const std::string& transport = "shm",
                  bool serving = false) -> const json* {
    for (auto& row : rows) {
      if (row["size_bytes"].get<std::size_t>() == (std::size_t{1} << 30) && row["consumers"].get<int>() == consumers &&
          row["transport"].get<std::string>() == transport && pct_of(row) == pct &&
          row.value("serving", false) == serving) {
        return &row;
      }
    }
    return nullptr;
  };
  auto verdict = [](bool met) { return met ? "met" : "NOT met"; };
  std::printf("\ntargets (1 GiB, shm):\n");
  if (const json* r = find(1)) {
    double update = field(*r, "update_ms"), stall = field(*r, "stall_ms"), copy = field(*r, "memcpy_ms");
    double ceiling = field(*r, "ucx_ceiling_ms"), file = field(*r, "file_baseline_ms"), notify = field(*r, "notify_us_p99");
    std::printf("  1 consumer:  update_ms %.1f <= stall_ms + 1.25 * ucx_ceiling_ms = %.1f: %s\n", update,
                stall + 1.25 * ceiling, verdict(update <= stall + 1.25 * ceiling));
    std::printf("  1 consumer:  stall_ms %.1f <= 1.2 * memcpy_ms = %.1f: %s\n", stall, 1.2 * copy,
                verdict(stall <= 1.2 * copy));
    std::printf("  1 consumer:  file_baseline_ms %.1f >= 5 * update_ms = %.1f: %s\n", file, 5 * update,
                verdict(file >= 5 * update));
    std::printf("  1 consumer:  notify_us_p99 %.0f <= 1000: %s\n", notify, verdict(notify <= 1000));
  }
  if (const json* r = find(4)) {
    double stall = field(*r, "stall_ms"), copy = field(*r, "memcpy_ms");
    std::printf("  4 consumers: stall_ms %.1f <= 1.2 * memcpy_ms = %.1f: %s\n", stall, 1.2 * copy,
                verdict(stall <= 1.2 * copy));
  }
  for (const std::string transport : {"shm", "tcp"}) {
    const json* full = find(1, 100, transport);
    if (const json* served = find(1, 100, transport, true); served && served->contains("serve_p99_ms")) {
      double serve = field(*served, "serve_p99_ms"), idle = field(*served, "serve_idle_p99_ms");
      std::printf("  serving, %s: serve_p99_ms %.1f <= 1.1 * serve_idle_p99_ms = %.1f: %s\n", transport.c_str(), serve,
                  1.1 * idle, verdict(serve <= 1.1 * idle));
    }
    const json* tenth = find(1, 10, transport);
    if (!full || !tenth) continue;
    double size = static_cast<double>((*tenth)["size_bytes"].get<std::size_t>());
    double wire = field(*tenth, "wire_bytes"), update = field(*tenth, "update_ms"), whole = field(*full, "update_ms");
    std::printf("  delta, %s: 10 %% changed: wire %.1f %% of the model <= 12 %%: %s; update_ms %.1f <= 0.25 * %.1f: %s\n",
                transport.c_str(), 100 * wire / size, verdict(wire <= 0.12 * size), update, whole,
                verdict(update <= 0.25 * whole));
    if (const json* none = find(1, 0, transport)) {
      std::printf("  delta, %s: nothing changed: wire %.0f bytes, update_ms %.1f\n", transport.c_str(),
                  field(*none, "wire_bytes"), field(*none, "update_ms"));
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"modelcast-exchange-bench: the exchange benchmark (bench/run.sh exchange)"};
  app.require_subcommand(1);
  RunOptions o;
  auto* run_cmd = app.add_subcommand("run", "measure every configuration under the current UCX environment");
  run_cmd->add_option("--transport", o.transport, "label of the UCX environment this runs under (shm, tcp)");
  // Bounded: a size or count below 1 crashed the run (or hung it, for a negative count).
  run_cmd->add_option("--sizes-mib", o.sizes_mib, "model sizes in MiB (1 to 1048576)")
      ->delimiter(',')
      ->check(CLI::Range(1, 1 << 20));
  run_cmd->add_option("--consumers", o.consumers, "consumer process counts (1 to 256)")
      ->delimiter(',')
      ->check(CLI::Range(1, 256));
  run_cmd->add_flag("!--no-serve", o.serve, "skip the serving reader's rows");
  run_cmd->add_option("--changed-pct", o.changed_pcts,
                      "shares of blocks each version changes (below 100: delta rows, one consumer only)")
      ->delimiter(',')
      ->check(CLI::Range(0, 100));
  run_cmd->add_option("--reps", o.reps, "measured versions / repetitions")->check(CLI::Range(1, 1000));
  run_cmd->add_option("--warmup", o.warmup, "warm-up versions (receive buffers are allocated in these)")
      ->check(CLI::Range(0, 100));
  run_cmd->add_option("--file-reps", o.file_reps, "file baseline repetitions (0: skip)")->check(CLI::Range(0, 100));
  run_cmd->add_option("--buffers", o.buffers, "consumer receive buffers")->check(CLI::Range(2, 8));
  run_cmd->add_option("--slots", o.slots, "producer snapshot slots (0: 3 up to 256 MiB, 2 above)");
  run_cmd->add_flag("--no-integrity", o.no_integrity, "switch integrity (the block digests) off");
  run_cmd->add_option("--tmpdir", o.tmpdir, "directory on the local disk for the file baseline");
  run_cmd->add_option("--out", o.out, "write the JSON here (after every configuration) instead of stdout");

  std::vector<std::string> files;
  bool as_json = false;
  auto* report_cmd = app.add_subcommand("report", "merge result files; print the table (or the JSON)");
  report_cmd->add_option("files", files)->required();
  report_cmd->add_flag("--json", as_json, "print the JSON array of the issue");

  std::string endpoint;
  int index = 0;
  std::size_t buffers = 2;
  auto* consumer_cmd = app.add_subcommand("consumer", "(child) one consumer process");
  consumer_cmd->add_option("--endpoint", endpoint)->required();
  consumer_cmd->add_option("--index", index);
  std::size_t size = 0;
  consumer_cmd->add_option("--size", size)->required();
  consumer_cmd->add_option("--buffers", buffers);
  int stamped = 1, owned = 0;
  consumer_cmd->add_option("--stamped", stamped, "1: each tensor's first word is the version (check it)");
  consumer_cmd->add_option("--owned", owned, "1: modelcast's own receive buffers (the ceiling gets its own)");

  int reps = 0;
  std::string directory;
  auto* file_cmd = app.add_subcommand("file-read", "(child) reader of the file baseline");
  file_cmd->add_option("--dir", directory)->required();
  file_cmd->add_option("--size", size)->required();
  file_cmd->add_option("--reps", reps)->required();
  CLI11_PARSE(app, argc, argv);

  try {
    if (*run_cmd) return run(o);
    if (*report_cmd) return report(files, as_json);
    if (*consumer_cmd) return run_consumer(endpoint, index, size, buffers, stamped != 0, owned != 0);
    if (*file_cmd) return bench::run_file_reader(directory, size, reps);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "modelcast-exchange-bench: %s\n", e.what());
    return 1;
  }
  return 2;
}
