// Hooks (an HTTP POST received by a real server, a command, a failing command) and SIGHUP
// reloads (a changed model restarts, a bad file is refused, a removed model is gone).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include <httplib.h>

#include "daemon/hook_runner.h"
#include "daemon_fixture.h"
#include "eventually.h"
#include "sidecar_check.h"

namespace daemon_test {
namespace {

using exchange_test::TestProducer;

// An HTTP server on loopback standing in for Triton: records the load requests it receives.
struct FakeServer {
  FakeServer() {
    server.Post(R"(/v2/repository/models/([^/]+)/load)", [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard lock(mutex);
      calls.push_back(req.matches[1].str() + " " + req.get_param_value("version") + " " + req.get_param_value("path"));
      arrived.notify_all();
      res.set_content("{}", "application/json");
    });
    port = server.bind_to_any_port("127.0.0.1");
    thread = std::thread([this] { server.listen_after_bind(); });
  }
  ~FakeServer() {
    server.stop();
    thread.join();
  }
  std::vector<std::string> wait_for_calls(std::size_t count) {
    std::unique_lock lock(mutex);
    arrived.wait_for(lock, std::chrono::seconds(30), [&] { return calls.size() >= count; });
    return calls;
  }
  httplib::Server server;
  int port = 0;
  std::thread thread;
  std::mutex mutex;
  std::condition_variable arrived;
  std::vector<std::string> calls;
};

TEST_F(DaemonTest, AnHttpHookTellsTheServerOfEachVersionOnDisk) {
  FakeServer triton;
  TestProducer producer(1024);
  std::string hook = "[model.hook]\nhttp_post = \"http://127.0.0.1:" + std::to_string(triton.port) +
                     "/v2/repository/models/{model}/load?version={version}&path={path}\"\n";
  auto daemon = start_daemon(config(producer.producer->control_endpoint(), 4, hook, repository(dir / "repo", 3)));
  ASSERT_TRUE(producer.producer->wait_for_consumers(1, 30s));
  producer.publish(1);
  auto calls = triton.wait_for_calls(1);
  ASSERT_EQ(calls.size(), 1u);
  // The hook runs once the version is complete on disk, with its directory.
  EXPECT_EQ(calls[0], "test 1 " + (dir / "repo/test/1"));
  EXPECT_TRUE(std::filesystem::exists(dir / "repo/test/1/model.safetensors"));
}

TEST_F(DaemonTest, ACommandHookRunsAndAFailingOneIsReported) {
  TestProducer producer(1024);
  auto daemon = start_daemon(config(producer.producer->control_endpoint(), 4,
                                    "[model.hook]\ncommand = [\"/usr/bin/touch\", \"" + dir.path + "/hooked-{version}\"]\n"));
  ASSERT_TRUE(producer.producer->wait_for_consumers(1, 30s));
  producer.publish(1);
  EXPECT_NE(wait_for_text(*daemon, "hook for version 1: /usr/bin/touch exited with 0"), "");
  EXPECT_TRUE(std::filesystem::exists(dir / "hooked-1"));
  kill(daemon->pid(), SIGTERM);
  daemon->wait();

  auto failing = start_daemon(config(producer.producer->control_endpoint(), 4, "[model.hook]\ncommand = [\"/bin/false\"]\n"));
  EXPECT_NE(wait_for_text(*failing, "hook for version 1 failed: /bin/false exited with 1"), "");
}

// A hook that fails at every version (the inference server it tells is down for hours) was
// logged at error for every version: one line per 10 s now, as the repository's failures are.
TEST_F(DaemonTest, AHookThatFailsAtEveryVersionIsLoggedOncePerTenSeconds) {
  TestProducer producer(64);
  auto daemon = start_daemon(config(producer.producer->control_endpoint(), 4,
                                    "[model.hook]\ncommand = [\"/bin/sh\", \"-c\", \"touch " + dir.path +
                                        "/ran-{version}; exit 1\"]\n"));
  ASSERT_TRUE(producer.producer->wait_for_consumers(1, 30s));
  std::vector<std::string> lines;
  const auto start = std::chrono::steady_clock::now();  // no line of these hooks is logged before
  producer.publish(1);
  ASSERT_NE(wait_for_text(*daemon, "hook for version 1 failed: /bin/sh exited with 1", 60s, &lines), "");
  for (std::uint64_t version = 2; version <= 4; ++version) {  // one at a time: none is passed over
    producer.publish(version);
    ASSERT_TRUE(testing_support::eventually([&] { return std::filesystem::exists(dir / ("ran-" + std::to_string(version))); }, 30s))
        << "the hook of version " << version << " did not run";
  }
  kill(daemon->pid(), SIGTERM);
  while (auto line = daemon->read_line(30s)) lines.push_back(*line);
  EXPECT_EQ(daemon->wait(), 0);
  const auto failures = std::count_if(lines.begin(), lines.end(), [](const std::string& l) {
    return l.find("failed: /bin/sh exited with 1") != std::string::npos;
  });
  // One line per 10 s: on a machine so loaded that the four hooks took longer, one more per 10 s.
  const auto allowed = 1 + (std::chrono::steady_clock::now() - start) / 10s;
  EXPECT_LE(failures, allowed) << "a hook failing at every version is logged at every version";
  EXPECT_GE(failures, 1);
}

// A hook started with the daemon's SIGPIPE ignored (under systemd, which starts services so: a
// hook's `a | head` then saw write errors) and with UCX's sockets, pipes and epoll descriptors
// open. It gets stdin, stdout and stderr and SIGPIPE's default, as from a shell.
TEST_F(DaemonTest, ACommandHookStartsWithDefaultSignalsAndOnlyTheStandardDescriptors) {
  TestProducer producer(1024);
  const std::string report = dir / "hook-process.txt";
  const std::string script = dir / "hook.sh";
  // The shell reports the signals it was started with; Python, exec'd in its place, reports the
  // descriptors past stderr it inherited (the shell's own are close-on-exec).
  write_file(script, "grep SigIgn /proc/$$/status > " + report + "\n" +
                         "exec /usr/bin/python3 -c 'import os; print(\"fds\", *[fd for fd in range(3, 4096) if "
                         "os.path.exists(\"/proc/self/fd/%d\" % fd)])' >> " + report + "\n");
  // Started with SIGPIPE ignored, as systemd starts services (IgnoreSIGPIPE=yes by default);
  // ignored signals survive fork and exec.
  struct sigaction ignore {}, before {};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ignore, &before);
  auto daemon = start_daemon(config(producer.producer->control_endpoint(), 4,
                                    "[model.hook]\ncommand = [\"/bin/sh\", \"" + script + "\"]\n"));
  sigaction(SIGPIPE, &before, nullptr);
  ASSERT_TRUE(producer.producer->wait_for_consumers(1, 30s));
  producer.publish(1);
  ASSERT_NE(wait_for_text(*daemon, "hook for version 1: /bin/sh exited with 0"), "");
  std::ifstream in(report);
  std::string ignored, descriptors;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("SigIgn:", 0) == 0) ignored = line.substr(7);
    if (line.rfind("fds", 0) == 0) descriptors = line;
  }
  EXPECT_EQ(descriptors, "fds") << "the hook inherited descriptors past stderr";
  ASSERT_FALSE(ignored.empty()) << "no SigIgn line in " << report;
  EXPECT_EQ(std::stoull(ignored, nullptr, 16) & (1ull << (SIGPIPE - 1)), 0u) << "SigIgn:" << ignored;
}

