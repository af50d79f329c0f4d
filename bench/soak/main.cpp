// modelcast-soak: the processes of the soak test (bench/run.sh soak, see bench/soak.sh), written
// against the public API only, and the report that judges the resource samples it took.
//
//   producer  publishes a model (default 64 MiB, 12 tensors of mixed dtypes) every --interval-ms
//             until SIGTERM/SIGINT; version V's bytes are a pure function of (seed, V, tensor,
//             index), so a consumer can check every byte of any version it holds
//   consumer  a Consumer plus --readers threads that acquire views continuously and check every
//             byte of each (as tests/support/peer_main.cpp's consumer does), until SIGTERM/SIGINT;
//             a torn read is counted, not fatal, so the soak reports how many there were
//   report    reads the sample file soak.sh wrote and prints the table, or one JSON object
//
// producer and consumer print "ready ..." once started and, at exit, one line
// "summary key=value ..." that the report reads.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "modelcast/consumer.h"
#include "modelcast/error.h"
#include "modelcast/producer.h"
#include "test_model.h"

using namespace std::chrono_literals;

namespace {

volatile sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

void install_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

constexpr const char* kModelName = "soak";

// The model: bytes that are a pure function of (seed, version, tensor), the same scheme the
// exchange tests use (tests/support/test_model.h), so a reader can check every byte it sees.
using testmodel::check;
using testmodel::fill;
std::vector<testmodel::Tensor> make_model(std::size_t total_mib) { return testmodel::make(total_mib * 1024); }

// --- producer ----------------------------------------------------------------------------------
int run_producer(const std::string& endpoint, std::size_t mib, int interval_ms, std::uint64_t seed,
                 std::size_t wait_consumers) {
  modelcast::ProducerOptions options;
  options.model_name = kModelName;
  options.control_endpoint = endpoint;
  modelcast::Producer producer(options);
  auto model = make_model(mib);
  for (auto& t : model) producer.register_tensor({t.spec, t.words.data()});
  producer.prepare();
  say("ready " + producer.control_endpoint());
  if (wait_consumers > 0) {
    while (!g_stop && !producer.wait_for_consumers(wait_consumers, 500ms)) {
    }
  }
  std::uint64_t version = 0;
  double stall_ms_max = 0, stall_ms_sum = 0;
  auto next = std::chrono::steady_clock::now();
  while (!g_stop) {
    ++version;
    fill(model, seed, version);
    auto ticket = producer.publish(static_cast<std::int64_t>(version));
    if (ticket.version != version) {
      say("error publish returned version " + std::to_string(ticket.version) + ", expected " + std::to_string(version));
      return 1;
    }
    double stall_ms = std::chrono::duration<double, std::milli>(ticket.stall).count();
    stall_ms_max = std::max(stall_ms_max, stall_ms);
    stall_ms_sum += stall_ms;
    next += std::chrono::milliseconds(interval_ms);
    auto now = std::chrono::steady_clock::now();
    if (next < now) next = now;  // behind schedule: publish at once, do not burst to catch up
    while (!g_stop && std::chrono::steady_clock::now() < next) std::this_thread::sleep_for(10ms);
  }
  auto s = producer.stats();
  char stall[64];
  std::snprintf(stall, sizeof stall, "stall_ms_mean=%.2f stall_ms_max=%.2f",
                version ? stall_ms_sum / static_cast<double>(version) : 0.0, stall_ms_max);
  say("summary versions=" + std::to_string(s.versions_published) + " deliveries=" + std::to_string(s.deliveries) +
      " failed_deliveries=" + std::to_string(s.failed_deliveries) + " leases_expired=" +
      std::to_string(s.leases_expired) + " consumers=" + std::to_string(s.consumers) + " torn_reads=0 " + stall);
  return 0;
}

// --- consumer ----------------------------------------------------------------------------------
int run_consumer(const std::string& endpoint, const std::string& name, int reader_threads, std::uint64_t seed) {
  modelcast::ConsumerOptions options;
  options.producer_endpoint = endpoint;
  options.model_name = kModelName;
  options.consumer_name = name;
  std::atomic<std::uint64_t> corrupt{0};
  options.on_update = [&](const modelcast::ModelView& view) {
    if (auto problem = check(view, seed); !problem.empty()) {
      if (corrupt++ < 5) say("corrupt " + problem);
    }
  };
  modelcast::Consumer consumer(options);
  say("ready " + name);

  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> torn{0}, checks{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < reader_threads; ++r) {
    readers.emplace_back([&] {
      while (!stop) {
        auto view = consumer.acquire();
        if (!view) {
          std::this_thread::sleep_for(1ms);
          continue;
        }
        if (auto problem = check(view, seed); !problem.empty()) {
          if (torn++ < 5) say("torn " + problem);
        }
        checks++;
      }
    });
  }
  while (!g_stop) std::this_thread::sleep_for(50ms);
  stop = true;
  for (auto& t : readers) t.join();
  auto s = consumer.stats();
  say("summary versions=" + std::to_string(s.versions_installed) + " current_version=" +
      std::to_string(s.current_version) + " torn_reads=" + std::to_string(torn.load()) +
      " corrupt_installs=" + std::to_string(corrupt.load()) + " reader_checks=" + std::to_string(checks.load()) +
      " rejected=" + std::to_string(s.versions_rejected) + " transfers_aborted=" +
      std::to_string(s.transfers_aborted) + " reconnects=" + std::to_string(s.reconnects));
  return (torn || corrupt) ? 4 : 0;
}

// --- report ------------------------------------------------------------------------------------
// Sample file, one record a line, written by soak.sh:
//   proc NAME PID                    a process (table order)
//   sample T NAME RSS_KIB FDS THREADS  T = seconds since the start of sampling
//   summary NAME key=value ...       the process's summary line
//   exit NAME RC                     its exit status (RC 137: killed after not stopping)
//   meta key=value ...               run parameters (duration, warm-up, ...)
struct Sample {
  double t;
  long rss, fds, threads;
};
struct Proc {
  std::string name;
  std::vector<Sample> samples;
  std::map<std::string, std::string> summary;
  int rc = -1;
  bool has_rc = false;
};

double slope_per_min(const std::vector<Sample>& s) {  // least squares, KiB per minute
  if (s.size() < 2) return 0;
  double n = static_cast<double>(s.size()), mt = 0, mr = 0;
  for (auto& x : s) mt += x.t, mr += static_cast<double>(x.rss);
  mt /= n, mr /= n;
  double num = 0, den = 0;
  for (auto& x : s) num += (x.t - mt) * (static_cast<double>(x.rss) - mr), den += (x.t - mt) * (x.t - mt);
  return den > 0 ? num / den * 60.0 : 0;
}

int run_report(const std::string& file, double warmup_s, double max_slope, double max_growth_mib, bool as_json) {
  std::ifstream in(file);
  if (!in) {
    std::fprintf(stderr, "modelcast-soak report: cannot read %s\n", file.c_str());
    return 2;
  }
  std::vector<Proc> procs;
  std::map<std::string, std::string> meta;
  auto find = [&](const std::string& name) -> Proc& {
    for (auto& p : procs)
      if (p.name == name) return p;
    procs.push_back(Proc{name, {}, {}, -1, false});
    return procs.back();
  };
  auto read_kv = [](std::istringstream& ls, std::map<std::string, std::string>& into) {
    std::string kv;
    while (ls >> kv) {
      auto eq = kv.find('=');
      if (eq != std::string::npos) into[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
  };
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string kind, name;
    ls >> kind;
    if (kind == "meta") {
      read_kv(ls, meta);
    } else if (kind == "proc") {
      if (ls >> name) find(name);
    } else if (kind == "sample") {
      Sample s{};
      if (ls >> s.t >> name >> s.rss >> s.fds >> s.threads) find(name).samples.push_back(s);
    } else if (kind == "summary") {
      if (ls >> name) read_kv(ls, find(name).summary);
    } else if (kind == "exit") {
      int rc = -1;
      if (ls >> name >> rc) {
        auto& p = find(name);
        p.rc = rc;
        p.has_rc = true;
      }
    }
  }

  using json = nlohmann::ordered_json;
  json out = json::object();
  bool pass = true;
  std::vector<std::string> reasons;
  auto get = [](const Proc& p, const std::string& key) -> long long {
    auto it = p.summary.find(key);
    return it == p.summary.end() ? -1 : std::stoll(it->second);
  };
  for (auto& p : procs) {
    std::vector<Sample> post;
    for (auto& s : p.samples)
      if (s.t >= warmup_s) post.push_back(s);
    json j;
    std::vector<std::string> fail;
    if (post.size() < 3) {
      fail.push_back("fewer than 3 samples after warm-up");
    }
    long rss_start = post.empty() ? 0 : post.front().rss, rss_end = post.empty() ? 0 : post.back().rss;
    long rss_max = 0, fds_max = 0, threads_max = 0;
    for (auto& s : post) {
      rss_max = std::max(rss_max, s.rss);
      fds_max = std::max(fds_max, s.fds);
      threads_max = std::max(threads_max, s.threads);
    }
    double slope = slope_per_min(post);
    long fds_start = post.empty() ? 0 : post.front().fds, fds_end = post.empty() ? 0 : post.back().fds;
    long th_start = post.empty() ? 0 : post.front().threads, th_end = post.empty() ? 0 : post.back().threads;
    double growth_mib = static_cast<double>(rss_end - rss_start) / 1024.0;
    if (slope > max_slope && growth_mib > max_growth_mib) {
      char b[160];
      std::snprintf(b, sizeof b, "RSS grows %.0f KiB/min, +%.1f MiB after warm-up", slope, growth_mib);
      fail.push_back(b);
    }
    if (fds_end > fds_start) fail.push_back("fds " + std::to_string(fds_start) + " -> " + std::to_string(fds_end));
    if (th_end > th_start)
      fail.push_back("threads " + std::to_string(th_start) + " -> " + std::to_string(th_end));
    long long versions = get(p, "versions"), torn = get(p, "torn_reads");
    long long corrupt = get(p, "corrupt_installs");
    if (p.summary.empty()) fail.push_back("no summary (process died?)");
    if (versions == 0) fail.push_back("no versions");
    if (torn > 0) fail.push_back(std::to_string(torn) + " torn reads");
    if (corrupt > 0) fail.push_back(std::to_string(corrupt) + " corrupt installs");
    if (!p.has_rc || p.rc != 0) fail.push_back("exit status " + (p.has_rc ? std::to_string(p.rc) : std::string("?")));
    j["rss_kib_start"] = rss_start;
    j["rss_kib_end"] = rss_end;
    j["rss_kib_max"] = rss_max;
    j["rss_slope_kib_per_min"] = std::round(slope * 10) / 10;
    j["fds_start"] = fds_start;
    j["fds_end"] = fds_end;
    j["fds_max"] = fds_max;
    j["threads_start"] = th_start;
    j["threads_end"] = th_end;
    j["threads_max"] = threads_max;
    j["versions"] = versions;
    j["torn_reads"] = torn;
    if (corrupt >= 0) j["corrupt_installs"] = corrupt;
    if (p.summary.count("reader_checks")) j["reader_checks"] = get(p, "reader_checks");
    j["samples"] = post.size();
    j["exit_status"] = p.has_rc ? p.rc : -1;
    j["pass"] = fail.empty();
    j["failures"] = fail;
    for (auto& f : fail) reasons.push_back(p.name + ": " + f);
    pass = pass && fail.empty();
    out[p.name] = j;
  }
  if (procs.empty()) {
    pass = false;
    reasons.push_back("no processes in " + file);
  }

  if (as_json) {
    json top = json::object();
    top["pass"] = pass;
    json m = json::object();
    for (auto& [k, v] : meta) m[k] = v;
    top["params"] = m;
    top["criteria"] = {{"rss_slope_kib_per_min_max", max_slope}, {"rss_growth_mib_max", max_growth_mib},
                       {"warmup_s", warmup_s}};
    for (auto& [k, v] : out.items()) top[k] = v;
    top["failures"] = reasons;
    std::printf("%s\n", top.dump(2).c_str());
  } else {
    std::printf("%-11s %9s %9s %9s %10s %9s %11s %8s %7s %9s %5s  %s\n", "process", "rss_first", "rss_last",
                "rss_max", "slope", "fds", "threads", "versions", "torn", "checks", "n", "result");
    std::printf("%-11s %9s %9s %9s %10s %9s %11s %8s %7s %9s %5s\n", "", "MiB", "MiB", "MiB", "KiB/min",
                "first>last", "first>last", "", "reads", "", "");
    for (auto& p : procs) {
      auto& j = out[p.name];
      auto mib = [](long kib) { return static_cast<double>(kib) / 1024.0; };
      std::string fds = std::to_string(j["fds_start"].get<long>()) + ">" + std::to_string(j["fds_end"].get<long>());
      std::string th =
          std::to_string(j["threads_start"].get<long>()) + ">" + std::to_string(j["threads_end"].get<long>());
      std::string checks = j.contains("reader_checks") ? std::to_string(j["reader_checks"].get<long long>()) : "-";
      std::printf("%-11s %9.1f %9.1f %9.1f %10.1f %9s %11s %8lld %7lld %9s %5zu  %s\n", p.name.c_str(),
                  mib(j["rss_kib_start"].get<long>()), mib(j["rss_kib_end"].get<long>()),
                  mib(j["rss_kib_max"].get<long>()), j["rss_slope_kib_per_min"].get<double>(), fds.c_str(),
                  th.c_str(), j["versions"].get<long long>(), j["torn_reads"].get<long long>(), checks.c_str(),
                  j["samples"].get<std::size_t>(), j["pass"].get<bool>() ? "ok" : "FAIL");
    }
    std::printf("\nleak rule: FAIL if RSS slope > %.0f KiB/min AND last-first > %.1f MiB (post warm-up %.0f s), "
                "or fds/threads last > first\n",
                max_slope, max_growth_mib, warmup_s);
    for (auto& r : reasons) std::printf("FAIL %s\n", r.c_str());
    std::printf("soak: %s\n", pass ? "PASS" : "FAIL");
  }
  return pass ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"modelcast soak test processes and report (bench/run.sh soak)"};
  std::string endpoint = "tcp://127.0.0.1:0", name = "consumer";
  std::size_t mib = 64, wait_consumers = 0;
  int interval_ms = 200, readers = 2;
  std::uint64_t seed = 1;
  auto* producer = app.add_subcommand("producer", "publish continuously until SIGTERM");
  producer->add_option("--endpoint", endpoint);
  producer->add_option("--mib", mib, "model size")->check(CLI::Range(1, 1 << 16));
  producer->add_option("--interval-ms", interval_ms, "publish period")->check(CLI::Range(1, 3600000));
  producer->add_option("--seed", seed);
  producer->add_option("--wait-consumers", wait_consumers, "start publishing once this many joined");
  auto* consumer = app.add_subcommand("consumer", "receive and check every byte until SIGTERM");
  consumer->add_option("--endpoint", endpoint)->required();
  consumer->add_option("--name", name);
  consumer->add_option("--readers", readers)->check(CLI::Range(0, 64));
  consumer->add_option("--seed", seed);
  std::string file;
  double warmup_s = 0, max_slope = 256, max_growth_mib = 8;
  bool as_json = false;
  auto* report = app.add_subcommand("report", "judge a soak sample file");
  report->add_option("file", file)->required();
  report->add_option("--warmup-s", warmup_s);
  report->add_option("--max-slope-kib-per-min", max_slope);
  report->add_option("--max-growth-mib", max_growth_mib);
  report->add_flag("--json", as_json);
  app.require_subcommand(1);
  CLI11_PARSE(app, argc, argv);
  install_signals();
  try {
    if (*producer) return run_producer(endpoint, mib, interval_ms, seed, wait_consumers);
    if (*consumer) return run_consumer(endpoint, name, readers, seed);
    return run_report(file, warmup_s, max_slope, max_growth_mib, as_json);
  } catch (const modelcast::Error& e) {
    say(std::string("error ") + e.what());
    return 1;
  }
}
