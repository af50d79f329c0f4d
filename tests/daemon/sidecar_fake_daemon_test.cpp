// The sidecar client against a daemon that answers wrongly: a version older than asked for, a
// buffer not sealed against shrinking, a reply the client cannot take, a daemon that accepts and
// closes at once. The inference process must get an error naming what was wrong, never a crash
// (a buffer cut short after mapping raised SIGBUS) or a wrong version, and must not hammer the
// socket.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <future>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "daemon/attach/protocol.h"
#include "daemon/attach/seqpacket.h"
#include "daemon_fixture.h"
#include "modelcast/error.h"
#include "modelcast/sidecar.h"

using namespace std::chrono_literals;
namespace attach = modelcastd::attach;
using daemon_test::ScratchDir;

namespace {

// A listener at a path that scripts the daemon's side, one connection at a time.
class FakeDaemon {
 public:
  explicit FakeDaemon(const std::string& path) : listener_(attach::listen_at(path)) {}
  ~FakeDaemon() {
    for (int fd : connections_) close(fd);
    close(listener_);
  }
  // The next connection, or -1 after `wait`.
  int accept_next(std::chrono::milliseconds wait = 30s) {
    pollfd ready{listener_, POLLIN, 0};
    if (poll(&ready, 1, static_cast<int>(wait.count())) != 1) return -1;
    const int fd = accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) connections_.push_back(fd);
    return fd;
  }
  // The next request on `fd`, or nothing after 30 s or at its end.
  static std::optional<attach::Request> next_request(int fd) {
    pollfd ready{fd, POLLIN, 0};
    if (poll(&ready, 1, 30'000) != 1) return std::nullopt;
    std::vector<char> message;
    std::vector<int> fds;
    if (!attach::receive_message(fd, message, fds)) return std::nullopt;
    for (int received : fds) close(received);
    return attach::decode_request(message);
  }

 private:
  int listener_;
  std::vector<int> connections_;
};

// A one-tensor model of 1024 floats in a memfd of `bytes`, sealed against shrinking or not.
struct Buffer {
  int fd = -1;
  explicit Buffer(bool sealed, std::size_t bytes = 4096) {
    fd = memfd_create("fake-daemon", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) throw std::runtime_error("memfd");
    if (sealed && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) throw std::runtime_error("seal");
  }
  ~Buffer() { close(fd); }
};

attach::Reply version_reply(std::uint64_t version, std::uint64_t hold, std::uint64_t buffer_id = 1) {
  attach::Manifest manifest;
  manifest.hold = hold;
  manifest.buffer_id = buffer_id;
  manifest.buffer_bytes = 4096;
  manifest.version = version;
  manifest.source = "producer";
  manifest.tensors.push_back({"w", modelcast::DType::kF32, {1024}, 0, 4096, {}, {}, {}, 0});
  attach::Reply reply;
  reply.manifest = std::move(manifest);
  return reply;
}

modelcast::sidecar::ClientOptions options_at(const std::string& socket) {
  modelcast::sidecar::ClientOptions options;
  options.socket_path = socket;
  options.model = "m";
  options.connect_timeout = 30s;
  return options;
}

// The error the client's call ended with, "protocol: " before a kProtocol one's ("" if it returned).
std::string error_of(std::future<void>& call) {
  try {
    call.get();
  } catch (const modelcast::Error& e) {
    return (e.code() == modelcast::ErrorCode::kProtocol ? "protocol: " : "other: ") + std::string(e.what());
  }
  return "";
}

// A fake daemon at a scratch path, and a client calling it on a thread of its own.
class SidecarAgainstAFakeDaemon : public ::testing::Test {
 protected:
  // Runs `use` on a new Client of the fake daemon, on its own thread.
  std::future<void> client_call(std::function<void(modelcast::sidecar::Client&)> use,
                                modelcast::sidecar::ClientOptions options = {}) {
    if (options.model.empty()) options = options_at(dir / "a.sock");
    return std::async(std::launch::async, [options, use = std::move(use)] {
      modelcast::sidecar::Client client(options);
      use(client);
    });
  }
  // The client's connection, once its first request is in (returned in `request`).
  int accept_request(std::optional<attach::Request>* request = nullptr) {
    const int fd = daemon.accept_next();
    auto first = fd >= 0 ? FakeDaemon::next_request(fd) : std::nullopt;
    if (request) *request = first;
    return first ? fd : -1;
  }
  // The next message on `fd` is the release of `hold`.
  static void expect_release(int fd, std::uint64_t hold) {
    auto release = FakeDaemon::next_request(fd);
    ASSERT_TRUE(release) << "hold " << hold << " was never released";
    EXPECT_EQ(release->op, attach::Request::Op::kRelease);
    EXPECT_EQ(release->hold, hold);
  }

  ScratchDir dir;
  FakeDaemon daemon{dir / "a.sock"};
};

TEST_F(SidecarAgainstAFakeDaemon, AVersionOlderThanAskedForIsRefusedAndItsHoldReleased) {
  auto call = client_call([](modelcast::sidecar::Client& client) { (void)client.wait_for_version(5, 10s); });
  std::optional<attach::Request> request;
  const int fd = accept_request(&request);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(request->min_version, 5u);
  Buffer buffer(true);
  ASSERT_TRUE(attach::send_message(fd, attach::encode(version_reply(1, 77)), std::vector<int>{buffer.fd}));
  expect_release(fd, 77);
  const auto error = error_of(call);
  EXPECT_NE(error.find("asked for version 5 or newer, it answered with version 1"), std::string::npos) << error;
  EXPECT_EQ(error.rfind("protocol", 0), 0u) << error;
}

// A reply the client cannot decode (a newer daemon's dtype) still held a version: it was never
// released, and pinned the daemon's buffer for good.
TEST_F(SidecarAgainstAFakeDaemon, AVersionReplyTheClientCannotReadIsReleasedAllTheSame) {
  auto call = client_call([](modelcast::sidecar::Client& client) { (void)client.acquire(); });
  const int fd = accept_request();
  ASSERT_GE(fd, 0);
  auto message = attach::encode(version_reply(1, 80));
  // The tensor's dtype "f32" (a 3-byte msgpack string) renamed to one this client does not know.
  const std::string f32 = "\xa3" "f32";
  auto at = std::search(message.begin(), message.end(), f32.begin(), f32.end());
  ASSERT_NE(at, message.end());
  *(at + 1) = 'q';
  Buffer buffer(true);
  ASSERT_TRUE(attach::send_message(fd, message, std::vector<int>{buffer.fd}));
  expect_release(fd, 80);
  const auto error = error_of(call);
  EXPECT_NE(error.find("unknown dtype"), std::string::npos) << error;
}

// A daemon that reads nothing (stopped, hung) once its socket is full: dropping a view blocked in
// its release, for as long as the daemon read nothing, and held every other thread's acquire.
// Releases the socket has no room for wait for the next request, which sends them first.
TEST_F(SidecarAgainstAFakeDaemon, DroppingViewsNeverWaitsOnADaemonThatReadsNothing) {
  constexpr std::uint64_t kViews = 2000;  // far more releases than the socket holds
  std::promise<void> all_acquired, dropped;
  std::promise<std::string> last;
  auto client_thread = std::async(std::launch::async, [&] {
    modelcast::sidecar::Client client(options_at(dir / "a.sock"));
    std::vector<modelcast::sidecar::View> views;
    for (std::uint64_t i = 0; i < kViews; ++i) views.push_back(client.acquire());
    all_acquired.set_value();
    views.clear();  // every release, the daemon reading none
    dropped.set_value();
    try {
      (void)client.acquire();  // sends the releases left, then its request
      last.set_value("");
    } catch (const modelcast::Error& e) {
      last.set_value(e.what());
    }
  });
  // On a failure below, the client may be blocked sending: the connection is cut before the
  // test waits for the client's thread (destroyed after this guard).
  struct CutOnExit {
    int fd = -1;
    ~CutOnExit() {
      if (fd >= 0) shutdown(fd, SHUT_RDWR);
    }
  } cut;
  const int fd = daemon.accept_next();
  ASSERT_GE(fd, 0);
  cut.fd = fd;
  Buffer buffer(true);
  for (std::uint64_t i = 1; i <= kViews; ++i) {
    auto request = FakeDaemon::next_request(fd);
    ASSERT_TRUE(request);
    ASSERT_EQ(request->op, attach::Request::Op::kAcquire);
    ASSERT_TRUE(attach::send_message(fd, attach::encode(version_reply(1, i)), std::vector<int>{buffer.fd}));
  }
  ASSERT_EQ(all_acquired.get_future().wait_for(30s), std::future_status::ready);
  ASSERT_EQ(dropped.get_future().wait_for(30s), std::future_status::ready) << "dropping views waited on the daemon";
  // The daemon reads again: every release comes, then the request.
  std::uint64_t released = 0;
  for (;;) {
    auto request = FakeDaemon::next_request(fd);
    ASSERT_TRUE(request) << released << " releases came, then nothing";
    if (request->op == attach::Request::Op::kAcquire) break;
    ++released;
  }
  EXPECT_EQ(released, kViews);
  ASSERT_TRUE(attach::send_message(fd, attach::encode(version_reply(2, kViews + 1)), std::vector<int>{buffer.fd}));
  EXPECT_EQ(last.get_future().get(), "");
  client_thread.get();
}

// A buffer the daemon could still shrink: mapped, and cut short later, reading it ended the
// inference process with SIGBUS.
TEST_F(SidecarAgainstAFakeDaemon, ABufferNotSealedAgainstShrinkingIsRefused) {
  auto call = client_call([](modelcast::sidecar::Client& client) { (void)client.acquire(); });
  const int fd = accept_request();
  ASSERT_GE(fd, 0);
  Buffer buffer(false);
  ASSERT_TRUE(attach::send_message(fd, attach::encode(version_reply(1, 78)), std::vector<int>{buffer.fd}));
  expect_release(fd, 78);
  const auto error = error_of(call);
  EXPECT_NE(error.find("not sealed against shrinking"), std::string::npos) << error;
}

// A reply carrying more descriptors than the protocol has was reported as "it closed the
// connection" and the request sent again, thousands of times.
TEST_F(SidecarAgainstAFakeDaemon, AReplyWithMoreDescriptorsThanTheProtocolHasIsAProtocolErrorNotARetry) {
  auto call = client_call([](modelcast::sidecar::Client& client) { (void)client.acquire(); });
  const int fd = accept_request();
  ASSERT_GE(fd, 0);
  Buffer a(true), b(true), c(true);
  const int three[] = {a.fd, b.fd, c.fd};
  // Past send_message's own limit of descriptors: the raw sendmsg.
  const auto message = attach::encode(version_reply(1, 79));
  iovec iov{const_cast<char*>(message.data()), message.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof three)]{};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* c0 = CMSG_FIRSTHDR(&msg);
  c0->cmsg_level = SOL_SOCKET;
  c0->cmsg_type = SCM_RIGHTS;
  c0->cmsg_len = CMSG_LEN(sizeof three);
  std::memcpy(CMSG_DATA(c0), three, sizeof three);
  ASSERT_EQ(sendmsg(fd, &msg, MSG_NOSIGNAL), static_cast<ssize_t>(message.size()));
  const auto error = error_of(call);
  EXPECT_NE(error.find("carried over 2 descriptors"), std::string::npos) << error;
  EXPECT_EQ(error.rfind("protocol", 0), 0u) << error;
}

// A daemon that accepts and closes every connection at once: the client reconnects with its
// backoff (10 ms doubling to 500 ms), not some 50,000 times a second, and gives up clearly.
TEST_F(SidecarAgainstAFakeDaemon, ADaemonThatClosesEveryConnectionIsNotHammered) {
  auto options = options_at(dir / "a.sock");
  options.reconnect_timeout = 2s;
  auto call = client_call([](modelcast::sidecar::Client& client) { (void)client.acquire(); }, options);
  int accepted = 0;
  // Until the call ends: waiting for a connection that never comes took 30 s more.
  const auto give_up = std::chrono::steady_clock::now() + 60s;
  while (call.wait_for(0s) != std::future_status::ready && std::chrono::steady_clock::now() < give_up) {
    const int fd = daemon.accept_next(100ms);
    if (fd < 0) continue;
    ++accepted;
    if (FakeDaemon::next_request(fd)) shutdown(fd, SHUT_RDWR);  // else the client gave up on it
  }
  const auto error = error_of(call);
  EXPECT_NE(error.find("again after reconnecting for 2000 ms"), std::string::npos) << error;
  // Within 2 s at 10, 20, 40, ... 500 ms apart: about ten connections; without a pause, tens of
  // thousands.
  EXPECT_LE(accepted, 30) << "connections in 2 s";
  EXPECT_GE(accepted, 2);
}

// A reconnect_timeout of milliseconds::max() is "for ever": it overflowed in nanoseconds, and the
// first lost connection gave up at once ("again after reconnecting for 9223372036854775807 ms").
TEST_F(SidecarAgainstAFakeDaemon, AReconnectTimeoutOfMillisecondsMaxReconnects) {
  auto options = options_at(dir / "a.sock");
  options.reconnect_timeout = std::chrono::milliseconds::max();
  auto call = client_call([](modelcast::sidecar::Client& client) { (void)client.acquire(); }, options);
  const int first = accept_request();
  ASSERT_GE(first, 0);
  shutdown(first, SHUT_RDWR);  // the daemon dropped the connection mid-request
  const int again = accept_request();
  ASSERT_GE(again, 0) << "the client did not reconnect";
  ASSERT_TRUE(attach::send_message(again, attach::encode(attach::Reply{}), {}));
  EXPECT_EQ(error_of(call), "");
}

// The daemon answers a connection's requests in order, and the client had one connection: while
// one thread's wait_for_version waited, another thread's acquire waited behind it, whatever its
// own timeout. Each request in flight now has a connection of its own.
TEST_F(SidecarAgainstAFakeDaemon, OneThreadsLongWaitHoldsUpNoOtherThreadsCall) {
  modelcast::sidecar::Client client(options_at(dir / "a.sock"));
  auto waiting = std::async(std::launch::async, [&] { return client.wait_for_version(5, 120s); });
  std::optional<attach::Request> wait;
  const int first = accept_request(&wait);
  ASSERT_GE(first, 0);
  EXPECT_EQ(wait->min_version, 5u);
  // The wait is with the daemon, unanswered: an acquire on another thread goes ahead.
  auto acquired = std::async(std::launch::async, [&] { return client.acquire(); });
  std::optional<attach::Request> acquire;
  const int second = accept_request(&acquire);
  ASSERT_GE(second, 0) << "the acquire never reached the daemon: it waited for the other thread's wait";
  EXPECT_EQ(acquire->min_version, 0u);
  ASSERT_TRUE(attach::send_message(second, attach::encode(attach::Reply{})));  // no version yet
  EXPECT_TRUE(acquired.get().empty());
  Buffer buffer(true);
  ASSERT_TRUE(attach::send_message(first, attach::encode(version_reply(5, 9)), std::vector<int>{buffer.fd}));
  auto view = waiting.get();
  ASSERT_FALSE(view.empty());
  EXPECT_EQ(view.version(), 5u);
  view = {};
  expect_release(first, 9);  // on the connection that holds it
}

// An answer that came after the client gave up waiting (a hung daemon, then a late reply) stayed
// unread, and the daemon reads nothing more of a connection until its last answer is read: the
// releases of views still on that connection waited, their versions pinned, until its last view
// went. The client reads the late answer at its next call and before it sends releases, and
// releases the answer's hold too.
TEST_F(SidecarAgainstAFakeDaemon, AnAnswerThatCameAfterTheClientGaveUpIsReadAndItsHoldReleased) {
  modelcast::sidecar::Client client(options_at(dir / "a.sock"));
  Buffer buffer(true);
  auto first = std::async(std::launch::async, [&] { return client.acquire(); });
  const int fd = accept_request();
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(attach::send_message(fd, attach::encode(version_reply(1, 1)), std::vector<int>{buffer.fd}));
  auto kept = first.get();
  auto second = std::async(std::launch::async, [&] { return client.acquire(); });
  ASSERT_TRUE(FakeDaemon::next_request(fd)) << "the second call did not come on the idle connection";
  ASSERT_TRUE(attach::send_message(fd, attach::encode(version_reply(1, 2)), std::vector<int>{buffer.fd}));
  auto dropped = second.get();
  // Unanswered until the client gives up: its timeout (0) and a margin of 10 s.
  auto late = std::async(std::launch::async, [&] { return client.wait_for_version(2, 0ms); });
  auto request = FakeDaemon::next_request(fd);
  ASSERT_TRUE(request);
  EXPECT_EQ(request->min_version, 2u);
  std::string error;
  try {
    (void)late.get();
  } catch (const modelcast::Error& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("no answer from the daemon"), std::string::npos) << error;
  ASSERT_TRUE(attach::send_message(fd, attach::encode(version_reply(2, 3)), std::vector<int>{buffer.fd}));
  // The client's next call reads it first (no view need be dropped), on whichever connection the
  // call itself then goes.
  auto third = std::async(std::launch::async, [&] { return client.acquire(); });
  expect_release(fd, 3);
  const int other = accept_request();
  ASSERT_GE(other, 0) << "the third call never came";
  ASSERT_TRUE(attach::send_message(other, attach::encode(attach::Reply{})));  // no version
  EXPECT_TRUE(third.get().empty());
  dropped = {};  // `kept` still holds the connection open
  expect_release(fd, 2);
  kept = {};
  expect_release(fd, 1);
}

// A client closed (destroyed) on one thread while another thread's wait was with the daemon freed
// the state that wait went on to use. The wait now ends as it would have: at its version. A
// Release build survives the use-after-free unseen: daemon.memcheck.SidecarClientClosedDuringAWait
// runs this test under valgrind, which saw it every run.
TEST_F(SidecarAgainstAFakeDaemon, ClosingTheClientLeavesAnotherThreadsWaitToEndAsItWould) {
  auto client = std::make_unique<modelcast::sidecar::Client>(options_at(dir / "a.sock"));
  auto waiting = std::async(std::launch::async, [c = client.get()] { return c->wait_for_version(5, 120s); });
  const int fd = accept_request();
  ASSERT_GE(fd, 0);
  client.reset();  // the wait is in flight: its request reached the daemon
  Buffer buffer(true);
  ASSERT_TRUE(attach::send_message(fd, attach::encode(version_reply(5, 9)), std::vector<int>{buffer.fd}));
  auto view = waiting.get();
  ASSERT_FALSE(view.empty());
  EXPECT_EQ(view.version(), 5u);
  EXPECT_EQ(view.tensors().size(), 1u);
  view = {};
  expect_release(fd, 9);
}

// Threads waiting when the daemon went each tried to reconnect for a reconnect_timeout of their
// own, one after another: the last of three gave up after three times it. They give up together.
TEST_F(SidecarAgainstAFakeDaemon, CallsWaitingWhenTheDaemonWentGiveUpTogether) {
  auto going = std::make_unique<FakeDaemon>(dir / "b.sock");
  auto options = options_at(dir / "b.sock");
  options.reconnect_timeout = 2s;
  modelcast::sidecar::Client client(options);
  std::vector<std::future<std::chrono::steady_clock::time_point>> calls;
  for (int i = 0; i < 3; ++i) {
    calls.push_back(std::async(std::launch::async, [&client] {
      try {
        (void)client.wait_for_version(5, 120s);
        ADD_FAILURE() << "a wait returned with the daemon gone";
      } catch (const modelcast::Error& e) {
        EXPECT_EQ(e.code(), modelcast::ErrorCode::kTransport) << e.what();
      }
      return std::chrono::steady_clock::now();
    }));
    const int fd = going->accept_next();  // each wait on a connection of its own
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(FakeDaemon::next_request(fd));
  }
  going.reset();  // every connection and the listener closed; the socket file stays: refused
  std::vector<std::chrono::steady_clock::time_point> ended;
  for (auto& call : calls) ended.push_back(call.get());
  const auto [first, last] = std::minmax_element(ended.begin(), ended.end());
  // Together: within one reconnect_timeout of one another (one after another: 4 s and more).
  EXPECT_LT(*last - *first, 2s) << "the last gave up "
                                << std::chrono::duration_cast<std::chrono::milliseconds>(*last - *first).count()
                                << " ms after the first";
}


// A forked child inherits the client's connection: dropping its copy of a view released the
// parent's hold, and the daemon wrote the next version into the buffer the parent still read.
// The child now sends nothing on it, so the parent's next request is the next message there.
TEST_F(SidecarAgainstAFakeDaemon, AForkedChildDroppingItsCopyOfAViewLeavesTheParentsHold) {
  auto call = client_call([](modelcast::sidecar::Client& client) {
    auto view = client.acquire();
    ASSERT_TRUE(view);
    const pid_t child = fork();
    if (child == 0) {
      view = {};  // the child's copy released; its exit would do the same
      _exit(0);
    }
    ASSERT_GT(child, 0);
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    (void)client.acquire();  // on the same connection, after whatever the child sent
  });
  const int fd = accept_request();
  ASSERT_GE(fd, 0);
  Buffer buffer(true);
  ASSERT_TRUE(attach::send_message(fd, attach::encode(version_reply(1, 77)), std::vector<int>{buffer.fd}));
  auto next = FakeDaemon::next_request(fd);
  ASSERT_TRUE(next);
  EXPECT_NE(next->op, attach::Request::Op::kRelease) << "the child released hold " << next->hold;
  ASSERT_TRUE(attach::send_message(fd, attach::encode(attach::Reply{}), {}));  // no newer version
  expect_release(fd, 77);  // the parent's own, as its view goes
  EXPECT_EQ(error_of(call), "");
}

// A code the library does not have is the daemon's protocol broken: said as such, with a message
// (C callers got a status outside mc_status and an empty message).
TEST_F(SidecarAgainstAFakeDaemon, ARefusalWithAnUnknownCodeIsAProtocolErrorSayingSo) {
  auto call = client_call([](modelcast::sidecar::Client& client) { (void)client.acquire(); });
  const int fd = accept_request();
  ASSERT_GE(fd, 0);
  attach::Reply refusal;
  refusal.code = 42;
  ASSERT_TRUE(attach::send_message(fd, attach::encode(refusal), {}));
  const auto error = error_of(call);
  EXPECT_NE(error.find("protocol: modelcastd: refused with an unknown error code 42"), std::string::npos) << error;
}

// Signals (a profiler's timer, a watchdog's) interrupt the client's wait for an answer: each one
// restarted the whole wait, so a call on a hung daemon never ended while they came. The limit is
// the daemon's deadline plus 10 s, whatever interrupts it.
TEST_F(SidecarAgainstAFakeDaemon, SignalsDoNotExtendTheWaitForAHungDaemon) {
  sigset_t alarm;
  sigemptyset(&alarm);
  sigaddset(&alarm, SIGALRM);
  // Undone however the test ends, in this order: a signal still pending once the timer is off is
  // taken here, before the default action (which ends the process) comes back.
  struct Alarms {
    sigset_t set;
    struct sigaction before {};
    bool timer = false;
    ~Alarms() {
      if (timer) {
        itimerval off{};
        setitimer(ITIMER_REAL, &off, nullptr);
      }
      timespec now{};
      while (sigtimedwait(&set, nullptr, &now) == SIGALRM) {
      }
      sigaction(SIGALRM, &before, nullptr);
      pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
    }
  } alarms{alarm};
  pthread_sigmask(SIG_BLOCK, &alarm, nullptr);  // only the client's thread takes them
  struct sigaction interrupt {};
  interrupt.sa_handler = [](int) {};  // no SA_RESTART: poll() returns EINTR
  ASSERT_EQ(sigaction(SIGALRM, &interrupt, &alarms.before), 0);
  auto ended = std::make_shared<std::promise<std::string>>();
  auto ended_future = ended->get_future();
  // Not std::async: against a client that never returns, its future's destructor would wait.
  std::thread([ended, options = options_at(dir / "a.sock"), alarm] {
    pthread_sigmask(SIG_UNBLOCK, &alarm, nullptr);
    std::string error = "returned";
    try {
      modelcast::sidecar::Client client(options);
      (void)client.acquire();
    } catch (const modelcast::Error& e) {
      error = e.what();
    }
    ended->set_value(error);
  }).detach();
  const int fd = accept_request();  // and never answered
  ASSERT_GE(fd, 0);
  itimerval every{{0, 200'000}, {0, 200'000}};
  ASSERT_EQ(setitimer(ITIMER_REAL, &every, nullptr), 0);
  alarms.timer = true;
  const auto status = ended_future.wait_for(40s);
  ASSERT_EQ(status, std::future_status::ready) << "still waiting 40 s on a daemon that never answers";
  EXPECT_NE(ended_future.get().find("no answer from the daemon"), std::string::npos);
}

// Connections to `path` its listener never accepts, made until its queue is full (`full`), closed
// at the end.
struct Queued {
  std::vector<int> fds;
  bool full = false;
  explicit Queued(const std::string& path) {
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path.c_str(), sizeof address.sun_path - 1);
    while (fds.size() < 100'000) {
      const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
      if (fd < 0) return;
      if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
        full = errno == EAGAIN;
        close(fd);
        return;
      }
      fds.push_back(fd);
    }
  }
  ~Queued() {
    for (int fd : fds) close(fd);
  }
};

