// The ops endpoint fetched by a real HTTP client (httplib), a read-only repository (delivery
// goes on; the failure is in the log and the metrics), hooks, and SIGHUP reloads.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <future>
#include <thread>
#include <random>
#include <atomic>
#include <regex>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "daemon/metrics.h"
#include "daemon/ops_connection.h"
#include "daemon/ops_http.h"
#include "daemon/ops_task_queue.h"
#include "daemon_fixture.h"
#include "eventually.h"
#include "read_only_directory.h"
#include "sidecar_check.h"

namespace daemon_test {
namespace {

using exchange_test::TestProducer;

// The value of the sample `name` (with its labels) in Prometheus text, or -1 if absent.
double metric(const std::string& text, const std::string& name) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(name + " ", 0) == 0) return std::stod(line.substr(name.size() + 1));
  }
  return -1;
}

TEST_F(DaemonTest, OpsEndpointsAnswerAHttpClient) {
  TestProducer producer(1024);
  auto daemon = start_daemon(config(producer.producer->control_endpoint(), 4, "", kHttp));
  int port = ops_port(startup_lines);
  ASSERT_GT(port, 0);
  httplib::Client http("127.0.0.1", port);
  auto health = http.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto not_ready = http.Get("/readyz");
  ASSERT_TRUE(not_ready);
  EXPECT_EQ(not_ready->status, 503);  // nothing served yet
  EXPECT_NE(not_ready->body.find("test"), std::string::npos);
  // Every series of the model is there from the start, at 0 (they once appeared only after their
  // first event, so an alert on them could not fire).
  auto early = http.Get("/metrics")->body;
  for (const char* series : {"modelcastd_versions_installed_total", "modelcastd_versions_rejected_total",
                             "modelcastd_bytes_received_total", "modelcastd_serving_version",
                             "modelcastd_update_latency_seconds_count"}) {
    EXPECT_EQ(metric(early, std::string(series) + "{model=\"test\"}"), 0) << series;
  }

  ASSERT_TRUE(producer.producer->wait_for_consumers(1, 30s));
  producer.publish(1);
  producer.publish(2);
  auto c = client();
  auto held = c.wait_for_version(2, 30s);
  ASSERT_TRUE(held);
  EXPECT_EQ(http.Get("/readyz")->status, 200);

  auto models = http.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 200);
  auto doc = nlohmann::json::parse(models->body);
  ASSERT_EQ(doc["models"].size(), 1u);
  const auto& m = doc["models"][0];
  EXPECT_EQ(m["name"], "test");
  EXPECT_EQ(m["serving"]["version"], 2);
  EXPECT_EQ(m["serving"]["source"], "producer");
  // Hex text, as the logs show it: a JSON number above 2^53 reaches most JSON readers rounded.
  ASSERT_TRUE(m["serving"]["producer_incarnation"].is_string()) << m["serving"];
  EXPECT_TRUE(std::regex_match(m["serving"]["producer_incarnation"].get<std::string>(), std::regex("[0-9a-f]{16}")));
  EXPECT_EQ(m["client_holds"], 1);
  EXPECT_EQ(doc["clients"], 1);

  auto metrics = http.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  const auto& text = metrics->body;
  double installed = metric(text, "modelcastd_versions_installed_total{model=\"test\"}");
  EXPECT_GE(installed, 1);  // version 1 may have been skipped for 2
  EXPECT_LE(installed, 2);
  EXPECT_EQ(metric(text, "modelcastd_update_latency_seconds_count{model=\"test\"}"), installed);
  EXPECT_GE(metric(text, "modelcastd_bytes_received_total{model=\"test\"}"), 1024.0 * 1024 * installed);
  EXPECT_EQ(metric(text, "modelcastd_serving_version{model=\"test\"}"), 2);
  EXPECT_EQ(metric(text, "modelcastd_clients"), 1);
  EXPECT_EQ(metric(text, "modelcastd_client_holds"), 1);
  held = {};  // released: the daemon's count follows once it has read the release
  auto deadline = std::chrono::steady_clock::now() + 10s;
  double holds = 1;
  while (holds != 0 && std::chrono::steady_clock::now() < deadline) {
    holds = metric(http.Get("/metrics")->body, "modelcastd_client_holds");
  }
  EXPECT_EQ(holds, 0);
}

// An endpoint that is ready, lists no model and has no metrics: for the tests of the HTTP side.
modelcastd::OpsProviders always_ready() {
  return {[](const std::string&, std::string&) { return 200; }, [] { return std::string("[]"); },
          [] { return std::string(); }, {}};
}

int connect_to(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0) return fd;
  if (fd >= 0) close(fd);
  return -1;
}

TEST(OpsHttpAddress, AnAddressAlreadyServedIsRefused) {
  // cpp-httplib's default SO_REUSEPORT let a second daemon bind the same address, and the
  // kernel then split scrapes between the two.
  const auto providers = always_ready();
  modelcastd::OpsHttp first("127.0.0.1:0", providers);
  ASSERT_GT(first.port(), 0);
  try {
    modelcastd::OpsHttp second("127.0.0.1:" + std::to_string(first.port()), providers);
    FAIL() << "a second ops endpoint bound port " << first.port();
  } catch (const modelcast::Error& e) {
    EXPECT_EQ(e.code(), modelcast::ErrorCode::kTransport);
    EXPECT_NE(std::string(e.what()).find(std::to_string(first.port())), std::string::npos) << e.what();
  }
}

