// The GPU benchmark: bench/run.sh gpu [--json] (see bench/gpu.sh).
//
// For each size, in one run: the ceilings measured here (one device-to-device copy of the size,
// pinned device-to-host and host-to-device, a host memcpy, the two digests an update takes (pmix64
// on the device over kTensors tensors, XXH3 on the host over the same bytes), and today's file
// practice: device to host, write + fsync, cold read, host to device), then each delivery path end to end with the
// consumer in a child process of this binary:
//   cuda_ipc   device producer -> device consumer, same host (the consumer maps the slot)
//   staged     device producer -> device consumer over UCX, staged through host memory
//   d2h        device producer -> host consumer (staged on the producer's side)
//   h2d        host producer -> device consumer (staged on the consumer's side)
// update_ms: publish() call until the version is visible to the consumer (its update latency,
// same-host realtime clocks); stall_ms: the time publish() blocked the caller. Medians of --reps.
// On the simulated device (MODELCAST_DEVICE=simulated) every figure is host memory traffic:
// the output says so, and such figures are not GPU figures.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "../exchange/common.h"
#include "common/digest.h"
#include "device/device_runtime.h"
#include "modelcast/consumer.h"
#include "modelcast/error.h"
#include "modelcast/producer.h"

using namespace std::chrono_literals;
namespace device = modelcast::device;
using modelcast::MemoryKind;

namespace {

constexpr int kTensors = 64;

double ms_since(std::int64_t start_ns) { return static_cast<double>(bench::steady_ns() - start_ns) / 1e6; }

// A model of `bytes` in kTensors f32 tensors, in device memory or host memory.
struct Model {
  device::DeviceRuntime* runtime = nullptr;
  std::vector<modelcast::TensorRef> refs;
  std::vector<void*> device_memory;
  std::vector<std::vector<float>> host_memory;
  // Device models: one tensor's new values in pinned memory and the stream that writes them
  // (change()), released with the model however a path ends.
  void* pinned = nullptr;
  void* stream = nullptr;

  Model(device::DeviceRuntime& rt, MemoryKind memory, std::size_t bytes) : runtime(&rt) {
    std::size_t per = bytes / kTensors / sizeof(float);
    try {
      for (int i = 0; i < kTensors; ++i) {
        modelcast::TensorSpec spec{"w" + std::to_string(i), modelcast::DType::kF32, {static_cast<std::int64_t>(per)},
                                   memory, 0};
        void* data = nullptr;
        if (memory == MemoryKind::kCuda) {
          data = rt.allocate(0, per * sizeof(float));
          device_memory.push_back(data);
        } else {
          host_memory.emplace_back(per, 1.0f);
          data = host_memory.back().data();
        }
        refs.push_back({spec, data});
      }
      if (memory == MemoryKind::kCuda) {
        pinned = rt.allocate_host(per * sizeof(float));
        stream = rt.create_stream(0);
      }
    } catch (...) {
      release();
      throw;
    }
  }
  ~Model() { release(); }
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // Every element becomes `value`, before each publish: a version equal to the one before is a
  // delta of no blocks for a host producer, and timed that way (the `h2d` row once was). Throws
  // if a device copy fails, rather than timing a version that did not change.
  void change(float value) {
    for (auto& h : host_memory) std::fill(h.begin(), h.end(), value);
    if (device_memory.empty()) return;
    const std::size_t bytes = refs.front().spec.size_bytes();
    std::fill_n(static_cast<float*>(pinned), bytes / sizeof(float), value);
    for (auto* p : device_memory) runtime->copy_async(p, pinned, bytes, stream);
    runtime->synchronize_stream(stream);
  }