// Whether process `pid` still runs (a zombie has ended; it waits for its parent to reap it).
bool running(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z';
}

TEST_F(DaemonTest, ACommandHookThatTimesOutIsKilledWithWhatItStarted) {
  // Only the hook's own process was killed: a shell's child (a hung curl) lived on.
  TestProducer producer(64);
  const std::string pid_file = dir / "child.pid";
  auto daemon = start_daemon(config(producer.producer->control_endpoint(), 4,
                                    "[model.hook]\ncommand = [\"/bin/sh\", \"-c\", \"sleep 300 & echo $! > " + pid_file +
                                        "; wait\"]\ntimeout_ms = 1000\n"));
  ASSERT_TRUE(producer.producer->wait_for_consumers(1, 30s));
  producer.publish(1);
  ASSERT_NE(wait_for_text(*daemon, "hook for version 1 failed: /bin/sh timed out after 1000 ms and was killed"), "");
  std::ifstream file(pid_file);
  pid_t child = 0;
  ASSERT_TRUE(file >> child) << "the hook wrote no pid";
  EXPECT_TRUE(testing_support::eventually([&] { return !running(child); }, 30s)) << "the hook's child " << child
                                                                                    << " outlived it";
  if (running(child)) kill(child, SIGKILL);
}

// Where the daemon is a container's PID 1, what a hook leaves running is given to it when the
// hook ends, and it must wait for it: nothing did, and each version's hook left a zombie for good.
// Run as a child subreaper here, which is given orphans as PID 1 is.
TEST_F(DaemonTest, RunAsInitItReapsWhatItsHooksLeaveBehind) {
  TestProducer producer(64);
  auto daemon = start_daemon(
      config(producer.producer->control_endpoint(), 4,
             "[model.hook]\ncommand = [\"/bin/sh\", \"-c\", \"sleep 0.2 & echo $! > " + dir.path + "/left-{version}; exit 3\"]\n"),
      {MODELCAST_AS_SUBREAPER});
  ASSERT_TRUE(producer.producer->wait_for_consumers(1, 30s));
  std::vector<pid_t> left;
  for (std::uint64_t version = 1; version <= 3; ++version) {
    producer.publish(version);
    // The hook's own status is the hook runner's, never the reaper's (said once: the same
    // failure at the next versions within 10 s is not logged again).
    if (version == 1) {
      ASSERT_NE(wait_for_text(*daemon, "hook for version 1 failed: /bin/sh exited with 3"), "");
    }
    pid_t pid = 0;
    ASSERT_TRUE(testing_support::eventually([&] {
      std::ifstream file(dir / ("left-" + std::to_string(version)));
      return static_cast<bool>(file >> pid);
    }, 30s)) << "the hook wrote no pid";
    left.push_back(pid);
  }
  // Each sleep, once its shell has ended, is the daemon's child (as it would be PID 1's), and
  // once it has ended too, no process of that pid is the daemon's: it was waited for.
  auto parent_of = [](pid_t pid) -> pid_t {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!std::getline(stat, line)) return 0;
    std::istringstream rest(line.substr(line.rfind(')') + 2));
    char state;
    pid_t parent = 0;
    rest >> state >> parent;
    return parent;
  };
  for (pid_t pid : left) {
    EXPECT_TRUE(testing_support::eventually([&] { return parent_of(pid) != daemon->pid(); }, 30s))
        << "process " << pid << " the hook left is still the daemon's, "
        << (running(pid) ? "running" : "a zombie nothing waited for");
  }
  // Every hook's status logged is its own (a status the reaper took would be another text).
  kill(daemon->pid(), SIGTERM);
  std::vector<std::string> lines;
  while (auto line = daemon->read_line(30s)) lines.push_back(*line);
  EXPECT_EQ(daemon->wait(), 0);
  for (const auto& line : lines) {
    if (line.find("hook for version") == std::string::npos) continue;
    EXPECT_NE(line.find("failed: /bin/sh exited with 3"), std::string::npos) << line;
  }
}

