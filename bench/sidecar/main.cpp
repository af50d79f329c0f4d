// The sidecar benchmark: bench/run.sh sidecar [--json] (see bench/sidecar.sh).
//
// One producer (this process), modelcastd (a child process, with a repository) and a direct
// Consumer (this process) subscribed side by side. Per version: update_ms through the daemon
// (publish() until a sidecar client has it) against the direct consumer's (publish() until
// installed), persist_ms (the daemon's write of the version, from its log) against
// disk_ceiling_ms (a plain write + fsync of the same bytes here); attach_us (a fresh client:
// connect, acquire, map, read one byte of the first and last tensor), reattach_us (the same
// client again: the mapping is cached), the client's resident growth before it reads, and
// bytes_copied_per_client (its anonymous memory growth after reading every byte: copies
// would land there, shared-memory pages do not).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <future>
#include <iostream>
#include <regex>
#include <string>
#include <thread>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "child_process.h"
#include "modelcast/consumer.h"
#include "modelcast/producer.h"
#include "modelcast/sidecar.h"
#include "test_model.h"

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kAttaches = 10;  // fresh clients per version

double ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// A field of /proc/self/status in KiB (VmRSS, RssAnon, ...).
long status_kib(const std::string& field) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(field + ":", 0) == 0) return std::stol(line.substr(field.size() + 1));
  }
  return -1;
}

// Reads a line of the daemon's log containing `text`; the whole line, or "" after 120 s.
std::string wait_for(testing_support::ChildProcess& child, const std::string& text) {
  while (auto line = child.read_line(120s)) {
    if (line->find(text) != std::string::npos) return *line;
  }
  return {};
}

double disk_ceiling_ms(const std::vector<testmodel::Tensor>& model, const std::string& path) {
  auto start = Clock::now();
  int fd = open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
  for (const auto& t : model) {
    const char* p = reinterpret_cast<const char*>(t.words.data());
    std::size_t left = t.spec.size_bytes();
    while (left > 0) {
      ssize_t n = write(fd, p, std::min<std::size_t>(left, 64u << 20));
      if (n <= 0) throw std::runtime_error("disk ceiling: write failed");
      p += n;
      left -= static_cast<std::size_t>(n);
    }
  }
  fsync(fd);
  close(fd);
  double took = ms(Clock::now() - start);
  unlink(path.c_str());
  return took;
}

