#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <future>
#include <numeric>
#include <string>

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "child_process.h"
#include "forked_child.h"
#include "common/host_buffer.h"
#include "modelcast/error.h"
#include "modelcast/modelcast_runtime.h"
#include "transports/ucx/ucx_transport.h"

namespace modelcast::transport {
namespace {

using namespace std::chrono_literals;

struct Done {
  std::promise<TransferResult> promise;
  Completion callback() {
    return [this](const TransferResult& r) { promise.set_value(r); };
  }
  TransferResult get() {
    auto future = promise.get_future();
    if (future.wait_for(30s) != std::future_status::ready) return {false, "timed out"};
    return future.get();
  }
};

class UcxTransportTest : public ::testing::TestWithParam<bool> {};

TEST_P(UcxTransportTest, MovesBytesBetweenRegisteredRegionsByTag) {
  // Declared first, destroyed last: the transports complete the unmatched receive (cancelled)
  // when they shut down, and its callback must still have somewhere to go.
  Done received, sent, other;
  auto sender = make_ucx_transport();
  auto receiver = make_ucx_transport();
  EXPECT_TRUE(sender->capabilities().moves(MemoryKind::kHost, MemoryKind::kHost));
  constexpr std::size_t kSize = 3u << 20;  // above UCX's rendezvous threshold
  HostBuffer source(kSize);
  HostBuffer target(2 * kSize);
  auto* bytes = reinterpret_cast<std::uint32_t*>(source.data());
  std::iota(bytes, bytes + kSize / 4, 7u);
  auto source_region = sender->register_memory(source.data(), source.size(), MemoryLocation::host());
  auto target_region = receiver->register_memory(target.data(), target.size(), MemoryLocation::host());
  auto peer = sender->connect(receiver->address(), /*detect_failure=*/GetParam(), nullptr);

  // Two receives with different tags: the message must land only in the matching one.
  receiver->post_recv(*target_region, kSize, kSize, /*tag=*/2, other.callback());
  receiver->post_recv(*target_region, 0, kSize, /*tag=*/1, received.callback());
  sender->post_send(peer, *source_region, 0, kSize, /*tag=*/1, sent.callback());
  auto r = received.get();
  ASSERT_TRUE(r.ok) << r.error;
  ASSERT_TRUE(sent.get().ok);
  EXPECT_EQ(std::memcmp(source.data(), target.data(), kSize), 0);
  EXPECT_EQ(target.data()[kSize], std::byte{0}) << "the tag-2 receive got data";
}

// UCX ends a receive matched by a shorter message as a success: the transport fails it, naming
// both lengths, eager (small) or rendezvous, posted before the message came or after it arrived
// (an eager one then ends within the receive call). It succeeded, the bytes past the message
// being the buffer's older ones.
TEST_P(UcxTransportTest, AReceiveMatchedByAShorterMessageFails) {
  for (std::size_t size : {std::size_t{1024}, std::size_t{3u << 20}}) {
    for (bool receive_first : {true, false}) {
      Done received, sent, marker_sent, marker_received;
      auto sender = make_ucx_transport();
      auto receiver = make_ucx_transport();
      HostBuffer source(size), target(size + 64);
      auto source_region = sender->register_memory(source.data(), source.size(), MemoryLocation::host());
      auto target_region = receiver->register_memory(target.data(), target.size(), MemoryLocation::host());
      auto peer = sender->connect(receiver->address(), /*detect_failure=*/GetParam(), nullptr);
      if (receive_first) receiver->post_recv(*target_region, 0, size, /*tag=*/5, received.callback());
      sender->post_send(peer, *source_region, 0, size / 2, /*tag=*/5, sent.callback());
      if (!receive_first) {
        // A message sent after it on the same connection, received: the first one is here too.
        sender->post_send(peer, *source_region, 0, 64, /*tag=*/6, marker_sent.callback());
        receiver->post_recv(*target_region, size, 64, /*tag=*/6, marker_received.callback());
        ASSERT_TRUE(marker_received.get().ok);
        receiver->post_recv(*target_region, 0, size, /*tag=*/5, received.callback());
        EXPECT_TRUE(marker_sent.get().ok);
      }
      const auto r = received.get();
      EXPECT_FALSE(r.ok) << size << " " << receive_first;
      EXPECT_EQ(r.error, "a message of " + std::to_string(size / 2) + " bytes arrived for a receive of " +
                             std::to_string(size))
          << size << " receive first " << receive_first;
      EXPECT_TRUE(sent.get().ok) << size;
    }
  }
}

TEST_P(UcxTransportTest, CancelledReceiveCompletesWithAnError) {
  Done done;
  auto receiver = make_ucx_transport();
  HostBuffer target(1 << 20);
  auto region = receiver->register_memory(target.data(), target.size(), MemoryLocation::host());
  auto id = receiver->post_recv(*region, 0, target.size(), 99, done.callback());
  receiver->cancel(id);
  auto r = done.get();
  EXPECT_FALSE(r.ok);
  EXPECT_FALSE(r.error.empty());
}

TEST_P(UcxTransportTest, SendToUnknownPeerFailsCleanly) {
  Done done;
  auto sender = make_ucx_transport();
  HostBuffer source(4096);
  auto region = sender->register_memory(source.data(), source.size(), MemoryLocation::host());
  sender->post_send(12345, *region, 0, 4096, 1, done.callback());
  auto r = done.get();
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("not connected"), std::string::npos) << r.error;
}

// What a producer does when a consumer's lease lapses mid-transfer: cancel the chunk sends
// (rendezvous over TCP, received or not). The peer must stay usable for the next transfer.
TEST_P(UcxTransportTest, CancelledSendsLeaveThePeerUsableOverTcp) {
  setenv("UCX_TLS", "tcp,self", 1);
  constexpr std::size_t kChunk = 8u << 20, kChunks = 8;
  std::vector<std::unique_ptr<Done>> sends, receives;
  for (std::size_t i = 0; i < kChunks; ++i) {
    sends.push_back(std::make_unique<Done>());
    receives.push_back(std::make_unique<Done>());
  }
  Done next_sent, next_received;
  auto sender = make_ucx_transport();
  auto receiver = make_ucx_transport();
  unsetenv("UCX_TLS");
  HostBuffer source(kChunk * kChunks);
  HostBuffer target(kChunk * kChunks);
  auto source_region = sender->register_memory(source.data(), source.size(), MemoryLocation::host());
  auto target_region = receiver->register_memory(target.data(), target.size(), MemoryLocation::host());
  auto peer = sender->connect(receiver->address(), GetParam(), nullptr);
  std::vector<TransferId> recv_ids, send_ids;
  for (std::size_t i = 0; i < kChunks; ++i) {
    recv_ids.push_back(receiver->post_recv(*target_region, i * kChunk, kChunk, 1000 + i, receives[i]->callback()));
  }
  for (std::size_t i = 0; i < kChunks; ++i) {
    send_ids.push_back(sender->post_send(peer, *source_region, i * kChunk, kChunk, 1000 + i, sends[i]->callback()));
  }
  // Mid-transfer: the first chunk has landed, the others are on their way.
  ASSERT_TRUE(receives[0]->get().ok);
  for (auto id : send_ids) sender->cancel(id);
  for (std::size_t i = 1; i < kChunks; ++i) sends[i]->get();  // completed or cancelled, but completed
  for (auto id : recv_ids) receiver->cancel(id);
  for (std::size_t i = 1; i < kChunks; ++i) receives[i]->get();

  std::iota(reinterpret_cast<std::uint32_t*>(source.data()), reinterpret_cast<std::uint32_t*>(source.data()) + kChunk / 4, 5u);
  receiver->post_recv(*target_region, 0, kChunk, 7, next_received.callback());
  sender->post_send(peer, *source_region, 0, kChunk, 7, next_sent.callback());
  auto r = next_received.get();
  ASSERT_TRUE(r.ok) << "the transfer after the cancelled ones: " << r.error;
  EXPECT_TRUE(next_sent.get().ok);
  EXPECT_EQ(std::memcmp(source.data(), target.data(), kChunk), 0);
}

// A peer over TCP (peer-failure handling on) disconnected while a send to it is under way, as a
// producer cuts off a slow consumer whose chunk outlasted the lease: closing its endpoint by
// force then crashed UCX 1.13 a few cut-offs later (UcxQuirks). The send is let finish, and the
// bytes arrive whole; a peer that takes nothing (no receive posted) has its endpoint closed by
// force after busy_close_grace, which ends the send.
TEST(UcxTransport, ADisconnectedPeersSendUnderWayIsLetFinishAndOneNeverTakenIsEndedAfterTheGrace) {
  constexpr std::size_t kSize = 64u << 20;  // on its way for tens of ms over loopback TCP
  Done received, sent, never_sent;
  setenv("UCX_TLS", "tcp,self", 1);
  UcxOptions options;
  options.busy_close_grace = 300ms;
  auto sender = make_ucx_transport(options);
  auto receiver = make_ucx_transport();
  auto idle = make_ucx_transport();
  unsetenv("UCX_TLS");
  HostBuffer source(kSize), target(kSize);
  std::iota(reinterpret_cast<std::uint32_t*>(source.data()), reinterpret_cast<std::uint32_t*>(source.data()) + kSize / 4, 3u);
  auto source_region = sender->register_memory(source.data(), source.size(), MemoryLocation::host());
  auto target_region = receiver->register_memory(target.data(), target.size(), MemoryLocation::host());
  auto peer = sender->connect(receiver->address(), /*detect_failure=*/true, nullptr);
  receiver->post_recv(*target_region, 0, kSize, 1, received.callback());
  sender->post_send(peer, *source_region, 0, kSize, 1, sent.callback());
  sender->disconnect(peer);  // queued behind the send: it is under way, not finished
  auto r = received.get();
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_TRUE(sent.get().ok) << "the send under way was ended by the disconnection";
  EXPECT_EQ(std::memcmp(source.data(), target.data(), kSize), 0);

  auto taker_of_nothing = sender->connect(idle->address(), /*detect_failure=*/true, nullptr);
  {
    // The connection made first (a send waiting on its wireup is no send under way).
    Done hello_sent, hello_received;
    HostBuffer hello(4096);
    auto hello_region = idle->register_memory(hello.data(), hello.size(), MemoryLocation::host());
    idle->post_recv(*hello_region, 0, 4096, 3, hello_received.callback());
    sender->post_send(taker_of_nothing, *source_region, 0, 4096, 3, hello_sent.callback());
    ASSERT_TRUE(hello_received.get().ok);
    ASSERT_TRUE(hello_sent.get().ok);
  }
  sender->post_send(taker_of_nothing, *source_region, 0, kSize, 2, never_sent.callback());
  sender->disconnect(taker_of_nothing);
  // The forced close comes after the 300 ms grace, and ends the send within a few progress rounds
  // (the progress thread went to sleep after the close, and the send ended only when something
  // woke it: UCX's next keepalive round, 20 s on).
  auto ending = never_sent.promise.get_future();
  ASSERT_EQ(ending.wait_for(10s), std::future_status::ready) << "a send nobody takes was not ended after the grace";
  EXPECT_FALSE(ending.get().ok);
}

TEST(UcxTransport, GarbageAddressIsAClearError) {
  auto sender = make_ucx_transport();
  std::vector<std::byte> garbage(16, std::byte{0x5A});
  try {
    sender->connect(garbage, true, nullptr);
    FAIL() << "connected to a garbage address";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTransport);
  }
}