// A config given as a FIFO (a secret manager's, say) is read once at the start. A reload opened
// it again on the thread that takes signals, and waited there for a writer: SIGTERM went
// unanswered until one came. A reload of anything but a regular file is refused, saying why.
TEST_F(DaemonTest, AReloadOfAConfigThatIsAPipeIsRefusedAndTheDaemonStillStops) {
  TestProducer producer(64);
  const std::string fifo = dir / "config.fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  ChildProcess daemon({MODELCASTD, "--config", fifo});
  // Opened without blocking once the daemon has it open to read (before: ENXIO), so that a daemon
  // that ends first fails the test rather than hanging it.
  int feed = -1;
  ASSERT_TRUE(testing_support::eventually([&] { return (feed = open(fifo.c_str(), O_WRONLY | O_NONBLOCK)) >= 0; }, 60s));
  const std::string text = config(producer.producer->control_endpoint(), 4);
  EXPECT_EQ(write(feed, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(feed);
  ASSERT_NE(wait_for_text(daemon, " ready ", 60s), "");
  kill(daemon.pid(), SIGHUP);
  EXPECT_NE(wait_for_text(daemon, "reload refused, keeping the running configuration: '" + fifo + "' is a pipe"), "");
  daemon.terminate();
  ASSERT_NE(wait_for_text(daemon, " stopped", 30s), "") << "SIGTERM unanswered after the reload";
  EXPECT_EQ(daemon.wait(), 0);
}

// One thread ran every model's hooks, one at a time: a model whose hook hung held every other
// model's hooks back until its timeout (an hour may be configured), and a slow hook that ran
// often took turns with theirs. Each model's hooks now run on a lane of their own.
TEST(HookRunner, AHookThatHangsHoldsBackOnlyItsOwnModel) {
  ScratchDir dir;
  const std::string fifo = dir / "release";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  std::mutex mutex;
  std::condition_variable done;
  std::vector<std::string> order;
  modelcastd::HookRunner runner([&](const modelcastd::HookCall& call, bool ok, const std::string& detail) {
    std::lock_guard lock(mutex);
    order.push_back(call.model + std::to_string(call.version) + (ok ? "" : " failed: " + detail));
    done.notify_all();
  });
  auto call = [](const std::string& model, std::uint64_t version, std::vector<std::string> command) {
    modelcastd::HookCall c{.model = model, .version = version, .path = "", .hook = {}};
    c.hook.command = std::move(command);
    return c;
  };
  // a's first hook waits on the FIFO (well within its timeout): opening it for writing returns
  // once the hook has opened it.
  auto waits = call("a", 1, {"/bin/sh", "-c", "read line < " + fifo});
  waits.hook.timeout = std::chrono::minutes(10);
  runner.submit(waits);
  const int release = open(fifo.c_str(), O_WRONLY);
  ASSERT_GE(release, 0) << std::strerror(errno);
  runner.submit(call("a", 2, {"/bin/true"}));
  runner.submit(call("a", 3, {"/bin/true"}));  // a2 not started yet: skipped for the newest
  runner.submit(call("b", 1, {"/bin/true"}));
  {
    std::unique_lock lock(mutex);
    // b's hook ends while a's first still waits on the FIFO.
    EXPECT_TRUE(done.wait_for(lock, 30s, [&] { return !order.empty(); })) << "b's hook waited for a's";
    EXPECT_EQ(order, std::vector<std::string>{"b1"});
  }
  ASSERT_EQ(write(release, "go\n", 3), 3);
  close(release);
  std::unique_lock lock(mutex);
  ASSERT_TRUE(done.wait_for(lock, 30s, [&] { return order.size() == 3; })) << ::testing::PrintToString(order);
  EXPECT_EQ(order, (std::vector<std::string>{"b1", "a1", "a3"}));
}

// httplib read a port past an int with std::stoi, whose exception ended the daemon on the hook
// thread (the config now refuses such a URL; the runner must not die of what it did not foresee).
TEST(HookRunner, AHookThatThrowsIsAFailedHookNotAnEndedDaemon) {
  std::mutex mutex;
  std::condition_variable done;
  std::vector<std::pair<bool, std::string>> results;
  modelcastd::HookRunner runner([&](const modelcastd::HookCall&, bool ok, const std::string& detail) {
    std::lock_guard lock(mutex);
    results.emplace_back(ok, detail);
    done.notify_all();
  });
  modelcastd::HookCall call{.model = "m", .version = 1, .path = "", .hook = {}};
  call.hook.http_post = "http://127.0.0.1:99999999999/load";
  runner.submit(call);
  std::unique_lock lock(mutex);
  ASSERT_TRUE(done.wait_for(lock, 30s, [&] { return !results.empty(); }));
  EXPECT_FALSE(results[0].first);
  EXPECT_NE(results[0].second.find("hook failed: "), std::string::npos) << results[0].second;
}

// A command hook of /bin/sleep 30 with a 300 ms timeout, run once no descriptor can be opened;
// 0 when it was killed at its timeout, in time.
int hook_with_no_descriptor_left() {
  std::promise<std::string> said;
  modelcastd::HookRunner runner([&](const modelcastd::HookCall&, bool, const std::string& detail) { said.set_value(detail); });
  int highest = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd"))
    highest = std::max(highest, std::stoi(entry.path().filename().string()));
  const rlimit none_left{static_cast<rlim_t>(highest + 1), static_cast<rlim_t>(highest + 1)};
  if (setrlimit(RLIMIT_NOFILE, &none_left) != 0) return 3;
  while (open("/dev/null", O_RDONLY | O_CLOEXEC) >= 0) {  // the free numbers below it, kept
  }
  modelcastd::HookCall call{.model = "m", .version = 1, .path = "", .hook = {}};
  call.hook.command = {"/bin/sleep", "30"};
  call.hook.timeout = std::chrono::milliseconds(300);
  const auto start = std::chrono::steady_clock::now();
  runner.submit(call);
  auto answer = said.get_future();
  if (answer.wait_for(20s) != std::future_status::ready) return 4;
  const auto text = answer.get();
  if (text.find("timed out after 300 ms and was killed") == std::string::npos) {
    std::fprintf(stderr, "said: %s\n", text.c_str());
    return 5;
  }
  return std::chrono::steady_clock::now() - start < 10s ? 0 : 6;
}

// Out of descriptors, pidfd_open fails, and the command's end was awaited by a plain waitpid: no
// timeout, and the daemon's stop waited for the hook. Run in a child process (the descriptor
// limit is the process's): a command that outlives its timeout is killed on time all the same.
TEST(HookRunner, ACommandPastItsTimeoutIsKilledWhenNoDescriptorIsLeft) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::_Exit(hook_with_no_descriptor_left()), ::testing::ExitedWithCode(0), "");
}

