// modelcast-demo: the main job. A producer publishes the built-in model several times to
// consumer processes on this host and prints, per version, the trainer's stall, when each
// consumer had the version (verified byte for byte) and the bytes moved.
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <iostream>

#include "common/parse_command_line.h"
#include "default_model.h"
#include "modelcast/consumer.h"
#include "modelcast/error.h"
#include "modelcast/producer.h"
#include "modelcast/version.h"

extern char** environ;

namespace {

using namespace std::chrono_literals;

double ms(std::chrono::nanoseconds d) { return std::chrono::duration<double, std::milli>(d).count(); }

int run_consumer(const std::string& endpoint, int index, int versions, std::size_t size_mib, pid_t parent,
                 int train_ms) {
  // A demo stopped (SIGTERM, a crash) takes its consumers with it; checked after the request in
  // case it stopped before.
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) {
    std::fprintf(stderr, "consumer-%d: the demo (process %d) that starts consumers is not this one's parent\n", index,
                 static_cast<int>(parent));
    return 1;
  }
  modelcast::ConsumerOptions options;
  options.producer_endpoint = endpoint;
  options.model_name = "demo";
  options.consumer_name = "consumer-" + std::to_string(index);
  // The demo knows the layout, so the consumer insists on it.
  for (auto& t : demo::make_default_model(size_mib)) options.expected_layout.push_back(t.spec);
  modelcast::Consumer consumer(options);
  // Each version comes after the trainer's time before it, and its delivery after that.
  const auto wait = 120s + std::chrono::milliseconds(train_ms);
  for (int v = 1; v <= versions; ++v) {
    auto view = consumer.wait_for_version(static_cast<std::uint64_t>(v), wait);
    if (!view) {
      const auto why = consumer.stats().last_error;
      std::fprintf(stderr, "consumer-%d: version %d did not arrive within %lld s (%s)\n", index, v,
                   static_cast<long long>(std::chrono::duration_cast<std::chrono::seconds>(wait).count()),
                   why.empty() ? "no error recorded" : why.c_str());
      return 1;
    }
    std::size_t i = 0;
    for (const auto& tensor : view.tensors()) {
      if (!demo::matches(tensor.data, tensor.size_bytes(), view.version(), i++)) {
        std::fprintf(stderr, "consumer-%d: tensor '%s' of version %llu differs from what was published\n", index,
                     tensor.name().c_str(), static_cast<unsigned long long>(view.version()));
        return 1;
      }
    }
  }
  return 0;
}

pid_t spawn_consumer(const std::string& self, const std::string& endpoint, int index, int versions, std::size_t mib,
                     int train_ms) {
  std::vector<std::string> args = {self,      "consumer",          "--endpoint", endpoint,
                                   "--index", std::to_string(index), "--versions", std::to_string(versions),
                                   "--size-mib", std::to_string(mib), "--train-ms", std::to_string(train_ms),
                                   "--parent", std::to_string(getpid())};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv.data(), environ) != 0) {
    throw std::runtime_error("cannot start consumer process " + self);
  }
  return pid;
}

// The demo's consumer processes. Main thread only.
class Children {
 public:
  void add(pid_t pid) { children_.push_back({pid, static_cast<int>(children_.size()) + 1}); }

  // A consumer that has failed already (exited other than with 0), said on stderr: the demo stops
  // then rather than wait for a version that consumer will never take. One that exited with 0
  // took every version: on the last, it may go before the others have theirs.
  bool one_failed(const std::string& awaited) {
    for (auto& child : children_) {
      if (child.reaped || waitpid(child.pid, &child.status, WNOHANG) != child.pid) continue;
      child.reaped = true;
      if (WIFEXITED(child.status) && WEXITSTATUS(child.status) == 0) continue;
      std::fprintf(stderr, "demo: consumer-%d exited (%s %d) while waiting for %s\n", child.index,
                   WIFEXITED(child.status) ? "status" : "signal",
                   WIFEXITED(child.status) ? WEXITSTATUS(child.status) : WTERMSIG(child.status), awaited.c_str());
      return true;
    }
    return false;
  }

  // Waits for every consumer (stopping each first after a failure); true if all succeeded.
  bool wait_all(bool stop) {
    bool ok = true;
    for (auto& child : children_) {
      if (!child.reaped) {
        if (stop) kill(child.pid, SIGTERM);
        waitpid(child.pid, &child.status, 0);
        child.reaped = true;
      }
      ok = ok && WIFEXITED(child.status) && WEXITSTATUS(child.status) == 0;
    }
    return ok;
  }

 private:
  struct Child {
    pid_t pid;
    int index;
    bool reaped = false;
    int status = 0;
  };
  std::vector<Child> children_;
};

// Waits until `done` or `timeout`, checking the consumers meanwhile; false if either ended it.
template <typename Done>
bool wait_watching(Children& children, std::chrono::seconds timeout, const std::string& awaited, Done&& done) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done(200ms)) {
    if (children.one_failed(awaited)) return false;
    if (std::chrono::steady_clock::now() >= deadline) {
      std::fprintf(stderr, "demo: waited %lld s for %s\n", static_cast<long long>(timeout.count()), awaited.c_str());
      return false;
    }
  }
  return true;
}