nlohmann::json run_size(std::size_t mib, int reps, const std::string& tmp, const std::string& daemon_path) {
  auto model = testmodel::make(mib * 1024, 64);
  std::uint64_t bytes = 0;
  for (const auto& t : model) bytes += t.spec.size_bytes();
  modelcast::ProducerOptions producer_options;
  producer_options.model_name = "bench";
  producer_options.snapshot_slots = 2;
  producer_options.integrity = true;
  modelcast::Producer producer(producer_options);
  for (auto& t : model) producer.register_tensor({t.spec, t.words.data()});
  producer.prepare();

  std::string socket = tmp + "/attach.sock", repo = tmp + "/repo";
  std::ofstream(tmp + "/modelcastd.toml", std::ios::trunc)
      << "[daemon]\nsocket = \"" << socket << "\"\n[http]\nlisten = \"\"\n[repository]\npath = \"" << repo
      << "\"\nkeep = 2\n[[model]]\nname = \"bench\"\nendpoint = \"" << producer.control_endpoint()
      << "\"\nmax_model_bytes = " << bytes + (32u << 20) << "\nbuffers = 3\n";
  testing_support::ChildProcess daemon({daemon_path, "--config", tmp + "/modelcastd.toml"});
  if (wait_for(daemon, " ready ").empty()) throw std::runtime_error("modelcastd did not start");

  modelcast::ConsumerOptions consumer_options;
  consumer_options.producer_endpoint = producer.control_endpoint();
  consumer_options.model_name = "bench";
  consumer_options.buffers = 2;
  modelcast::Consumer direct(consumer_options);
  if (!producer.wait_for_consumers(2, 60s)) throw std::runtime_error("consumers did not join");
  modelcast::sidecar::Client client({socket, "bench", 30s});

  std::vector<double> update_daemon, update_direct, persist, ceiling, attach, reattach;
  double rss_attach_kib = 0, anon_read_kib = 0;
  // Version 1 is a warm-up, not counted: it allocates every receive buffer, the daemon's shared
  // memory and the repository's files (at 256 MiB it took 3-6x a later version).
  for (int rep = 1; rep <= reps + 1; ++rep) {
    const bool measured = rep > 1;
    auto version = static_cast<std::uint64_t>(rep);
    testmodel::fill(model, 1, version);
    auto t0 = Clock::now();
    producer.publish(rep);
    auto direct_done = std::async(std::launch::async, [&] {
      auto view = direct.wait_for_version(version, 120s);
      return view ? ms(Clock::now() - t0) : -1.0;
    });
    auto view = client.wait_for_version(version, 120s);
    double through_daemon = ms(Clock::now() - t0);
    double plain = direct_done.get();
    if (!view || plain < 0) throw std::runtime_error("version " + std::to_string(rep) + " not delivered");
    view = {};
    std::smatch m;
    auto line = wait_for(daemon, "version " + std::to_string(rep) + " written to");
    if (!measured) continue;
    update_daemon.push_back(through_daemon);
    update_direct.push_back(plain);
    if (std::regex_search(line, m, std::regex(" in ([0-9.]+) ms"))) persist.push_back(std::stod(m[1]));

    // Fresh clients: connect, acquire, map once, read one byte at each end.
    std::unique_ptr<modelcast::sidecar::Client> fresh;
    for (int i = 0; i < kAttaches; ++i) {
      long rss_before = status_kib("VmRSS");
      auto a0 = Clock::now();
      fresh = std::make_unique<modelcast::sidecar::Client>(modelcast::sidecar::ClientOptions{socket, "bench"});
      auto attached = fresh->acquire();
      auto tensors = attached.tensors();
      volatile auto first = static_cast<const unsigned char*>(tensors.front().data)[0];
      volatile auto last = static_cast<const unsigned char*>(tensors.back().data)[tensors.back().size_bytes() - 1];
      (void)first;
      (void)last;
      attach.push_back(std::chrono::duration<double, std::micro>(Clock::now() - a0).count());
      rss_attach_kib = std::max<double>(rss_attach_kib, static_cast<double>(status_kib("VmRSS") - rss_before));
      auto r0 = Clock::now();
      auto cached = fresh->acquire();
      reattach.push_back(std::chrono::duration<double, std::micro>(Clock::now() - r0).count());
    }
    auto again = fresh->acquire();
    long anon_before = status_kib("RssAnon");
    std::uint64_t sum = 0;
    for (const auto& t : again.tensors()) {
      const auto* p = static_cast<const std::uint64_t*>(t.data);
      for (std::size_t i = 0; i < t.size_bytes() / 8; ++i) sum += p[i];
    }
    anon_read_kib = std::max<double>(anon_read_kib, static_cast<double>(status_kib("RssAnon") - anon_before));
    if (sum == 42) std::cerr << "";  // keeps the reads
    again = {};
    ceiling.push_back(disk_ceiling_ms(model, tmp + "/ceiling.bin"));
  }
  kill(daemon.pid(), SIGTERM);
  daemon.wait();
  return {{"size_mib", mib},
          {"bytes", bytes},
          {"reps", reps},
          {"update_ms_daemon", median(update_daemon)},
          {"update_ms_direct", median(update_direct)},
          {"update_ratio", median(update_daemon) / median(update_direct)},
          {"attach_us", median(attach)},
          {"reattach_us", median(reattach)},
          {"client_rss_growth_before_reading_kib", rss_attach_kib},
          {"bytes_copied_per_client", std::max(0.0, anon_read_kib) * 1024},
          {"persist_ms", median(persist)},
          {"disk_ceiling_ms", median(ceiling)},
          {"persist_ratio", median(persist) / median(ceiling)}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"modelcast sidecar benchmark"};
  std::vector<std::size_t> sizes{256, 1024};
  int reps = 5;
  std::string tmp = "/tmp/modelcast-sidecar-bench", daemon_path = MODELCASTD;
  bool json = false;
  // Bounded and described: 0 repetitions printed a row of zeros, a negative size aborted.
  app.add_option("--sizes-mib", sizes, "model sizes in MiB (1 to 65536)")->delimiter(',')->check(CLI::Range(1, 65536));
  app.add_option("--reps", reps, "measured versions per size, after one warm-up version (1 to 1000)")->check(CLI::Range(1, 1000));
  app.add_option("--tmpdir", tmp, "where the repository and the file baseline go");
  app.add_option("--modelcastd", daemon_path, "the daemon to run")->check(CLI::ExistingFile);
  app.add_flag("--json", json, "print JSON");
  CLI11_PARSE(app, argc, argv);
  nlohmann::json results = nlohmann::json::array();
  for (auto mib : sizes) {
    std::string dir = tmp + "/" + std::to_string(mib);
    std::system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "'").c_str());
    std::cerr << "sidecar: " << mib << " MiB, " << reps << " versions\n";
    results.push_back(run_size(mib, reps, dir, daemon_path));
  }
  if (json) {
    std::cout << results.dump(2) << "\n";
    return 0;
  }
  std::printf("%9s %10s %10s %9s %11s %11s %12s %12s %10s %10s\n", "size_mib", "upd_daemon", "upd_direct", "attach_us",
              "reattach_us", "rss_kib", "copied_bytes", "persist_ms", "disk_ms", "persist_x");
  for (const auto& r : results) {
    std::printf("%9zu %10.1f %10.1f %9.1f %11.1f %11.0f %12.0f %12.1f %10.1f %10.2f\n", r["size_mib"].get<std::size_t>(),
                r["update_ms_daemon"].get<double>(), r["update_ms_direct"].get<double>(), r["attach_us"].get<double>(),
                r["reattach_us"].get<double>(), r["client_rss_growth_before_reading_kib"].get<double>(),
                r["bytes_copied_per_client"].get<double>(), r["persist_ms"].get<double>(),
                r["disk_ceiling_ms"].get<double>(), r["persist_ratio"].get<double>());
  }
}