// A loopback listener that answers nothing: bound, listening, and with its backlog full (of
// connections the test opens and never accepts), so that a further connect stays unanswered.
struct Unanswering {
  int fd = -1;
  std::uint16_t port = 0;
  std::vector<int> queued;
  Unanswering() {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), length), 0) << std::strerror(errno);
    EXPECT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
    EXPECT_EQ(listen(fd, 0), 0);
    port = ntohs(address.sin_port);
    for (int i = 0; i < 3; ++i) {  // fills the accept queue of a listen(0) socket
      int c = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
      connect(c, reinterpret_cast<sockaddr*>(&address), sizeof address);
      queued.push_back(c);
    }
  }
  ~Unanswering() {
    for (int c : queued) close(c);
    close(fd);
  }
};

// How many sockets of this host are still connecting to `port` on loopback (SYN_SENT in
// /proc/net/tcp; those the backlog could not take are among them).
int connecting_to(std::uint16_t port) {
  std::ifstream tcp("/proc/net/tcp");
  std::string line;
  char wanted[16];
  std::snprintf(wanted, sizeof wanted, "0100007F:%04X", port);
  int count = 0;
  while (std::getline(tcp, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state;
    fields >> slot >> local >> remote >> state;
    count += remote == wanted && state == "02";
  }
  return count;
}

// Stopping the daemon during a POST whose connect goes unanswered waited out the connect's
// whole timeout (httplib's stop() waits for the connect), past systemd's stop timeout.
TEST(HookRunner, AStopEndsAPostWhoseConnectGoesUnanswered) {
  Unanswering server;
  std::promise<std::string> said;
  auto runner = std::make_unique<modelcastd::HookRunner>(
      [&](const modelcastd::HookCall&, bool ok, const std::string& detail) { said.set_value((ok ? "ok: " : "") + detail); });
  modelcastd::HookCall call{.model = "m", .version = 1, .path = "", .hook = {}};
  call.hook.http_post = "http://127.0.0.1:" + std::to_string(server.port) + "/load";
  call.hook.timeout = std::chrono::minutes(2);
  const int before = connecting_to(server.port);
  runner->submit(call);
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (connecting_to(server.port) == before && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  ASSERT_GT(connecting_to(server.port), before) << "the POST never began to connect";
  const auto start = std::chrono::steady_clock::now();
  runner.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s) << "the stop waited for the connect";
  auto answer = said.get_future();
  ASSERT_EQ(answer.wait_for(0s), std::future_status::ready);
  EXPECT_NE(answer.get().find("cut short, the daemon is stopping"), std::string::npos);
}

// timeout_ms bounded each read, not the POST: a server sending a byte every 100 ms kept a 500 ms
// hook going for as long as it sent, and the hook was reported a success.
TEST(HookRunner, TimeoutMsBoundsTheWholePostAgainstAServerThatTrickles) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&address), length), 0);
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length), 0);
  ASSERT_EQ(listen(listener, 4), 0);
  std::atomic<bool> trickling{true};
  std::thread server([&] {
    const int c = accept(listener, nullptr, nullptr);
    if (c < 0) return;
    char request[4096];
    [[maybe_unused]] auto got = read(c, request, sizeof request);
    const std::string answer = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}";
    // One byte a tenth of a second, for at most 10 s: until the client goes (a failed send).
    for (std::size_t i = 0; trickling && i < 100; ++i) {
      if (send(c, answer.data() + (i % answer.size()), 1, MSG_NOSIGNAL) != 1) break;
      std::this_thread::sleep_for(100ms);  // the trickle itself, not synchronisation
    }
    close(c);
  });
  std::promise<std::string> said;
  modelcastd::HookRunner runner(
      [&](const modelcastd::HookCall&, bool ok, const std::string& detail) { said.set_value((ok ? "ok: " : "") + detail); });
  modelcastd::HookCall call{.model = "m", .version = 1, .path = "", .hook = {}};
  call.hook.http_post = "http://127.0.0.1:" + std::to_string(ntohs(address.sin_port)) + "/load";
  call.hook.timeout = std::chrono::milliseconds(500);
  const auto start = std::chrono::steady_clock::now();
  runner.submit(call);
  auto answer = said.get_future();
  ASSERT_EQ(answer.wait_for(30s), std::future_status::ready);
  const auto took = std::chrono::steady_clock::now() - start;
  trickling = false;
  server.join();
  close(listener);
  const auto text = answer.get();
  EXPECT_NE(text.find("no complete answer within timeout_ms (500 ms); cut short"), std::string::npos) << text;
  EXPECT_LT(took, 5s) << text;
}

// The peak resident memory of this process, in bytes.
long peak_resident_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss * 1024L;
}

// A POST hook whose server answers 200 with a 512 MiB body streamed in 1 MiB pieces; 0 when the
// hook succeeded and the process's peak memory grew by less than 64 MiB (the body was dropped
// as it came), else a code saying what went wrong. In a fresh process: the peak is per process.
int post_answered_with_a_huge_body() {
  constexpr std::size_t kPiece = 1u << 20, kPieces = 512;
  httplib::Server server;
  const std::string piece(kPiece, 'x');
  server.Post("/load", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content_provider(kPiece * kPieces, "text/plain", [&](std::size_t offset, std::size_t, httplib::DataSink& sink) {
      sink.write(piece.data(), std::min(kPiece, kPiece * kPieces - offset));
      return true;
    });
  });
  const int port = server.bind_to_any_port("127.0.0.1");
  std::thread serving([&] { server.listen_after_bind(); });
  std::promise<std::pair<bool, std::string>> said;
  const long before = peak_resident_bytes();
  {
    modelcastd::HookRunner runner([&](const modelcastd::HookCall&, bool ok, const std::string& detail) {
      said.set_value({ok, detail});
    });
    modelcastd::HookCall call{.model = "m", .version = 1, .path = "", .hook = {}};
    call.hook.http_post = "http://127.0.0.1:" + std::to_string(port) + "/load";
    call.hook.timeout = std::chrono::seconds(60);
    runner.submit(call);
    auto answer = said.get_future();
    if (answer.wait_for(90s) != std::future_status::ready) return 2;
    const auto [ok, detail] = answer.get();
    if (!ok) {
      std::fprintf(stderr, "hook: %s\n", detail.c_str());
      return 3;
    }
  }
  const long grew = peak_resident_bytes() - before;
  server.stop();
  serving.join();
  if (grew >= 64L << 20) {
    std::fprintf(stderr, "peak memory grew by %ld MiB\n", grew >> 20);
    return 4;
  }
  return 0;
}