// A producer connects a consumer the way the transport says. UCX offers shared memory only to
// endpoints without failure detection, so it gives detection up for a peer on this machine
// whenever UCX_TLS leaves shared memory on, and keeps it otherwise.
TEST(UcxTransport, DetectsFailureOnOneMachineOnlyWhereSharedMemoryIsOff) {
  auto transport = make_ucx_transport();
  for (const char* tls : {"", "^tcp", "tcp,sm", "shm,self", "all"}) {
    setenv("UCX_TLS", tls, 1);
    EXPECT_FALSE(transport->detects_failure_at(Reach::kProcess)) << "UCX_TLS=" << tls;
    EXPECT_FALSE(transport->detects_failure_at(Reach::kHost)) << "UCX_TLS=" << tls;
    EXPECT_TRUE(transport->detects_failure_at(Reach::kNetwork)) << "UCX_TLS=" << tls;
  }
  // An exclusion list that leaves every shared-memory transport out leaves it off too.
  for (const char* tls : {"tcp,self", "^sm", "^shm,ib"}) {
    setenv("UCX_TLS", tls, 1);
    EXPECT_TRUE(transport->detects_failure_at(Reach::kProcess)) << "UCX_TLS=" << tls;
    EXPECT_TRUE(transport->detects_failure_at(Reach::kHost)) << "UCX_TLS=" << tls;
    EXPECT_TRUE(transport->detects_failure_at(Reach::kNetwork)) << "UCX_TLS=" << tls;
  }
  unsetenv("UCX_TLS");
  EXPECT_FALSE(transport->detects_failure_at(Reach::kHost)) << "UCX_TLS unset";
}