// Calls waiting on a daemon that stopped with its queue full give up together: the second of
// grace for a full queue was counted from when each took its turn to connect, so they gave up a
// second apart, one after another.
TEST_F(SidecarAgainstAFakeDaemon, CallsWaitingOnAStoppedDaemonWithAFullQueueGiveUpTogether) {
  auto options = options_at(dir / "a.sock");
  options.reconnect_timeout = 0ms;
  modelcast::sidecar::Client client(options);
  std::vector<int> accepted;
  std::vector<std::future<std::chrono::steady_clock::time_point>> calls;
  for (int i = 0; i < 4; ++i) {
    calls.push_back(std::async(std::launch::async, [&client] {
      try {
        (void)client.wait_for_version(5, 120s);
      } catch (const modelcast::Error&) {
      }
      return std::chrono::steady_clock::now();
    }));
    const int fd = daemon.accept_next();
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(FakeDaemon::next_request(fd));
    accepted.push_back(fd);
  }
  const Queued queued(dir / "a.sock");
  ASSERT_TRUE(queued.full);
  for (int fd : accepted) shutdown(fd, SHUT_RDWR);  // the daemon went, its queue full
  std::vector<std::chrono::steady_clock::time_point> ended;
  for (auto& call : calls) ended.push_back(call.get());
  const auto [first, last] = std::minmax_element(ended.begin(), ended.end());
  EXPECT_LT(*last - *first, 900ms) << "the calls gave up one after another";
}