// The answer's body is of no use to a hook (its status is), and was kept whole in memory: a
// server streaming an endless one grew the daemon by gigabytes until the hook's deadline.
TEST(HookRunner, APostsAnswerIsReadWithoutBeingKept) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::_Exit(post_answered_with_a_huge_body()), ::testing::ExitedWithCode(0), "");
}

// A failed POST was reported in httplib's one word ("POST http://...: Read").
TEST(HookRunner, AFailedPostSaysWhatHappened) {
  std::mutex mutex;
  std::condition_variable done;
  std::map<std::string, std::string> results;
  modelcastd::HookRunner runner([&](const modelcastd::HookCall& call, bool ok, const std::string& detail) {
    std::lock_guard lock(mutex);
    results[call.model] = (ok ? "ok: " : "") + detail;
    done.notify_all();
  });
  // A port nothing listens on (bound, then closed), and one that accepts connections (the kernel
  // completes them from the backlog) but never answers.
  auto bound_socket = [](bool listening) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), length), 0) << std::strerror(errno);
    EXPECT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
    if (listening) {
      EXPECT_EQ(listen(fd, 4), 0);
    }
    return std::pair{fd, ntohs(address.sin_port)};
  };
  auto [closed_fd, closed_port] = bound_socket(false);
  close(closed_fd);
  auto [silent_fd, silent_port] = bound_socket(true);
  auto post = [](const std::string& model, int port) {
    modelcastd::HookCall c{.model = model, .version = 1, .path = "", .hook = {}};
    c.hook.http_post = "http://127.0.0.1:" + std::to_string(port) + "/load";
    c.hook.timeout = std::chrono::milliseconds(300);
    return c;
  };
  runner.submit(post("closed", closed_port));
  runner.submit(post("silent", silent_port));
  std::unique_lock lock(mutex);
  ASSERT_TRUE(done.wait_for(lock, 30s, [&] { return results.size() == 2; }));
  close(silent_fd);
  EXPECT_NE(results["closed"].find(": could not connect"), std::string::npos) << results["closed"];
  EXPECT_NE(results["silent"].find(": no complete answer within timeout_ms (300 ms)"), std::string::npos)
      << results["silent"];
}

TEST_F(DaemonTest, SighupAppliesAChangedModelRefusesABadFileAndRemovesAModel) {
  TestProducer first(1024);
  auto daemon = start_daemon(config(first.producer->control_endpoint(), 4));
  ASSERT_TRUE(first.producer->wait_for_consumers(1, 30s));
  first.publish(1);
  auto c = client();
  ASSERT_TRUE(c.wait_for_version(1, 30s));

  // The same model from another producer (another seed, numbering from 10).
  modelcast::ProducerOptions options;
  options.first_version = 10;
  TestProducer second(1024, options);
  write_file(dir / "modelcastd.toml", config(second.producer->control_endpoint(), 4));
  kill(daemon->pid(), SIGHUP);
  EXPECT_NE(wait_for_text(*daemon, "reloaded"), "");
  ASSERT_TRUE(second.producer->wait_for_consumers(1, 30s));
  second.publish(10, 2);
  auto moved = c.wait_for_version(10, 30s);
  ASSERT_TRUE(moved);
  EXPECT_EQ(sidecar_test::check(moved, 2), "");

  write_file(dir / "modelcastd.toml", config(second.producer->control_endpoint(), 4) + "colour = \"blue\"\n");
  kill(daemon->pid(), SIGHUP);
  EXPECT_NE(wait_for_text(*daemon, "reload refused, keeping the running configuration: " + (dir / "modelcastd.toml")), "");
  EXPECT_EQ(c.acquire().version(), 10u);  // still served

  // A hook whose program is not there would fail at every version: refused, the model still served.
  write_file(dir / "modelcastd.toml", config(second.producer->control_endpoint(), 4,
                                             "[model.hook]\ncommand = [\"" + dir.path + "/no-such-hook\"]\n"));
  kill(daemon->pid(), SIGHUP);
  EXPECT_NE(wait_for_text(*daemon, "program '" + dir.path + "/no-such-hook' is not an executable file"), "");
  EXPECT_EQ(c.acquire().version(), 10u);

  // What --check refuses outside the file is refused at a reload too (it was taken, and the next
  // restart failed): here a socket moved into a directory every user can write.
  const std::string shared = dir.path + "/shared";
  std::filesystem::create_directory(shared);
  std::filesystem::permissions(shared, std::filesystem::perms::all | std::filesystem::perms::sticky_bit);
  std::string moved_socket = config(second.producer->control_endpoint(), 4);
  moved_socket.replace(moved_socket.find(socket()), socket().size(), shared + "/attach.sock");
  write_file(dir / "modelcastd.toml", moved_socket);
  kill(daemon->pid(), SIGHUP);
  EXPECT_NE(wait_for_text(*daemon, "'" + shared + "' is writable by every user"), "");
  EXPECT_EQ(c.acquire().version(), 10u);
  // And a plaintext ipc:// endpoint there, which the model's consumer would refuse: the model
  // was stopped for the change, and then not started again.
  write_file(dir / "modelcastd.toml", config("ipc://" + shared + "/producer.sock", 4));
  kill(daemon->pid(), SIGHUP);
  EXPECT_NE(wait_for_text(*daemon, "reload refused, keeping the running configuration"), "");
  EXPECT_EQ(c.acquire().version(), 10u);

  // An empty file (an editor's, mid-write) configures no model: refused, the model still served.
  write_file(dir / "modelcastd.toml", "");
  kill(daemon->pid(), SIGHUP);
  EXPECT_NE(wait_for_text(*daemon, "configures no model"), "");
  EXPECT_EQ(c.acquire().version(), 10u);

  // "test" removed, another model in its place (whose producer is not there yet).
  write_file(dir / "modelcastd.toml", "[daemon]\nsocket = \"" + socket() + "\"\n[http]\nlisten = \"\"\n"
                                      "[[model]]\nname = \"other\"\nendpoint = \"tcp://127.0.0.1:1\"\nmax_model_bytes = 1024\n");
  kill(daemon->pid(), SIGHUP);
  EXPECT_NE(wait_for_text(*daemon, "reloaded"), "");
  try {
    c.acquire();
    FAIL() << "a removed model is still served";
  } catch (const modelcast::Error& e) {
    EXPECT_EQ(e.code(), modelcast::ErrorCode::kInvalidArgument);
  }
  EXPECT_EQ(sidecar_test::check(moved, 2), "");  // a held version outlives its model's removal
  kill(daemon->pid(), SIGTERM);
  EXPECT_EQ(daemon->wait(), 0);
}