 private:
  void release() noexcept {
    if (stream) runtime->destroy_stream(stream);  // waits for its copies
    if (pinned) runtime->release_host(pinned);
    for (auto* p : device_memory) runtime->release(p);
    stream = pinned = nullptr;
    device_memory.clear();
  }
};

struct Ceilings {
  double d2d_copy_ms = 0, d2h_ms = 0, h2d_ms = 0, host_ceiling_ms = 0, file_baseline_ms = 0;
  double device_digest_ms = 0, host_digest_ms = 0;
};

template <typename F>
double median_ms(int reps, F&& f) {
  std::vector<double> v;
  for (int r = 0; r < reps; ++r) {
    auto t0 = bench::steady_ns();
    f();
    v.push_back(ms_since(t0));
  }
  return bench::median(v);
}

// A file descriptor closed however its scope is left.
struct Fd {
  int fd;
  Fd(int descriptor, const std::string& what) : fd(descriptor) {
    if (fd < 0) throw std::runtime_error(what + ": " + std::strerror(errno));
  }
  ~Fd() { ::close(fd); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

Ceilings measure_ceilings(device::DeviceRuntime& rt, std::size_t bytes, int reps, const std::string& tmpdir) {
  Ceilings c;
  // Released however this returns: a size that does not fit must not leave memory behind for
  // the next one.
  struct Releases {
    std::vector<std::function<void()>> steps;
    ~Releases() {
      for (auto it = steps.rbegin(); it != steps.rend(); ++it) (*it)();
    }
  } releases;
  void* a = rt.allocate(0, bytes);
  releases.steps.push_back([&rt, a] { rt.release(a); });
  void* b = rt.allocate(0, bytes);
  releases.steps.push_back([&rt, b] { rt.release(b); });
  void* pinned = rt.allocate_host(bytes);
  releases.steps.push_back([&rt, pinned] { rt.release_host(pinned); });
  void* stream = rt.create_stream(0);
  releases.steps.push_back([&rt, stream] { rt.destroy_stream(stream); });
  std::memset(pinned, 1, bytes);
  rt.copy_async(a, pinned, bytes, stream);  // first touch, outside the timings
  rt.synchronize_stream(stream);
  c.d2d_copy_ms = median_ms(reps, [&] { rt.copy_async(b, a, bytes, stream); rt.synchronize_stream(stream); });
  c.d2h_ms = median_ms(reps, [&] { rt.copy_async(pinned, a, bytes, stream); rt.synchronize_stream(stream); });
  c.h2d_ms = median_ms(reps, [&] { rt.copy_async(a, pinned, bytes, stream); rt.synchronize_stream(stream); });
  {
    // The digests a device path takes on each side (one range per tensor, as the producer's
    // snapshot has them): what an update costs beyond its copies.
    std::vector<device::ByteRange> ranges;
    const std::size_t per = bytes / kTensors;
    for (int i = 0; i < kTensors; ++i) ranges.push_back({static_cast<std::size_t>(i) * per, per});
    c.device_digest_ms = median_ms(reps, [&] { rt.digest(0, a, ranges, stream); });
  }
  {
    bench::TouchedBuffer x(bytes), y(bytes);
    c.host_ceiling_ms = median_ms(reps, [&] { std::memcpy(y.data(), x.data(), bytes); });
    volatile std::uint64_t sink = 0;
    c.host_digest_ms = median_ms(reps, [&] { sink = sink + modelcast::digest_bytes(x.data(), bytes); });
  }
  std::filesystem::create_directories(tmpdir);
  std::string path = tmpdir + "/gpu-file-baseline.bin";
  // A write that fails (a full disk at 16 GiB) leaves no partial file behind.
  releases.steps.push_back([path] { std::filesystem::remove(path); });
  c.file_baseline_ms = median_ms(reps, [&] {
    rt.copy_async(pinned, a, bytes, stream);
    rt.synchronize_stream(stream);
    {
      Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600), "open " + path);
      for (std::size_t done = 0; done < bytes;) {
        auto n = ::write(fd.fd, static_cast<char*>(pinned) + done, bytes - done);
        if (n <= 0) throw std::runtime_error("write " + path + ": " + std::strerror(errno));
        done += static_cast<std::size_t>(n);
      }
      ::fsync(fd.fd);
      ::posix_fadvise(fd.fd, 0, 0, POSIX_FADV_DONTNEED);  // the read below is a cold read
    }
    Fd fd(::open(path.c_str(), O_RDONLY), "open " + path);
    for (std::size_t done = 0; done < bytes;) {
      auto n = ::read(fd.fd, static_cast<char*>(pinned) + done, bytes - done);
      if (n <= 0) throw std::runtime_error("read " + path + ": " + std::strerror(errno));
      done += static_cast<std::size_t>(n);
    }
    rt.copy_async(b, pinned, bytes, stream);
    rt.synchronize_stream(stream);
  });
  return c;
}

// Child: a consumer that reports each installed version's update latency to the parent.
int run_consumer(const std::string& endpoint, const std::string& memory, const std::string& transports) {
  modelcast::ConsumerOptions options;
  options.producer_endpoint = endpoint;
  options.model_name = "bench";
  options.memory = memory == "cuda" ? MemoryKind::kCuda : MemoryKind::kHost;
  options.transports = {};
  std::string t = transports;
  for (std::size_t at = 0; !t.empty();) {
    at = t.find(',');
    options.transports.push_back(t.substr(0, at));
    t = at == std::string::npos ? "" : t.substr(at + 1);
  }
  // Two buffers, the fewest a consumer swaps between: the parent publishes one version at a time,
  // and at 16 GiB every buffer counts against the GPU's memory.
  options.buffers = 2;
  options.on_update = [](const modelcast::ModelView& view) {
    bench::write_line(bench::kParentWriteFd, "installed " + std::to_string(view.version()) + " " +
                                                 std::to_string(view.update_latency().count()));
  };
  // A version the consumer cannot take (a buffer that does not fit on the device) ends the path
  // at once, saying why, instead of leaving the parent waiting for it.
  options.on_error = [](const modelcast::Error& e) {
    std::string what = e.what();
    for (auto& c : what) {
      if (c == '\n') c = ' ';
    }
    bench::write_line(bench::kParentWriteFd, "rejected " + what);
  };
  modelcast::Consumer consumer(options);
  std::string pending;
  while (bench::read_line(bench::kParentReadFd, pending, -1)) {
  }
  return 0;
}

struct PathResult {
  std::string path;
  double update_ms = 0, stall_ms = 0;
  std::string transport;
};

PathResult run_path(device::DeviceRuntime& rt, const std::string& path, std::size_t bytes, int reps) {
  MemoryKind producer_memory = path == "h2d" ? MemoryKind::kHost : MemoryKind::kCuda;
  std::string consumer_memory = path == "d2h" ? "host" : "cuda";
  std::string transports = path == "cuda_ipc" ? "cuda_ipc,ucx" : "ucx";
  modelcast::ProducerOptions options;
  options.model_name = "bench";
  options.control_endpoint = "tcp://127.0.0.1:0";
  options.snapshot_slots = 2;  // the fewest: one version at a time (see run_consumer)
  modelcast::Producer producer(options);
  Model model(rt, producer_memory, bytes);
  producer.register_tensors(model.refs);
  producer.prepare();
  auto child = bench::spawn_child({bench::self_exe(), "consume", "--endpoint", producer.control_endpoint(), "--memory",
                                   consumer_memory, "--transports", transports});
  // A path that fails ends its consumer at once: alive, it would hold its device buffers through
  // the next path's measurement.
  struct EndOnFailure {
    bench::Child& child;
    bool ended = false;
    ~EndOnFailure() {
      if (ended) return;
      if (child.pid > 0) ::kill(child.pid, SIGKILL);
      bench::reap(child);  // closes the pipes
    }
  } end_on_failure{child};
  if (!producer.wait_for_consumers(1, 60s)) throw std::runtime_error(path + ": the consumer did not join");
  std::vector<double> update, stall;
  for (int r = 0; r <= reps; ++r) {  // the first version warms up (allocations, mappings): not counted
    model.change(static_cast<float>(r + 1));
    auto ticket = producer.publish(r);
    std::optional<std::string> line;
    while ((line = bench::read_line(child.from_child, child.pending, 600000))) {
      if (line->rfind("installed " + std::to_string(ticket.version) + " ", 0) == 0) break;
      if (line->rfind("rejected ", 0) == 0) throw std::runtime_error(path + ": the consumer " + line->substr(0, 400));
    }
    if (!line) throw std::runtime_error(path + ": version " + std::to_string(ticket.version) + " never arrived");
    if (r == 0) continue;
    update.push_back(std::stod(line->substr(line->rfind(' ') + 1)) / 1e6);
    stall.push_back(std::chrono::duration<double, std::milli>(ticket.stall).count());
  }
  bench::reap(child);  // closing its input ends the consumer
  end_on_failure.ended = true;
  return {path, bench::median(update), bench::median(stall), transports};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"modelcast GPU benchmark"};
  std::vector<std::size_t> sizes{256, 1024, 4482, 16384};  // MiB: 4482 MiB is the 4.7 GB model
  std::vector<std::string> paths{"cuda_ipc", "staged", "d2h", "h2d"};
  int reps = 5;
  std::string tmpdir = "/tmp/modelcast-gpu-bench";
  bool json = false;
  // An unknown path ran as "staged" under its own label; a size of 0 ran.
  app.add_option("--sizes-mib", sizes, "model sizes in MiB (1 to 1048576)")->delimiter(',')->check(CLI::Range(1, 1 << 20));
  app.add_option("--paths", paths, "delivery paths: cuda_ipc, staged, d2h, h2d")
      ->delimiter(',')
      ->check(CLI::IsMember({"cuda_ipc", "staged", "d2h", "h2d"}));
  app.add_option("--reps", reps)->check(CLI::PositiveNumber);
  app.add_option("--tmpdir", tmpdir, "where the file baseline writes");
  app.add_flag("--json", json);
  auto* consume = app.add_subcommand("consume");  // the child
  std::string endpoint, memory = "cuda", transports = "ucx";
  consume->add_option("--endpoint", endpoint)->required();
  consume->add_option("--memory", memory);
  consume->add_option("--transports", transports);
  CLI11_PARSE(app, argc, argv);
  try {
    if (*consume) return run_consumer(endpoint, memory, transports);
    auto& rt = device::require_device_runtime("the GPU benchmark");
    std::cerr << "gpu: device runtime '" << rt.name() << "'"
              << (rt.name() == "simulated" ? " (host memory standing in for a GPU: these are NOT GPU figures)" : "")
              << "\n";
    nlohmann::json results = nlohmann::json::array();
    for (auto mib : sizes) {
      std::size_t bytes = mib << 20;
      // A size or a path that cannot run (its buffers do not fit the device) is reported in its
      // rows, and the other paths and sizes are still measured.
      auto failed = [&](const std::string& path, const std::string& what) {
        std::cerr << "gpu: " << mib << " MiB: " << path << " failed: " << what << "\n";
        results.push_back({{"size_bytes", bytes}, {"path", path}, {"device", rt.name()}, {"error", what}});
      };
      std::cerr << "gpu: " << mib << " MiB: ceilings\n";
      Ceilings c;
      try {
        c = measure_ceilings(rt, bytes, reps, tmpdir);
      } catch (const std::exception& e) {
        for (const auto& path : paths) failed(path, std::string("the ceilings: ") + e.what());
        continue;
      }
      for (const auto& path : paths) {
        std::cerr << "gpu: " << mib << " MiB: " << path << "\n";
        PathResult p;
        try {
          p = run_path(rt, path, bytes, reps);
        } catch (const std::exception& e) {
          failed(path, e.what());
          continue;
        }
        // The target of the staged paths (reported for every path, as a scale): the stall and
        // 1.3 times the slowest of the copies an update through host memory needs.
        const double bound_ms = p.stall_ms + 1.3 * std::max({c.d2h_ms, c.h2d_ms, c.host_ceiling_ms});
        results.push_back({{"size_bytes", bytes}, {"path", p.path}, {"device", rt.name()},
                           {"update_ms", p.update_ms}, {"stall_ms", p.stall_ms}, {"d2d_copy_ms", c.d2d_copy_ms},
                           {"d2h_ms", c.d2h_ms}, {"h2d_ms", c.h2d_ms}, {"host_ceiling_ms", c.host_ceiling_ms},
                           {"device_digest_ms", c.device_digest_ms}, {"host_digest_ms", c.host_digest_ms},
                           {"file_baseline_ms", c.file_baseline_ms}, {"reps", reps},
                           {"update_over_d2d", p.update_ms / c.d2d_copy_ms},
                           {"bound_ms", bound_ms}, {"update_over_bound", p.update_ms / bound_ms},
                           {"gb_per_s", static_cast<double>(bytes) / (p.update_ms * 1e6)},
                           {"file_over_update", c.file_baseline_ms / p.update_ms}});
      }
    }
    // Every row is printed; a row that failed also makes the exit status 3, so a script sees it.
    const int status = std::any_of(results.begin(), results.end(), [](const auto& r) { return r.contains("error"); }) ? 3 : 0;
    if (json) {
      std::cout << results.dump(2) << "\n";
      return status;
    }
    std::printf("%11s %9s %10s %9s %9s %9s %9s %9s %9s %9s %10s %9s %9s %9s %9s\n", "size_mib", "path",
                "update_ms", "stall_ms", "d2d_ms", "d2h_ms", "h2d_ms", "host_ms", "ddig_ms", "hdig_ms", "file_ms",
                "upd/bound", "upd/d2d", "file/upd", "GB/s");
    for (const auto& r : results) {
      if (r.contains("error")) {
        std::printf("%11zu %9s failed: %s\n", r["size_bytes"].get<std::size_t>() >> 20,
                    r["path"].get<std::string>().c_str(), r["error"].get<std::string>().c_str());
        continue;
      }
      std::printf("%11zu %9s %10.2f %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %10.1f %9.2f %9.2f %9.1f %9.1f\n",
                  r["size_bytes"].get<std::size_t>() >> 20, r["path"].get<std::string>().c_str(),
                  r["update_ms"].get<double>(), r["stall_ms"].get<double>(), r["d2d_copy_ms"].get<double>(),
                  r["d2h_ms"].get<double>(), r["h2d_ms"].get<double>(), r["host_ceiling_ms"].get<double>(),
                  r["device_digest_ms"].get<double>(), r["host_digest_ms"].get<double>(),
                  r["file_baseline_ms"].get<double>(), r["update_over_bound"].get<double>(),
                  r["update_over_d2d"].get<double>(), r["file_over_update"].get<double>(),
                  r["gb_per_s"].get<double>());
    }
    return status;
  } catch (const std::exception& e) {
    std::cerr << "gpu: " << e.what() << "\n";
    return 1;
  }
}