// A consumer on this host killed while a version is sent to it: UCX 1.13 never ends those sends,
// not even once their endpoint is closed by force (UcxQuirks::sends_to_dead_near_peer_never_end),
// so releasing their region used to wait out release_timeout before it halted the worker: a
// producer whose consumer had died took 5 s to exit. Sends whose endpoint was closed a second
// before are given up at once. Here release_timeout is a minute; the release must not wait it.
TEST(UcxTransport, ReleasingARegionDoesNotWaitOnSendsToADeadPeerWhoseEndpointClosed) {
  Done sent, after;  // outlive the transport: a halted worker is never progressed, so never called
  testing_support::ChildProcess sink({MODELCAST_UCX_SINK_PEER});
  auto hex = sink.read_line();
  ASSERT_TRUE(hex && !hex->empty() && hex->size() % 2 == 0) << "the sink peer printed no address";
  std::vector<std::byte> address;
  for (std::size_t i = 0; i < hex->size(); i += 2) {
    address.push_back(static_cast<std::byte>(std::stoul(hex->substr(i, 2), nullptr, 16)));
  }
  auto sender = make_ucx_transport({.release_timeout = 60s});
  constexpr std::size_t kSize = 16u << 20;  // rendezvous
  HostBuffer source(kSize);
  auto region = sender->register_memory(source.data(), source.size(), MemoryLocation::host());
  auto peer = sender->connect(address, sender->detects_failure_at(Reach::kHost), nullptr);
  sender->post_send(peer, *region, 0, kSize, /*tag=*/1, sent.callback());
  sink.kill_now();
  ASSERT_EQ(sink.wait(), 128 + SIGKILL);
  sender->disconnect(peer);  // as the producer does when it drops the consumer

  auto released = std::async(std::launch::async, [&] { region.reset(); });
  EXPECT_EQ(released.wait_for(30s), std::future_status::ready)
      << "releasing the region waited on sends to a dead peer (release_timeout is 60 s)";
  released.wait();
  // Either the send ended (a UCX that ends such sends) or the worker was halted, so that
  // nothing reads the freed memory: new transfers then fail at once, saying so.
  HostBuffer other(4096);
  auto other_region = sender->register_memory(other.data(), other.size(), MemoryLocation::host());
  sender->post_send(peer, *other_region, 0, other.size(), 2, after.callback());
  auto r = after.get();
  EXPECT_FALSE(r.ok);
  auto s = sent.promise.get_future();
  if (s.wait_for(0s) != std::future_status::ready) {
    EXPECT_NE(r.error.find("halted"), std::string::npos) << r.error;
    // The halted worker is left open for the rest of this process, so a child forked now gets
    // no transport; it must be told the cause, as every Producer and Consumer here is closed.
    other_region.reset();
    sender.reset();
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      int outcome = 3;  // made one
      try {
        make_ucx_transport({});
      } catch (const modelcast::Error& e) {
        outcome = std::string(e.what()).find("halted on a peer that never answered") != std::string::npos ? 0 : 4;
      }
      _exit(outcome);
    }
    int status = 0;
    ASSERT_TRUE(testing_support::child_ended(child, 60s, status)) << "the forked child hung";
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "the child was not told that its parent left a halted transport open";
  }
}