// The writer pruned to `keep` after each write, whatever a hook still ran on: a hook that loaded
// or copied its {path} found it gone mid-way whenever versions came faster than it ran. The
// directory stays while its hook runs, and goes with the first write after.
TEST_F(DaemonTest, AVersionsDirectoryStaysWhileItsHookRunsEvenPastKeep) {
  TestProducer producer(1024);
  const std::string fifo = dir / "release";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  // Version 1's hook waits on the FIFO, then says whether its directory is still there.
  const std::string script = "[ {version} != 1 ] || read line < " + fifo + "; if [ -e {path}/model.safetensors ]; "
                             "then echo present; else echo missing; fi > " + dir.path + "/hook-{version}";
  auto daemon = start_daemon(config(producer.producer->control_endpoint(), 4,
                                    "[model.hook]\ncommand = [\"/bin/sh\", \"-c\", \"" + script + "\"]\n"
                                    "timeout_ms = 600000\n",
                                    repository(dir / "repo", 1)));
  ASSERT_TRUE(producer.producer->wait_for_consumers(1, 30s));
  producer.publish(1);
  // The FIFO opens for writing once the hook has opened it: the hook runs.
  int release = -1;
  ASSERT_TRUE(testing_support::eventually([&] { return (release = open(fifo.c_str(), O_WRONLY | O_NONBLOCK)) >= 0; }, 60s))
      << "version 1's hook never ran";
  producer.publish(2);
  ASSERT_NE(wait_for_text(*daemon, "version 2 written to"), "");
  EXPECT_TRUE(std::filesystem::exists(dir / "repo/test/1/model.safetensors")) << "pruned while its hook ran";
  ASSERT_EQ(write(release, "go\n", 3), 3);
  close(release);
  ASSERT_NE(wait_for_text(*daemon, "hook for version 2: /bin/sh exited with 0"), "");
  std::string said;
  std::ifstream(dir / "hook-1") >> said;
  EXPECT_EQ(said, "present");
  producer.publish(3);
  ASSERT_NE(wait_for_text(*daemon, "version 3 written to"), "");
  EXPECT_FALSE(std::filesystem::exists(dir / "repo/test/1")) << "kept past keep once its hook had ended";
  EXPECT_FALSE(std::filesystem::exists(dir / "repo/test/2"));
}

// A stop asked while a hook runs: the daemon ended the hook only once the hook's timeout passed
// (an hour may be configured), past systemd's stop timeout, which then killed the daemon. A
// command that ignores SIGTERM (so do the children it starts) is killed after the grace.
TEST_F(DaemonTest, AStopEndsTheHookInProgressAndWhatItStarted) {
  TestProducer producer(64);
  const std::string pid_file = dir / "child.pid";
  auto daemon = start_daemon(config(producer.producer->control_endpoint(), 4,
                                    "[model.hook]\ncommand = [\"/bin/sh\", \"-c\", \"trap '' TERM; sleep 600 & echo $! > " +
                                        pid_file + ".part; mv " + pid_file + ".part " + pid_file +
                                        "; wait\"]\ntimeout_ms = 600000\n"));
  ASSERT_TRUE(producer.producer->wait_for_consumers(1, 30s));
  producer.publish(1);
  ASSERT_TRUE(testing_support::eventually([&] { return std::filesystem::exists(pid_file); }, 60s)) << "the hook never ran";
  std::ifstream file(pid_file);
  pid_t child = 0;
  ASSERT_TRUE(file >> child) << "the hook wrote no pid";
  kill(daemon->pid(), SIGTERM);
  EXPECT_NE(wait_for_text(*daemon, "hook for version 1 failed: /bin/sh was killed: the daemon is stopping", 60s), "");
  EXPECT_NE(wait_for_text(*daemon, "stopped", 60s), "") << "the daemon waited for the hook";
  EXPECT_EQ(daemon->wait(), 0);
  EXPECT_TRUE(testing_support::eventually([&] { return !running(child); }, 30s)) << "the hook's child " << child
                                                                                    << " outlived the daemon";
  if (running(child)) kill(child, SIGKILL);
}