// A daemon that accepts nothing (stopped, hung) with its queue of connections full: connect()
// blocked with no limit, so a Client's constructor (or a reconnect) hung past connect_timeout.
TEST_F(SidecarAgainstAFakeDaemon, AFullQueueOfConnectionsEndsTheConnectWithinItsTimeout) {
  const Queued queued(dir / "a.sock");
  ASSERT_TRUE(queued.full);
  auto options = options_at(dir / "a.sock");
  options.connect_timeout = 1s;
  auto ended = std::make_shared<std::promise<std::string>>();
  auto ended_future = ended->get_future();
  std::thread([ended, options] {  // detached: against a connect() that never ends
    std::string error = "connected";
    try {
      modelcast::sidecar::Client client(options);
    } catch (const modelcast::Error& e) {
      error = e.what();
    }
    ended->set_value(error);
  }).detach();
  const auto status = ended_future.wait_for(30s);
  ASSERT_EQ(status, std::future_status::ready) << "connect() still blocked 30 s on a full queue";
  EXPECT_NE(ended_future.get().find("its queue of connections to accept stays full"), std::string::npos);
}


// Mappings of the fake daemon's buffers in this process.
std::size_t fake_daemon_mappings() {
  std::ifstream maps("/proc/self/maps");
  std::size_t count = 0;
  for (std::string line; std::getline(maps, line);) count += line.find("memfd:fake-daemon") != std::string::npos;
  return count;
}