// At debug level UCX describes each new endpoint's lanes; that goes where the log goes (here a
// handler, as a C or Fortran program installs), not to stderr regardless. In a child, whose
// stderr is a file read afterwards.
TEST(UcxTransport, AnEndpointsDescriptionGoesToTheLogHandlerNotToStderr) {
  char path[] = "/tmp/modelcast-stderr-XXXXXX";
  const int file = mkstemp(path);
  ASSERT_GE(file, 0);
  const pid_t child = fork();
  ASSERT_NE(child, -1);
  if (child == 0) {
    dup2(file, STDERR_FILENO);
    static bool described = false;
    mc_set_log_handler(
        [](mc_log_level, const char*, const char* message, void*) {
          if (std::strstr(message, "endpoint to a new peer") != nullptr && std::strstr(message, "lane") != nullptr) {
            described = true;
          }
        },
        nullptr);
    mc_set_log_level(MC_LOG_DEBUG);
    {
      auto sender = make_ucx_transport();
      auto receiver = make_ucx_transport();
      sender->connect(receiver->address(), /*detect_failure=*/false, nullptr);
    }
    mc_set_log_handler(nullptr, nullptr);
    _exit(described ? 0 : 1);
  }
  int status = 0;
  ASSERT_TRUE(testing_support::child_ended(child, std::chrono::seconds(60), status));
  std::string written(static_cast<std::size_t>(lseek(file, 0, SEEK_END)), '\0');
  ASSERT_EQ(pread(file, written.data(), written.size(), 0), static_cast<ssize_t>(written.size()));
  close(file);
  unlink(path);
  ASSERT_TRUE(WIFEXITED(status)) << "the child was ended by a signal";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the handler was not given the endpoint's description";
  EXPECT_EQ(written.find("lane["), std::string::npos) << "written to stderr:\n" << written;
}

INSTANTIATE_TEST_SUITE_P(ErrorHandling, UcxTransportTest, ::testing::Values(false, true),
                         [](const auto& param_info) { return param_info.param ? "PeerFailureDetection" : "NoFailureDetection"; });

}  // namespace
}  // namespace modelcast::transport