// A reload that changes only a model's hook restarted the model, and a restarted model served
// only what the repository held, or nothing: its clients went back a version, or lost the model
// until the producer sent again. The hook changes in place now, and a model that must restart
// serves what it served until its producer delivers.
TEST_F(DaemonTest, AReloadNeverTakesAModelsVersionAway) {
  auto [producer, endpoint, daemon] = serve_first_version();
  auto c = client();
  ASSERT_TRUE(c.wait_for_version(1, 30s));

  write_file(dir / "modelcastd.toml",
             config(endpoint, 4, "[model.hook]\ncommand = [\"/usr/bin/touch\", \"" + dir.path + "/hooked-{version}\"]\n"));
  kill(daemon->pid(), SIGHUP);
  EXPECT_NE(wait_for_text(*daemon, "reload: model test: hook changed (the model runs on)"), "");
  EXPECT_NE(wait_for_text(*daemon, "reloaded"), "");
  producer->publish(2);
  EXPECT_NE(wait_for_text(*daemon, "hook for version 2: /usr/bin/touch exited with 0"), "");
  EXPECT_TRUE(std::filesystem::exists(dir / "hooked-2"));
  auto second = c.wait_for_version(2, 30s);
  ASSERT_TRUE(second);

  // The producer gone, the model moved to another endpoint (nobody there yet): restarted, and
  // still serving version 2, every byte of it.
  producer.reset();
  write_file(dir / "modelcastd.toml", config("tcp://127.0.0.1:1", 4));
  kill(daemon->pid(), SIGHUP);
  EXPECT_NE(wait_for_text(*daemon, "reload: model test changed; restarting it"), "");
  EXPECT_NE(wait_for_text(*daemon, "serving version 2 from before the reload until the producer sends a newer one"), "");
  EXPECT_NE(wait_for_text(*daemon, "reloaded"), "");
  auto kept = c.acquire();
  ASSERT_TRUE(kept) << "the restarted model serves nothing";
  EXPECT_EQ(kept.version(), 2u);
  EXPECT_EQ(sidecar_test::check(kept, 1), "");
  kill(daemon->pid(), SIGTERM);
  EXPECT_EQ(daemon->wait(), 0);
}

// A reload that changes what the model keeps (here a conversion) restarts it, and its new
// Consumer is sent the producer's version already served: served again, as now asked for. It was
// dropped as "the same version", and the old dtype stayed served until the producer's next
// version: for good once training had ended.
TEST_F(DaemonTest, AReloadThatConvertsServesTheSameVersionConvertedWithoutWaitingForTheNext) {
  auto [producer, endpoint, daemon] = serve_first_version();
  auto c = client();
  auto first = c.wait_for_version(1, 30s);
  ASSERT_TRUE(first);
  ASSERT_EQ(first.find("t0")->dtype(), modelcast::DType::kF32);

  write_file(dir / "modelcastd.toml", config(endpoint, 4, "persist = false\n[model.convert]\n\"t0\" = \"bf16\"\n"));
  kill(daemon->pid(), SIGHUP);
  EXPECT_NE(wait_for_text(*daemon, "reload: model test changed; restarting it"), "");
  EXPECT_NE(wait_for_text(*daemon, "reloaded"), "");
  modelcast::sidecar::View converted;
  EXPECT_TRUE(testing_support::eventually(
      [&] {
        converted = c.acquire();
        return converted && converted.find("t0")->dtype() == modelcast::DType::kBF16;
      },
      30s))
      << "version 1 was not served again in bf16";
  EXPECT_EQ(converted.version(), 1u);
  kill(daemon->pid(), SIGTERM);
  EXPECT_EQ(daemon->wait(), 0);
}

// Every reload that restarts a model gives it new buffers; a client that goes on acquiring kept
// each old buffer mapped (and its pages resident) until it went: 20 restarts, 20 mappings of
// buffers the daemon had let go. A connection now keeps at most 16 that no view uses.
TEST_F(DaemonTest, AClientKeepsABoundedNumberOfMappingsAcrossManyModelRestarts) {
  auto [producer, endpoint, daemon] = serve_first_version();
  auto c = client();
  ASSERT_TRUE(c.wait_for_version(1, 30s));
  auto daemon_mappings = [] {
    std::ifstream maps("/proc/self/maps");
    std::size_t n = 0;
    for (std::string line; std::getline(maps, line);) n += line.find("memfd:modelcastd:") != std::string::npos ? 1 : 0;
    return n;
  };
  constexpr std::uint64_t kRestarts = 24;
  for (std::uint64_t v = 2; v < 2 + kRestarts; ++v) {
    write_file(dir / "modelcastd.toml", config(endpoint, v % 2 ? 4 : 5));  // buffers changed: restarted
    kill(daemon->pid(), SIGHUP);
    ASSERT_NE(wait_for_text(*daemon, "reloaded"), "");
    producer->publish(v);
    auto view = c.wait_for_version(v, 30s);
    ASSERT_TRUE(view) << "version " << v;
    EXPECT_EQ(sidecar_test::check(view, 1), "");
  }
  EXPECT_LE(daemon_mappings(), 16u + 1u);  // the cache's unused ones, and the one in use
  EXPECT_EQ(sidecar_test::check(c.acquire(), 1), "");
  kill(daemon->pid(), SIGTERM);
  EXPECT_EQ(daemon->wait(), 0);
}

// A reload whose file names a path that cannot be examined ended the daemon (a std::filesystem
// error past a catch of modelcast::Error): it is refused, and the model serves on.
TEST_F(DaemonTest, AReloadNamingAPathThatCannotBeExaminedIsRefusedAndTheModelServesOn) {
  auto [producer, endpoint, daemon] = serve_first_version();
  auto c = client();
  ASSERT_TRUE(c.wait_for_version(1, 30s));
  std::filesystem::create_symlink(dir / "loop", dir / "loop");
  write_file(dir / "modelcastd.toml", config(endpoint, 5, "", repository(dir / "loop/repo", 2)));
  kill(daemon->pid(), SIGHUP);
  EXPECT_NE(wait_for_text(*daemon, "reload refused, keeping the running configuration: [repository] path"), "");
  producer->publish(2);
  auto second = c.wait_for_version(2, 30s);
  ASSERT_TRUE(second) << "the daemon stopped serving";
  EXPECT_EQ(sidecar_test::check(second, 1), "");
  kill(daemon->pid(), SIGTERM);
  EXPECT_EQ(daemon->wait(), 0);
}