// Another method than GET was a 400 with no body (404 for some), and an unknown path a 404 with
// no body: neither said what the endpoint serves.
TEST(OpsHttpAddress, AnotherMethodOrAnUnknownPathIsToldWhatIsServed) {
  const auto providers = always_ready();
  modelcastd::OpsHttp ops("127.0.0.1:0", providers);
  httplib::Client http("127.0.0.1", ops.port());
  for (const auto& answer : {http.Post("/healthz", "", "text/plain"), http.Put("/metrics", "", "text/plain"),
                             http.Delete("/v1/models")}) {
    ASSERT_TRUE(answer) << httplib::to_string(answer.error());
    EXPECT_EQ(answer->status, 405);
    EXPECT_EQ(answer->get_header_value("Allow"), "GET, HEAD");
    EXPECT_NE(answer->body.find("GET and HEAD only: /healthz"), std::string::npos) << answer->body;
  }
  auto unknown = http.Get("/helthz");
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404);
  EXPECT_NE(unknown->body.find("no such path; modelcastd serves /healthz"), std::string::npos) << unknown->body;
  auto head = http.Head("/healthz");
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
}

// A connection's request time counted from when a pooled thread took it: behind a flood of idle
// connections the queue grew by every one until no descriptor was left, and a stop served each
// its full second (a minute past 4000 of them). It counts from the accept now.
TEST(OpsTaskQueue, AJobKnowsWhenItsConnectionWasAcceptedNotWhenAThreadTookIt) {
  using Clock = modelcastd::OpsTaskQueue::Clock;
  EXPECT_FALSE(modelcastd::OpsTaskQueue::accepted_at()) << "outside a job";
  modelcastd::OpsTaskQueue queue(1);
  std::promise<void> release;
  auto released = release.get_future().share();
  queue.enqueue([released] { released.wait(); });  // the one worker is busy
  std::promise<std::pair<std::optional<Clock::time_point>, Clock::time_point>> ran;
  const auto before = Clock::now();
  queue.enqueue([&ran] { ran.set_value({modelcastd::OpsTaskQueue::accepted_at(), Clock::now()}); });
  const auto after = Clock::now();
  release.set_value();
  const auto [accepted, run] = ran.get_future().get();
  ASSERT_TRUE(accepted);
  EXPECT_GE(*accepted, before);
  EXPECT_LE(*accepted, after) << "the time a thread took it, not the accept";
  EXPECT_GE(run, after);
  queue.shutdown();
}

// A stop gives the connections still queued no time: each was served its whole second (a
// minute and more after a flood, past systemd's stop timeout).
TEST(OpsTaskQueue, JobsStillQueuedWhenAStopBeginsHaveNoTimeLeft) {
  using Clock = modelcastd::OpsTaskQueue::Clock;
  modelcastd::OpsTaskQueue queue(1);
  std::promise<void> release;
  auto released = release.get_future().share();
  queue.enqueue([released] { released.wait(); });  // the one worker is busy
  std::mutex mutex;
  std::vector<std::optional<Clock::time_point>> seen;
  for (int i = 0; i < 3; ++i) {
    queue.enqueue([&] {
      std::lock_guard lock(mutex);
      seen.push_back(modelcastd::OpsTaskQueue::accepted_at());
    });
  }
  const auto stop_began = Clock::now();
  std::thread stopping([&] { queue.shutdown(); });
  ASSERT_TRUE(testing_support::eventually([&] { return queue.stopping(); }));
  release.set_value();
  stopping.join();  // every queued job ran: each owns a socket it closes
  ASSERT_EQ(seen.size(), 3u);
  for (const auto& at : seen) {
    ASSERT_TRUE(at);
    EXPECT_LE(*at + modelcastd::ConnectionLimits{}.request_time, stop_began)
        << "a queued job still had time after the stop began";
  }
}

// Behind busy threads, connections past max_queued are given no time and closed as they arrive:
// the second's bound on waiting left a second of arrivals queued, each with its descriptor
// (4,000 a second took all 1,024 of a daemon, and its repository writes failed).
TEST(OpsTaskQueue, AConnectionPastTheQueuesBoundIsGivenNoTimeAsItArrives) {
  using Clock = modelcastd::OpsTaskQueue::Clock;
  modelcastd::OpsTaskQueue queue(1, /*max_queued=*/2);
  std::promise<void> release, busy;
  auto released = release.get_future().share();
  queue.enqueue([released, &busy] {
    busy.set_value();
    released.wait();
  });
  busy.get_future().wait();  // the one worker is busy, and the queue empty
  std::mutex mutex;
  std::vector<std::optional<Clock::time_point>> seen;
  auto record = [&] {
    std::lock_guard lock(mutex);
    seen.push_back(modelcastd::OpsTaskQueue::accepted_at());
  };
  queue.enqueue(record);
  queue.enqueue(record);
  {
    std::lock_guard lock(mutex);
    EXPECT_TRUE(seen.empty()) << "a job within the bound ran before the worker was free";
  }
  queue.enqueue(record);  // the third waiting: past the bound
  {
    std::lock_guard lock(mutex);
    ASSERT_EQ(seen.size(), 1u) << "the connection past the bound was queued";
    ASSERT_TRUE(seen[0]);
    EXPECT_LE(*seen[0] + modelcastd::ConnectionLimits{}.request_time, Clock::now()) << "it was given time";
  }
  release.set_value();
  queue.shutdown();
  EXPECT_EQ(seen.size(), 3u);
}