int run_producer(const std::string& self, int consumers, int versions, std::size_t size_mib, bool integrity,
                 int train_ms) {
  auto model = demo::make_default_model(size_mib);
  std::size_t bytes = 0;
  for (auto& t : model) bytes += t.spec.size_bytes();

  std::mutex mutex;
  std::condition_variable delivered_cv;
  std::map<std::uint64_t, std::map<std::string, double>> delivered;  // version -> consumer -> ms

  modelcast::ProducerOptions options;
  options.model_name = "demo";
  options.control_endpoint = "tcp://127.0.0.1:0";
  options.integrity = integrity;
  options.on_delivery = [&](const modelcast::Delivery& d) {
    std::lock_guard lock(mutex);
    delivered[d.version][d.consumer] = ms(d.since_publish);
    delivered_cv.notify_all();
  };
  modelcast::Producer producer(options);
  for (auto& t : model) producer.register_tensor({t.spec, t.data()});
  producer.prepare();

  std::printf("modelcast demo: model of %zu tensors, %.1f MiB; %d consumer processes; %d versions, %d ms of "
              "training before each; integrity %s\n",
              model.size(), bytes / 1048576.0, consumers, versions, train_ms, integrity ? "on" : "off");
  Children children;
  for (int i = 1; i <= consumers; ++i) children.add(spawn_consumer(self, producer.control_endpoint(), i, versions, size_mib, train_ms));
  int status_code = 0;
  if (!wait_watching(children, 60s, "every consumer to join", [&](auto slice) {
        return producer.wait_for_consumers(static_cast<std::size_t>(consumers), slice);
      })) {
    status_code = 1;
  }
  std::printf("%-8s %-6s %10s", "version", "step", "stall_ms");
  for (int i = 1; i <= consumers; ++i) std::printf(" %14s", ("consumer-" + std::to_string(i) + "_ms").c_str());
  std::printf(" %12s\n", "bytes");
  for (int v = 1; v <= versions && status_code == 0; ++v) {
    // "Training": the weights change between publishes, and it takes a while. Meanwhile the
    // consumers get ready (the first ones make their receive buffers), as beside a real trainer;
    // with --train-ms 0 the first versions' times include that.
    std::this_thread::sleep_for(std::chrono::milliseconds(train_ms));
    for (std::size_t i = 0; i < model.size(); ++i) demo::fill(model[i], static_cast<std::uint64_t>(v), i);
    auto ticket = producer.publish(v * 100, {{"demo", "true"}});
    std::unique_lock lock(mutex);
    if (!wait_watching(children, 120s, "version " + std::to_string(ticket.version) + " to reach every consumer",
                       [&](auto slice) {
                         return delivered_cv.wait_for(lock, slice, [&] {
                           return delivered[ticket.version].size() == static_cast<std::size_t>(consumers);
                         });
                       })) {
      status_code = 1;
      break;
    }
    std::printf("%-8llu %-6lld %10.2f", static_cast<unsigned long long>(ticket.version),
                static_cast<long long>(ticket.step), ms(ticket.stall));
    // In the header's order (consumer-1, -2, ..., -10), not the map's (consumer-1, -10, -2).
    for (int i = 1; i <= consumers; ++i) std::printf(" %14.2f", delivered[ticket.version]["consumer-" + std::to_string(i)]);
    std::printf(" %12zu\n", ticket.bytes * static_cast<std::size_t>(consumers));
    std::fflush(stdout);
  }
  if (!children.wait_all(/*stop=*/status_code != 0)) status_code = 1;
  auto stats = producer.stats();
  std::printf("%s: %llu version%s published, %llu deliveries verified, %llu bytes sent over %s\n",
              status_code == 0 ? "ok" : "FAILED", static_cast<unsigned long long>(stats.versions_published),
              stats.versions_published == 1 ? "" : "s", static_cast<unsigned long long>(stats.deliveries),
              static_cast<unsigned long long>(stats.bytes_sent), stats.transport.c_str());
  return status_code;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"modelcast-demo: publish the built-in model to consumer processes on this host"};
  app.set_version_flag("--version", "modelcast-demo " MODELCAST_VERSION_STRING);
  app.option_defaults()->always_capture_default();  // --help shows every default
  int consumers = 2;
  int versions = 5;
  std::size_t size_mib = 256;
  bool no_integrity = false;
  int train_ms = 1000;
  app.add_option("--consumers", consumers, "consumer processes")->check(CLI::Range(1, 16));
  app.add_option("--versions", versions, "versions to publish")->check(CLI::Range(1, 1000));
  app.add_option("--size-mib", size_mib, "model size in MiB")->check(CLI::Range(1, 65536));
  app.add_flag("--no-integrity", no_integrity, "skip the block digests");
  app.add_option("--train-ms", train_ms, "time the trainer spends before each publish")->check(CLI::Range(0, 3600000));
  auto* consumer = app.add_subcommand("consumer", "run one consumer (started by the demo itself)");
  std::string endpoint;
  int index = 1;
  consumer->add_option("--endpoint", endpoint)->required();
  consumer->add_option("--index", index);
  consumer->add_option("--versions", versions);
  consumer->add_option("--size-mib", size_mib);
  consumer->add_option("--train-ms", train_ms);
  pid_t parent = 0;
  consumer->add_option("--parent", parent, "the demo's process id")->required();
  if (auto status = modelcast::parse_command_line(app, argc, argv)) return *status;
  try {
    if (*consumer) return run_consumer(endpoint, index, versions, size_mib, parent, train_ms);
    std::string self = std::filesystem::canonical("/proc/self/exe").string();
    return run_producer(self, consumers, versions, size_mib, !no_integrity, train_ms);
  } catch (const modelcast::Error& e) {
    std::fprintf(stderr, "modelcast-demo: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "modelcast-demo: out of memory for a %zu MiB model (try a smaller --size-mib)\n", size_mib);
    return 1;
  }
}