// A version still being written to the repository when a reload restarts its model: its hook
// found the model without one (until the restart, or for good where the restart fails, as here),
// and the restarted Consumer, sent the same version again, dropped it as served: the inference
// server was never told of it. It runs the new configuration's hook.
TEST_F(DaemonTest, AVersionWrittenDuringAReloadThatRestartsItsModelIsHooked) {
  TestProducer producer(128 * 1024);  // 128 MiB: its write outlasts the reload
  const std::string endpoint = producer.producer->control_endpoint();
  auto hook = [&](const std::string& file) {
    return "[model.hook]\ncommand = [\"/usr/bin/touch\", \"" + dir.path + "/" + file + "-{version}\"]\n";
  };
  auto daemon = start_daemon(config(endpoint, 2, hook("old"), repository(dir / "repo", 2), "160MiB"));
  ASSERT_TRUE(producer.producer->wait_for_consumers(1, 30s));
  producer.publish(1);
  std::vector<std::string> lines;
  ASSERT_NE(wait_for_text(*daemon, "installed version 1 ", 60s, &lines), "");
  // Restarted at once, and the restart fails (more than the machine has): the model serves on.
  write_file(dir / "modelcastd.toml", config(endpoint, 2, hook("new"), repository(dir / "repo", 2), "1000000GiB"));
  kill(daemon->pid(), SIGHUP);
  ASSERT_NE(wait_for_text(*daemon, "reloaded", 60s, &lines), "");
  if (std::any_of(lines.begin(), lines.end(),
                  [](const std::string& l) { return l.find("version 1 written to") != std::string::npos; })) {
    GTEST_SKIP() << "version 1 was written before the reload ended: nothing to test on this machine";
  }
  EXPECT_NE(wait_for_text(*daemon, "hook for version 1: /usr/bin/touch exited with 0", 60s, &lines), "");
  EXPECT_TRUE(std::filesystem::exists(dir / "new-1")) << "the new configuration's hook did not run";
  EXPECT_FALSE(std::filesystem::exists(dir / "old-1"));
  kill(daemon->pid(), SIGTERM);
  EXPECT_EQ(daemon->wait(), 0);
}

// A restart is not a removal: while a reload stops a changed model and starts it again, clients
// were told "no model 'test' is configured" and waiters gave up ("removed from the
// configuration"), and a restart that failed (here an allocation no machine can make, which
// --check cannot see) left the model serving nothing, with the log saying "reloaded".
TEST_F(DaemonTest, AModelARestartFailsForKeepsServingAndARestartIsNeverARemoval) {
  auto [producer, endpoint, daemon] = serve_first_version();
  auto c = client();
  ASSERT_TRUE(c.wait_for_version(1, 30s));

  // A reader that acquires without pause, and a waiter for a version that comes after the
  // reloads, both through every restart.
  std::atomic<bool> done{false};
  std::atomic<int> acquired{0}, refused{0};
  std::string first_refusal;
  std::thread reader([&] {
    auto mine = client();
    while (!done) {
      try {
        if (mine.acquire()) ++acquired;
      } catch (const modelcast::Error& e) {
        if (refused++ == 0) first_refusal = e.what();
      }
    }
  });
  std::promise<std::string> waited;
  std::thread waiter([&] {
    auto mine = client();
    try {
      auto view = mine.wait_for_version(2, 60s);
      waited.set_value(view ? "version " + std::to_string(view.version()) : "timed out");
    } catch (const modelcast::Error& e) {
      waited.set_value(e.what());
    }
  });
  struct Joined {  // however the test ends (a failed ASSERT returns with both threads running)
    std::atomic<bool>& done;
    std::thread& reader;
    std::thread& waiter;
    void now() {
      done = true;
      if (reader.joinable()) reader.join();
      if (waiter.joinable()) waiter.join();
    }
    ~Joined() { now(); }
  } joined{done, reader, waiter};
  for (int buffers : {5, 4, 5}) {  // each a changed model: restarted
    write_file(dir / "modelcastd.toml", config(endpoint, buffers));
    kill(daemon->pid(), SIGHUP);
    EXPECT_NE(wait_for_text(*daemon, "reloaded"), "");
  }
  // A restart that fails: the model goes on serving version 1.
  write_file(dir / "modelcastd.toml", config(endpoint, 4, "", "", "1000000GiB"));
  kill(daemon->pid(), SIGHUP);
  EXPECT_NE(wait_for_text(*daemon, "; serving version 1 from before the reload"), "");
  EXPECT_NE(wait_for_text(*daemon, "reloaded"), "");
  modelcast::sidecar::View kept;
  ASSERT_NO_THROW(kept = c.acquire());
  ASSERT_TRUE(kept) << "the model whose restart failed serves nothing";
  EXPECT_EQ(kept.version(), 1u);
  EXPECT_EQ(sidecar_test::check(kept, 1), "");
  // The next reload that starts it serves the version it kept until the producer sends.
  write_file(dir / "modelcastd.toml", config(endpoint, 4));
  kill(daemon->pid(), SIGHUP);
  EXPECT_NE(wait_for_text(*daemon, "serving version 1 from before the reload until the producer sends a newer one"), "");
  EXPECT_NE(wait_for_text(*daemon, "reloaded"), "");
  ASSERT_TRUE(producer->producer->wait_for_consumers(1, 30s));
  producer->publish(2);
  auto answer = waited.get_future();
  ASSERT_EQ(answer.wait_for(60s), std::future_status::ready);
  EXPECT_EQ(answer.get(), "version 2");
  joined.now();
  EXPECT_GT(acquired.load(), 0);
  EXPECT_EQ(refused.load(), 0) << first_refusal;
  kill(daemon->pid(), SIGTERM);
  EXPECT_EQ(daemon->wait(), 0);
}

}  // namespace
}  // namespace daemon_test