// A connection the client uses no more (the daemon closed it: restarted) kept its whole cache of
// mappings while any one view of it lived: a view held across a restart kept every buffer of the
// dead daemon mapped, and so its shared memory allocated. Only what views hold stays mapped.
TEST_F(SidecarAgainstAFakeDaemon, AConnectionGivenUpKeepsMappedOnlyWhatItsViewsHold) {
  Buffer first(true), second(true);
  const std::size_t before = fake_daemon_mappings();
  std::promise<void> second_held, daemon_gone;
  auto call = client_call([&](modelcast::sidecar::Client& client) {
    ASSERT_TRUE(client.acquire());  // buffer 1, let go at once (cached)
    auto held = client.acquire();   // buffer 2, held
    ASSERT_TRUE(held);
    second_held.set_value();
    daemon_gone.get_future().wait();
    (void)client.acquire();  // finds the connection closed, and connects again
    EXPECT_EQ(fake_daemon_mappings(), before + 1) << "buffer 1 stayed mapped for a connection given up";
  });
  const int fd = accept_request();
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(attach::send_message(fd, attach::encode(version_reply(1, 1, 1)), std::vector<int>{first.fd}));
  expect_release(fd, 1);
  ASSERT_TRUE(FakeDaemon::next_request(fd));
  ASSERT_TRUE(attach::send_message(fd, attach::encode(version_reply(2, 2, 2)), std::vector<int>{second.fd}));
  second_held.get_future().wait();
  shutdown(fd, SHUT_RDWR);  // the daemon went
  daemon_gone.set_value();
  const int again = accept_request();
  ASSERT_GE(again, 0);
  ASSERT_TRUE(attach::send_message(again, attach::encode(attach::Reply{}), {}));
  EXPECT_EQ(error_of(call), "");
}