// cpp-httplib reads a request's line and headers a byte at a time: each byte was a poll and a
// recv of its own, and a client sending 64 KiB of headers kept a core busy for a second per
// request. The stream takes what the socket has (up to its buffer) and hands it out from there.
TEST(BoundedStream, ReadsTheSocketInBlocksAndHandsOutEveryByteOnceWithinItsLimit) {
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  std::string sent;
  for (int i = 0; i < 1200; ++i) sent += "X-Header-" + std::to_string(i) + ": v\r\n";  // about 20 KB
  ASSERT_EQ(write(fds[1], sent.data(), sent.size()), static_cast<ssize_t>(sent.size()));
  modelcastd::ConnectionLimits limits;
  limits.request_bytes = 16 * 1024;
  modelcastd::BoundedStream stream(fds[0], limits, std::chrono::steady_clock::now());
  std::string got;
  char c = 0;
  ASSERT_EQ(stream.read(&c, 1), 1);
  got += c;
  int waiting = 0;
  ASSERT_EQ(ioctl(fds[0], FIONREAD, &waiting), 0);
  EXPECT_LT(waiting, static_cast<int>(sent.size()) - 1000) << "one byte asked for, one byte received";
  while (stream.is_readable() && stream.read(&c, 1) == 1) got += c;
  // Every byte within the limit, in order, and none past it.
  EXPECT_EQ(got, sent.substr(0, limits.request_bytes));
  close(fds[0]);
  close(fds[1]);
}

// A Range header was served range by range: 2600 ranges of /metrics in an 8 KB request came back
// as a 12 MB answer. No endpoint has a use for a part of its answer: a Range is ignored and the
// whole answer sent once (a refusal, 416, was wrong for "bytes=0-", which curl -r 0- sends).
TEST(OpsHttpAddress, ARangeRequestIsAnsweredWholeOnceNotMultipliedIntoAHugeAnswer) {
  auto providers = always_ready();
  providers.metrics_text = [] { return std::string("# a scrape's text\n") + std::string(300, 'm') + "\n"; };
  modelcastd::OpsHttp ops("127.0.0.1:0", providers);
  httplib::Client http("127.0.0.1", ops.port());
  auto whole = http.Get("/metrics");
  ASSERT_TRUE(whole);
  EXPECT_EQ(whole->status, 200);
  EXPECT_EQ(whole->body.size(), 319u);
  std::string ranges = "bytes=0-";
  for (int i = 0; i < 1000; ++i) ranges += ",0-";
  for (const std::string& range : {std::string("bytes=0-"), std::string("bytes=5-9"), ranges}) {
    auto answer = http.Get("/metrics", {{"Range", range}});
    ASSERT_TRUE(answer) << httplib::to_string(answer.error());
    EXPECT_EQ(answer->status, 200) << range.substr(0, 20);
    EXPECT_EQ(answer->body, whole->body) << range.substr(0, 20);
    EXPECT_FALSE(answer->has_header("Content-Range"));
  }
  // Nor does it claim ranges: cpp-httplib told every HEAD "Accept-Ranges: bytes", and the 416 it
  // gives a Range it cannot parse (before any handler of ours) said so too.
  auto head = http.Head("/metrics");
  ASSERT_TRUE(head) << httplib::to_string(head.error());
  EXPECT_EQ(head->get_header_value("Accept-Ranges"), "none");
  auto reversed = http.Head("/metrics", {{"Range", "bytes=9-5"}});
  ASSERT_TRUE(reversed) << httplib::to_string(reversed.error());
  EXPECT_EQ(reversed->get_header_value("Accept-Ranges"), "none") << reversed->status;
}

// Connections that send nothing once held every one of cpp-httplib's 8 threads for its 5 s read
// timeout, and probes went unanswered meanwhile. With twice as many idle connections as there
// used to be threads, /healthz still answers well inside a probe's timeout.
TEST(OpsHttpAddress, IdleConnectionsDoNotKeepProbesUnanswered) {
  using namespace std::chrono_literals;
  const auto providers = always_ready();
  modelcastd::OpsHttp ops("127.0.0.1:0", providers);
  std::vector<int> idle;
  for (int i = 0; i < 16; ++i) {
    idle.push_back(connect_to(ops.port()));
    ASSERT_GE(idle.back(), 0) << std::strerror(errno);
  }
  // The server accepts connections in the order they came: the probe's after these.
  httplib::Client http("127.0.0.1", ops.port());
  http.set_connection_timeout(3s);
  http.set_read_timeout(3s);
  auto answer = http.Get("/healthz");
  for (int fd : idle) close(fd);
  ASSERT_TRUE(answer) << "no answer within 3 s: " << httplib::to_string(answer.error());
  EXPECT_EQ(answer->status, 200);
}