// A daemon that went, came back late in the reconnect time, dropped the connection again and
// went for good: each reconnect had a whole reconnect_timeout of its own, so the call gave up
// after up to twice it. It gives up reconnect_timeout after it first lost the daemon.
TEST_F(SidecarAgainstAFakeDaemon, ReconnectingEndsReconnectTimeoutAfterTheFirstLoss) {
  const std::string path = dir / "b.sock";
  auto options = options_at(path);
  options.reconnect_timeout = 3s;
  std::optional<FakeDaemon> b(std::in_place, path);
  auto call = client_call([](modelcast::sidecar::Client& client) { (void)client.wait_for_version(5, 60s); }, options);
  const int first = b->accept_next();
  ASSERT_GE(first, 0);
  ASSERT_TRUE(FakeDaemon::next_request(first));
  const auto lost = std::chrono::steady_clock::now();
  b.reset();  // the daemon goes: its listener and the connection closed
  // The scenario's downtime (the client retries meanwhile), not a wait for anything: back 2.5 s
  // of the 3 later, it takes one connection, drops it, and goes for good.
  std::this_thread::sleep_for(2500ms);
  b.emplace(path);
  const int again = b->accept_next();
  ASSERT_GE(again, 0);
  b.reset();
  const auto error = error_of(call);
  const auto ended = std::chrono::steady_clock::now();
  EXPECT_NE(error.find("did not come back within 3000 ms"), std::string::npos) << error;
  EXPECT_LT(ended - lost, 4500ms) << "the call went on reconnecting past reconnect_timeout";
}
}  // namespace