// Clients sending a header a byte at a time each held one of the 64 pooled threads for as long
// as they went on (cpp-httplib's read timeout restarts at every byte): 70 of them left /healthz
// unanswered for good. A connection has a second for its whole request now.
TEST(OpsHttpAddress, SlowClientsDoNotKeepProbesUnanswered) {
  using namespace std::chrono_literals;
  const auto providers = always_ready();
  modelcastd::OpsHttp ops("127.0.0.1:0", providers);
  std::vector<int> slow;
  for (int i = 0; i < 70; ++i) {
    slow.push_back(connect_to(ops.port()));
    ASSERT_GE(slow.back(), 0) << std::strerror(errno);
    const std::string start = "GET /healthz HTTP/1.1\r\nX-Slow: ";
    ASSERT_EQ(send(slow.back(), start.data(), start.size(), MSG_NOSIGNAL), static_cast<ssize_t>(start.size()));
  }
  // The clients' pace (a byte every 50 ms, well inside the old per-byte timeout of a second even
  // on a loaded machine) is the behaviour under test, not a synchronisation.
  std::atomic<bool> done{false};
  std::thread dribble([&] {
    while (!done) {
      for (int fd : slow) send(fd, "a", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      std::this_thread::sleep_for(50ms);
    }
  });
  httplib::Client http("127.0.0.1", ops.port());
  http.set_connection_timeout(10s);
  http.set_read_timeout(10s);
  auto answer = http.Get("/healthz");
  done = true;
  dribble.join();
  for (int fd : slow) close(fd);
  ASSERT_TRUE(answer) << "no answer within 10 s: " << httplib::to_string(answer.error());
  EXPECT_EQ(answer->status, 200);
}

// Header lines without end were all read and kept (a client grew the daemon by hundreds of MB,
// kept after it left). The request is cut at 64 KiB and the connection closed: sending fails
// long before 16 MiB.
TEST(OpsHttpAddress, ARequestWithoutEndIsCutOffAndTheConnectionClosed) {
  const auto providers = always_ready();
  modelcastd::OpsHttp ops("127.0.0.1:0", providers);
  const int fd = connect_to(ops.port());
  ASSERT_GE(fd, 0) << std::strerror(errno);
  std::string lines = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  while (lines.size() < 64 * 1024) lines.append("X-Filler: ").append(100, 'a').append("\r\n");
  std::size_t sent = 0;
  bool refused = false;
  while (sent < (std::size_t{16} << 20) && !refused) {
    pollfd p{fd, POLLOUT, 0};
    // A server that stopped reading without closing would leave the send blocked: 10 s of that
    // ends the loop, and the read below then finds the connection open.
    if (poll(&p, 1, 10'000) <= 0) break;
    const ssize_t n = send(fd, lines.data() + sent % (64 * 1024), 64 * 1024 - sent % (64 * 1024), MSG_NOSIGNAL);
    if (n < 0) refused = true;
    else sent += static_cast<std::size_t>(n);
  }
  if (!refused) {
    // Closed while the last sends sat in the socket buffers: reading finds the end (or a reset).
    pollfd p{fd, POLLIN, 0};
    char buffer[4096];
    while (poll(&p, 1, 10'000) > 0) {
      const ssize_t n = recv(fd, buffer, sizeof buffer, 0);
      if (n <= 0) {
        refused = true;
        break;
      }
    }
  }
  close(fd);
  EXPECT_TRUE(refused) << "the endpoint took " << sent << " bytes of one request and kept the connection";
  EXPECT_LT(sent, std::size_t{16} << 20);
}

TEST_F(DaemonTest, VersionsTooLargeForTheModelAreCountedAsRejected) {
  // The consumer refuses a model past max_model_bytes with kResource, which the daemon took for
  // "updates wait for held buffers" and did not count: an alert on rejections never fired.
  TestProducer producer(2048);  // 2 MiB, over the 1 MiB below
  auto daemon = start_daemon(config(producer.producer->control_endpoint(), 2, "", kHttp, "1MiB"));
  const int port = ops_port(startup_lines);
  ASSERT_GT(port, 0);
  httplib::Client http("127.0.0.1", port);
  ASSERT_TRUE(producer.producer->wait_for_consumers(1, 30s));
  producer.publish(1);
  producer.publish(2);  // the consumer may skip 1 for 2: one rejection at least
  double counted = -1;
  std::uint64_t rejected = 0;
  EXPECT_TRUE(testing_support::eventually(
      [&] {
        rejected = nlohmann::json::parse(http.Get("/v1/models")->body)["models"][0]["versions_rejected"];
        counted = metric(http.Get("/metrics")->body, "modelcastd_versions_rejected_total{model=\"test\"}");
        return rejected >= 1 && counted == static_cast<double>(rejected);
      },
      60s))
      << "the consumer rejected " << rejected << ", the metric says " << counted;
}

// What a removed model's work still under way reports (a repository write or a hook that ends
// after the reload) made its series again, at 1 and 0, for a model nobody runs.
TEST(Metrics, ARemovedModelsLateReportsMakeNoSeries) {
  modelcastd::Metrics metrics;
  metrics.model_added("old", true, true);
  metrics.model_removed("old");
  metrics.repository_written("old", std::chrono::milliseconds(5));
  metrics.repository_failed("old");
  metrics.hook_ran("old", false);
  metrics.installed("old", std::chrono::milliseconds(1));
  metrics.serving("old", 3);
  metrics.rejected("old");
  const auto text = metrics.render({});
  EXPECT_EQ(text.find("model=\"old\""), std::string::npos) << text;
  metrics.model_added("old", true, true);  // configured again: counted again
  metrics.serving("old", 4);
  EXPECT_EQ(metric(metrics.render({}), "modelcastd_serving_version{model=\"old\"}"), 4);
}

// A producer whose clock is ahead of the daemon's gives negative update latencies: observed as
// they were, they took the histogram's _sum down (-60 s after two versions), which Prometheus
// reads as a reset.
TEST(Metrics, ANegativeUpdateLatencyIsObservedAsZero) {
  modelcastd::Metrics metrics;
  metrics.model_added("m", false, false);
  metrics.installed("m", std::chrono::seconds(-30));
  metrics.installed("m", std::chrono::milliseconds(2));
  const auto text = metrics.render({});
  EXPECT_DOUBLE_EQ(metric(text, "modelcastd_update_latency_seconds_sum{model=\"m\"}"), 0.002) << text;
  EXPECT_EQ(metric(text, "modelcastd_update_latency_seconds_count{model=\"m\"}"), 2) << text;
}

// Whether each model's producer is connected and how many reloads were refused: both series
// exist from the start at 0, so an alert on them can fire before their first change.
TEST_F(DaemonTest, MetricsSayWhichProducersAreConnectedAndCountRefusedReloads) {
  auto producer = std::make_unique<TestProducer>(64);
  const std::string never = "[[model]]\nname = \"never\"\nendpoint = \"tcp://127.0.0.1:1\"\nmax_model_bytes = \"1MiB\"\n";
  const std::string good = config(producer->producer->control_endpoint(), 4, never, kHttp);
  auto daemon = start_daemon(good);
  int port = ops_port(startup_lines);
  ASSERT_GT(port, 0);
  httplib::Client http("127.0.0.1", port);
  auto early = http.Get("/metrics")->body;
  EXPECT_EQ(metric(early, "modelcastd_reloads_refused_total"), 0);
  EXPECT_EQ(metric(early, "modelcastd_producer_connected{model=\"never\"}"), 0);

  // Reads `series` until it shows `value` (the daemon reads its Consumers' state when asked).
  auto reaches = [&](const std::string& series, double value) {
    auto deadline = std::chrono::steady_clock::now() + 30s;
    double seen = -1;
    while (seen != value && std::chrono::steady_clock::now() < deadline) seen = metric(http.Get("/metrics")->body, series);
    return seen;
  };
  ASSERT_TRUE(producer->producer->wait_for_consumers(1, 30s));
  EXPECT_EQ(reaches("modelcastd_producer_connected{model=\"test\"}", 1), 1);
  EXPECT_EQ(metric(http.Get("/metrics")->body, "modelcastd_producer_connected{model=\"never\"}"), 0);

  write_file(dir / "modelcastd.toml", good + "colour = \"blue\"\n");
  kill(daemon->pid(), SIGHUP);
  ASSERT_NE(wait_for_text(*daemon, "reload refused"), "");
  EXPECT_EQ(metric(http.Get("/metrics")->body, "modelcastd_reloads_refused_total"), 1);

  // A model the configuration no longer has has no series left (at 0 they read as a model whose
  // producer is down, and alerts on them fired for a model nobody runs).
  write_file(dir / "modelcastd.toml", config(producer->producer->control_endpoint(), 4, "", kHttp));
  kill(daemon->pid(), SIGHUP);
  ASSERT_NE(wait_for_text(*daemon, "reloaded"), "");
  const auto after = http.Get("/metrics")->body;
  EXPECT_EQ(after.find("model=\"never\""), std::string::npos) << after;
  EXPECT_EQ(metric(after, "modelcastd_producer_connected{model=\"test\"}"), 1);

  EXPECT_EQ(metric(after, "modelcastd_producer_stopped{model=\"test\"}"), 0);
  EXPECT_FALSE(nlohmann::json::parse(http.Get("/v1/models")->body)["models"][0]["producer_stopped"].get<bool>());
  // The end of the run: the producer says it stops, which tells it from a producer lost.
  producer.reset();
  EXPECT_EQ(reaches("modelcastd_producer_stopped{model=\"test\"}", 1), 1);
  EXPECT_EQ(metric(http.Get("/metrics")->body, "modelcastd_producer_connected{model=\"test\"}"), 0);
  const auto models = nlohmann::json::parse(http.Get("/v1/models")->body)["models"][0];
  EXPECT_TRUE(models["producer_stopped"].get<bool>()) << models.dump();
  EXPECT_FALSE(models["producer_connected"].get<bool>()) << models.dump();
  kill(daemon->pid(), SIGTERM);
  EXPECT_EQ(daemon->wait(), 0);
}

// A reload that restarts a model (here its buffers changed) gives it a new Consumer, counting
// from 0. What the old one received since the last scrape was lost, and the new one's first
// counts were taken for the old one's gain: the metric said the new Consumer's bytes alone.
TEST_F(DaemonTest, BytesReceivedCountEveryVersionAcrossAReloadThatRestartsTheModel) {
  TestProducer producer(64);
  auto daemon = start_daemon(config(producer.producer->control_endpoint(), 4, "", kHttp));
  const int port = ops_port(startup_lines);
  ASSERT_GT(port, 0);
  httplib::Client http("127.0.0.1", port);
  const std::string series = "modelcastd_bytes_received_total{model=\"test\"}";
  auto consumer_bytes = [&] {
    return nlohmann::json::parse(http.Get("/v1/models")->body)["models"][0]["bytes_received"].get<std::uint64_t>();
  };
  ASSERT_TRUE(producer.producer->wait_for_consumers(1, 30s));
  auto c = client();
  producer.publish(1);
  ASSERT_TRUE(c.wait_for_version(1, 30s));
  EXPECT_GT(metric(http.Get("/metrics")->body, series), 0);  // a scrape between the versions
  producer.publish(2);
  ASSERT_TRUE(c.wait_for_version(2, 30s));
  const std::uint64_t before_reload = consumer_bytes();

  write_file(dir / "modelcastd.toml", config(producer.producer->control_endpoint(), 3, "", kHttp));
  kill(daemon->pid(), SIGHUP);
  ASSERT_NE(wait_for_text(*daemon, "reloaded"), "");
  ASSERT_TRUE(testing_support::eventually(
      [&] { return metric(http.Get("/metrics")->body, "modelcastd_producer_connected{model=\"test\"}") == 1; }, 30s))
      << "the restarted model's Consumer did not join";
  for (std::uint64_t v = 3; v <= 5; ++v) producer.publish(v);
  ASSERT_TRUE(c.wait_for_version(5, 30s));
  const std::uint64_t after_reload = consumer_bytes();
  ASSERT_GT(after_reload, 0u);
  EXPECT_EQ(metric(http.Get("/metrics")->body, series), static_cast<double>(before_reload + after_reload));
}

// The library's messages (here the Consumer's join) come out on the daemon's stdout in the
// daemon's own format, named by component, not in a second format on stderr.
TEST_F(DaemonTest, TheLibrarysMessagesComeOutInTheDaemonsLogFormat) {
  TestProducer producer(64);
  auto daemon = start_daemon(config(producer.producer->control_endpoint(), 4));
  ASSERT_TRUE(producer.producer->wait_for_consumers(1, 30s));
  const std::string text = "modelcast.consumer: model 'test': joined at ";
  std::string joined;
  for (const auto& line : startup_lines) {
    if (line.find(text) != std::string::npos) joined = line;
  }
  if (joined.empty()) joined = wait_for_text(*daemon, text, 30s);
  EXPECT_TRUE(std::regex_search(joined, std::regex("^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]{12} info " + text))) << joined;
  kill(daemon->pid(), SIGTERM);
  EXPECT_EQ(daemon->wait(), 0);
}

// A model whose producer is not up yet (added by a reload, say) must not take the daemon out of
// service while another model is served: /readyz answers for the daemon as a whole (some model
// served) and, with ?model=, for one model.
TEST_F(DaemonTest, ReadinessIsPerModelAndOneWaitingModelDoesNotTakeTheOthersOutOfService) {
  TestProducer producer(1024);
  const std::string waiting = "[[model]]\nname = \"later\"\nendpoint = \"tcp://127.0.0.1:1\"\nmax_model_bytes = \"1MiB\"\n";
  auto daemon = start_daemon(config(producer.producer->control_endpoint(), 4, waiting, kHttp));
  int port = ops_port(startup_lines);
  ASSERT_GT(port, 0);
  httplib::Client http("127.0.0.1", port);
  EXPECT_EQ(http.Get("/readyz")->status, 503);  // nothing served yet
  ASSERT_TRUE(producer.producer->wait_for_consumers(1, 30s));
  producer.publish(1);
  auto c = client();
  ASSERT_TRUE(c.wait_for_version(1, 30s));
  auto whole = http.Get("/readyz");
  ASSERT_TRUE(whole);
  EXPECT_EQ(whole->status, 200) << whole->body;
  EXPECT_NE(whole->body.find("serving: test"), std::string::npos) << whole->body;
  EXPECT_NE(whole->body.find("no version yet: later"), std::string::npos) << whole->body;
  EXPECT_EQ(http.Get("/readyz?model=test")->status, 200);
  EXPECT_EQ(http.Get("/readyz?model=later")->status, 503);
  EXPECT_EQ(http.Get("/readyz?model=nonesuch")->status, 404);
  // An unset variable or a misspelt parameter was answered for the daemon as a whole (200 here).
  for (const char* probe : {"/readyz?model=", "/readyz?modle=later", "/readyz?MODEL=later", "/readyz?model=later&model=test"}) {
    auto r = http.Get(probe);
    ASSERT_TRUE(r) << probe;
    EXPECT_EQ(r->status, 400) << probe << ": " << r->body;
  }
  EXPECT_NE(http.Get("/readyz?modle=later")->body.find("takes one parameter, model=NAME; got 'modle'"), std::string::npos);
}

// A configured model that cannot start (here: a plaintext ipc:// endpoint in a directory others
// can write, which the library refuses) is not "no such model": readiness and the model list say
// that it did not start, and why.
TEST_F(DaemonTest, AModelThatDidNotStartIsReportedAsSuch) {
  TestProducer producer(1024);
  const std::string broken =
      "[[model]]\nname = \"broken\"\nendpoint = \"ipc:///tmp/modelcast-shared-dir.sock\"\nmax_model_bytes = \"1MiB\"\n";
  auto daemon = start_daemon(config(producer.producer->control_endpoint(), 4, broken, kHttp));
  int port = ops_port(startup_lines);
  ASSERT_GT(port, 0);
  // Its configuration refused it: started again by a reload, not on a timer.
  EXPECT_TRUE(std::any_of(startup_lines.begin(), startup_lines.end(), [](const std::string& line) {
    return line.find("model broken") != std::string::npos && line.find("; a reload (SIGHUP) tries again") != std::string::npos;
  }));
  httplib::Client http("127.0.0.1", port);
  auto one = http.Get("/readyz?model=broken");
  ASSERT_TRUE(one);
  EXPECT_EQ(one->status, 503);
  EXPECT_NE(one->body.find("configured but did not start: "), std::string::npos) << one->body;
  EXPECT_NE(http.Get("/readyz")->body.find("did not start: broken"), std::string::npos);
  auto models = http.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_NE(models->body.find("\"not_started\""), std::string::npos) << models->body;
  EXPECT_EQ(http.Get("/readyz?model=nonesuch")->status, 404);
}

// A model whose restart by a reload fails goes on serving what it served: readiness, the model
// list and the serving gauge say so (they said "no model" and 0, or nothing at all).
TEST_F(DaemonTest, AModelWhoseRestartFailedIsReportedServingItsLastVersion) {
  TestProducer producer(1024);
  const std::string endpoint = producer.producer->control_endpoint();
  auto daemon = start_daemon(config(endpoint, 4, "", kHttp));
  int port = ops_port(startup_lines);
  ASSERT_GT(port, 0);
  ASSERT_TRUE(producer.producer->wait_for_consumers(1, 30s));
  producer.publish(1);
  ASSERT_TRUE(client().wait_for_version(1, 30s));
  write_file(dir / "modelcastd.toml", config(endpoint, 4, "", kHttp, "1000000GiB"));  // no allocation meets it
  kill(daemon->pid(), SIGHUP);
  EXPECT_NE(wait_for_text(*daemon, "reloaded"), "");
  httplib::Client http("127.0.0.1", port);
  auto one = http.Get("/readyz?model=test");
  ASSERT_TRUE(one);
  EXPECT_EQ(one->status, 200) << one->body;
  EXPECT_NE(one->body.find("configured but did not start: "), std::string::npos) << one->body;
  EXPECT_NE(one->body.find("; serving version 1 from before the reload"), std::string::npos) << one->body;
  auto doc = nlohmann::json::parse(http.Get("/v1/models")->body);
  ASSERT_EQ(doc["models"].size(), 1u) << doc.dump();
  EXPECT_TRUE(doc["models"][0].contains("not_started")) << doc.dump();
  EXPECT_EQ(doc["models"][0]["serving"]["version"], 1) << doc.dump();
  EXPECT_EQ(metric(http.Get("/metrics")->body, "modelcastd_serving_version{model=\"test\"}"), 1);
  kill(daemon->pid(), SIGTERM);
  EXPECT_EQ(daemon->wait(), 0);
}

TEST_F(DaemonTest, AReadOnlyRepositoryDoesNotStopDeliveryAndIsReportedWhileItLasts) {
  ReadOnlyDirectory repo(dir / "repo");
  if (!repo.usable()) GTEST_SKIP() << "cannot make a read-only directory here (root without mount)";
  TestProducer producer(1024);
  auto daemon = start_daemon(config(producer.producer->control_endpoint(), 4, "", kHttp + repository(repo.path, 3)));
  int port = ops_port(startup_lines);
  ASSERT_TRUE(producer.producer->wait_for_consumers(1, 30s));
  auto c = client();
  for (std::uint64_t v = 1; v <= 3; ++v) {
    producer.publish(v);
    auto view = c.wait_for_version(v, 30s);
    ASSERT_TRUE(view) << "delivery stopped at version " << v;
    EXPECT_EQ(sidecar_test::check(view, 1), "");
  }
  EXPECT_NE(wait_for_text(*daemon, "repository write of version"), "") << "the failure was not logged";
  httplib::Client http("127.0.0.1", port);
  auto metrics = http.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_GE(metric(metrics->body, "modelcastd_repository_write_failures_total{model=\"test\"}"), 1);
  auto doc = nlohmann::json::parse(http.Get("/v1/models")->body);
  EXPECT_GE(doc["repository"]["failed"].get<int>(), 1);
  EXPECT_NE(doc["repository"]["last_error"].get<std::string>(), "");

  // The disk back: the next version is written, and the error is no longer shown as current.
  ASSERT_TRUE(repo.make_writable());
  producer.publish(4);
  EXPECT_NE(wait_for_text(*daemon, "version 4 written"), "") << "no write once the repository was writable";
  doc = nlohmann::json::parse(http.Get("/v1/models")->body);
  EXPECT_GE(doc["repository"]["written"].get<int>(), 1);
  EXPECT_EQ(doc["repository"]["last_error"].get<std::string>(), "") << "an error past was still shown";
}

// While a version is arriving, /v1/models says which and how much of it has landed, and says
// nothing once it is installed. 16 MiB versions published back to back until a poll catches one
// under way, 400 at most: the daemon logs a line per install to a pipe this test reads only at
// its end (ChildProcess), which must not fill.
TEST_F(DaemonTest, ModelsListTheVersionArriving) {
  constexpr std::uint64_t kBytes = 16ull << 20;
  TestProducer producer(kBytes / 1024);
  auto daemon = start_daemon(config(producer.producer->control_endpoint(), 3, "", kHttp, "32MiB"));
  const int port = ops_port(startup_lines);
  ASSERT_GT(port, 0);
  httplib::Client http("127.0.0.1", port);
  ASSERT_TRUE(producer.producer->wait_for_consumers(1, 30s));
  const auto model = [&] {
    auto r = http.Get("/v1/models");
    return r ? nlohmann::json::parse(r->body)["models"][0] : nlohmann::json();
  };
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> published{0};
  std::thread trainer([&] {
    for (std::uint64_t v = 1; !stop && v <= 400; ++v) {
      producer.publish(v);
      published = v;
    }
  });
  nlohmann::json caught;
  const bool seen = testing_support::eventually([&] {
    caught = model();
    return caught.is_object() && caught["arriving"].is_object();
  }, 60s);
  stop = true;
  trainer.join();
  ASSERT_TRUE(seen) << "no poll caught a version arriving; the last answer: " << caught;
  const auto arriving = caught["arriving"];
  EXPECT_GE(arriving["version"].get<std::uint64_t>(), 1u) << caught;
  EXPECT_LE(arriving["version"].get<std::uint64_t>(), published.load()) << caught;
  if (caught["serving"].is_object()) {
    EXPECT_GT(arriving["version"].get<std::uint64_t>(), caught["serving"]["version"].get<std::uint64_t>()) << caught;
  }
  EXPECT_LE(arriving["bytes"].get<std::uint64_t>(), kBytes) << caught;
  // The last version published is installed in the end, and then nothing is arriving.
  ASSERT_TRUE(testing_support::eventually([&] {
    const auto m = model();
    return m.is_object() && m["serving"].is_object() && m["serving"]["version"] == published.load() &&
           m["arriving"].is_null();
  }, 60s)) << model();
}

// A sidecar told to stop (SIGTERM, as systemd and Kubernetes do) while a version is arriving:
// its models' receive buffers go while UCX may still be landing data in them. 20 daemons over
// TCP and 20 over shared memory, each stopped at a random point 0-20 ms after the transfer of a
// version began, while the producer publishes without pause: each exits with status 0, and the
// producer goes on.
TEST_F(DaemonTest, DaemonsStoppedBySigtermMidTransferExitCleanly) {
  std::mt19937_64 random(::testing::UnitTest::GetInstance()->random_seed());
  int mid_transfer = 0;
  for (const std::string tls : {"tcp,self", ""}) {
    SCOPED_TRACE(tls.empty() ? "shared memory" : tls);
    if (tls.empty()) {
      unsetenv("UCX_TLS");
    } else {
      setenv("UCX_TLS", tls.c_str(), 1);
    }
    TestProducer producer(8 * 1024);
    std::atomic<bool> stop{false};
    std::thread trainer([&] {
      for (std::uint64_t v = 1; !stop; ++v) {
        producer.publish(v);
        std::this_thread::sleep_for(2ms);  // pacing, so the trainer is not all the machine does
      }
    });
    for (int cycle = 0; cycle < 20; ++cycle) {
      auto daemon = start_daemon(config(producer.producer->control_endpoint(), 3, "", "", "16MiB"));
      const auto delivered = producer.producer->stats().deliveries;
      ASSERT_TRUE(testing_support::eventually([&] { return producer.producer->stats().deliveries > delivered; }, 60s))
          << "cycle " << cycle << ": the daemon never received a version";
      const auto give_up = std::chrono::steady_clock::now() + 1s;
      while (producer.producer->stats().fetches_in_flight == 0 && std::chrono::steady_clock::now() < give_up) {
        std::this_thread::yield();
      }
      // Not a synchronisation: the random point of the transfer where the daemon is stopped.
      std::this_thread::sleep_for(std::chrono::microseconds(random() % 20001));
      if (producer.producer->stats().fetches_in_flight > 0) ++mid_transfer;
      kill(daemon->pid(), SIGTERM);
      const int status = daemon->wait();
      std::string said;
      for (const auto& line : daemon->lines()) said += line + "\n";
      EXPECT_EQ(status, 0) << "cycle " << cycle << ":\n" << said;
    }
    stop = true;
    trainer.join();
  }
  unsetenv("UCX_TLS");
  RecordProperty("stopped_mid_transfer", mid_transfer);
  EXPECT_GE(mid_transfer, 4) << "too few stops caught a transfer under way to test anything";
}

}  // namespace
}  // namespace daemon_test
