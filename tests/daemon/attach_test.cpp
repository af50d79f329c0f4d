// modelcastd with a producer and local clients: every byte of every version in two client
// processes while updates stream, holds that pin old versions, and a killed client's holds.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <future>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "common/shown_text.h"
#include "daemon/attach/attach_server.h"
#include "daemon/attach/descriptor_closer.h"
#include "daemon/attach/protocol.h"
#include "daemon/attach/seqpacket.h"
#include "daemon/shm_buffer.h"
#include "daemon_fixture.h"
#include "eventually.h"
#include "process_status.h"
#include "modelcast/sidecar.h"
#include "sidecar_check.h"

namespace daemon_test {
namespace {

using exchange_test::TestProducer;

TEST_F(DaemonTest, TwoClientProcessesSeeEveryByteOfEveryVersionWhileUpdatesStream) {
  TestProducer producer(1024);
  auto daemon = start_daemon(config(producer.producer->control_endpoint(), 4));
  ASSERT_TRUE(producer.producer->wait_for_consumers(1, 30s));
  constexpr std::uint64_t kVersions = 20;
  auto a = start_peer({"follow", "--until-version", std::to_string(kVersions), "--readers", "2"});
  auto b = start_peer({"follow", "--until-version", std::to_string(kVersions), "--readers", "2"});
  ASSERT_TRUE(a->wait_for_line("attached"));
  ASSERT_TRUE(b->wait_for_line("attached"));
  auto observer = client();
  for (std::uint64_t v = 1; v <= kVersions; ++v) {
    producer.publish(v);
    // Publishing faster than delivery is allowed (versions are skipped); pace every fifth so
    // that clients really do read while newer versions arrive.
    if (v % 5 == 0) {
      ASSERT_TRUE(observer.wait_for_version(v, 30s)) << "version " << v << " never served";
    }
  }
  EXPECT_EQ(a->wait(), 0);
  EXPECT_EQ(b->wait(), 0);
  for (auto* peer : {a.get(), b.get()}) {
    bool saw_last = false;
    for (const auto& line : peer->lines()) {
      EXPECT_EQ(line.find("torn"), std::string::npos) << line;
      EXPECT_EQ(line.find("corrupt"), std::string::npos) << line;
      saw_last = saw_last || line == "seen " + std::to_string(kVersions);
    }
    EXPECT_TRUE(saw_last);
  }
}

TEST_F(DaemonTest, AClientHoldingAnOldVersionKeepsItsBytesWhileThreeNewerArrive) {
  TestProducer producer(1024);
  // Three buffers: without the hold, version 3 would be received into version 1's buffer.
  auto daemon = start_daemon(config(producer.producer->control_endpoint(), 3));
  ASSERT_TRUE(producer.producer->wait_for_consumers(1, 30s));
  auto c = client();
  producer.publish(1);
  auto held = c.wait_for_version(1, 30s);
  ASSERT_TRUE(held);
  ASSERT_EQ(held.version(), 1u);
  EXPECT_EQ(held.source(), "producer");
  for (std::uint64_t v = 2; v <= 4; ++v) {
    producer.publish(v);
    auto newest = c.wait_for_version(v, 30s);
    ASSERT_TRUE(newest) << "version " << v;
    EXPECT_EQ(sidecar_test::check(newest, 1), "");
  }
  EXPECT_EQ(held.version(), 1u);
  EXPECT_EQ(sidecar_test::check(held, 1), "");
}

TEST_F(DaemonTest, AttachedMemoryIsReadOnlyAndMappedOncePerBuffer) {
  TestProducer producer(1024);
  auto daemon = start_daemon(config(producer.producer->control_endpoint(), 3));
  ASSERT_TRUE(producer.producer->wait_for_consumers(1, 30s));
  auto c = client();
  producer.publish(1);
  auto first = c.wait_for_version(1, 30s);
  ASSERT_TRUE(first);
  auto again = c.acquire();
  // The same buffer is not mapped twice: both views point into one mapping.
  EXPECT_EQ(first.tensors()[0].data, again.tensors()[0].data);
  // Writing through the view's address is refused by the kernel (read-only mapping).
  auto page = reinterpret_cast<std::uintptr_t>(first.tensors()[0].data) & ~std::uintptr_t{4095};
  EXPECT_NE(mprotect(reinterpret_cast<void*>(page), 4096, PROT_READ | PROT_WRITE), 0);
}

TEST_F(DaemonTest, AKilledClientReleasesItsHold) {
  TestProducer producer(1024);
  // Two buffers: while version 1 is held and version 2 served, version 3 has nowhere to land.
  auto daemon = start_daemon(config(producer.producer->control_endpoint(), 2));
  ASSERT_TRUE(producer.producer->wait_for_consumers(1, 30s));
  producer.publish(1);
  auto holder = start_peer({"hold"});
  ASSERT_TRUE(holder->wait_for_line("held 1", 30s));
  auto c = client();
  producer.publish(2);
  ASSERT_TRUE(c.wait_for_version(2, 30s));
  producer.publish(3);
  // Absence over a bounded window: version 3 cannot be received while version 1 is pinned.
  EXPECT_FALSE(c.wait_for_version(3, 1500ms)) << "the hold did not pin version 1's buffer";
  holder->kill_now();
  auto third = c.wait_for_version(3, 30s);
  ASSERT_TRUE(third) << "the killed client's hold was not released";
  EXPECT_EQ(sidecar_test::check(third, 1), "");
}

TEST_F(DaemonTest, AModelWhoseManifestExceedsOneSocketMessageAttaches) {
  // 3,000 tensors with long names: a manifest of some 300 KiB, more than the kernel lets one
  // socket message be by default. It travels in a memfd.
  constexpr std::size_t kTensors = 3000;
  std::vector<testmodel::Tensor> model(kTensors);
  for (std::size_t i = 0; i < kTensors; ++i) {
    model[i].spec = {"model.decoder.layers." + std::to_string(i) + ".self_attention.query_key_value.weight.shard_0000",
                     modelcast::DType::kF32, {4}};
    model[i].words.resize(2);
  }
  modelcast::ProducerOptions options;
  options.model_name = "test";
  modelcast::Producer producer(options);
  for (auto& t : model) producer.register_tensor({t.spec, t.words.data()});
  auto daemon = start_daemon(config(producer.control_endpoint(), 2, "", "", "16MiB"));
  ASSERT_TRUE(producer.wait_for_consumers(1, 60s));
  testmodel::fill(model, 1, 1);
  producer.publish(1);
  auto view = client().wait_for_version(1, 60s);
  ASSERT_TRUE(view);
  EXPECT_EQ(view.tensor_count(), kTensors);
  EXPECT_EQ(sidecar_test::check(view, 1), "");
}

// The socket file removed under a running daemon (rm, a cleaner of /tmp) locked every new client
// out without a word, while /healthz said all was well: it is made again, and said.
TEST_F(DaemonTest, ARemovedSocketFileIsMadeAgainForNewClients) {
  auto [producer, endpoint, daemon] = serve_first_version();
  auto connected = client();
  ASSERT_TRUE(connected.wait_for_version(1, 30s));
  ASSERT_TRUE(std::filesystem::remove(socket()));
  ASSERT_NE(wait_for_text(*daemon, "was removed; listening there again"), "");
  auto fresh = client();
  auto view = fresh.acquire();
  ASSERT_TRUE(view);
  EXPECT_EQ(view.version(), 1u);
  EXPECT_TRUE(connected.acquire()) << "a client connected before lost its connection";
}

TEST_F(DaemonTest, UnknownModelIsAnInvalidArgument) {
  TestProducer producer(64);
  auto daemon = start_daemon(config(producer.producer->control_endpoint(), 2));
  modelcast::sidecar::Client other({socket(), "nope", 30s});
  try {
    other.acquire();
    FAIL() << "acquire of an unconfigured model succeeded";
  } catch (const modelcast::Error& e) {
    EXPECT_EQ(e.code(), modelcast::ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("nope"), std::string::npos);
  }
}

// A client can open a version's buffer again through /proc/self/fd read-write (the descriptor it
// is given is read-only, but a memfd's mode is 0777): it then wrote what every other reader
// sees. Sealed against writes after the daemon's own mapping, only that mapping writes it.
TEST(ShmBuffer, NoOneButTheDaemonsOwnMappingCanWriteIt) {
  modelcastd::ShmBuffer buffer("test", 4096);
  buffer.memory()[0] = std::byte{7};  // the daemon's mapping: written as versions arrive
  const std::string again = "/proc/self/fd/" + std::to_string(buffer.read_only_fd());
  const int writable = open(again.c_str(), O_RDWR | O_CLOEXEC);
  if (writable >= 0) {
    const char byte = 1;
    EXPECT_LT(write(writable, &byte, 1), 0) << "a descriptor opened again read-write wrote the buffer";
    void* mapped = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, writable, 0);
    EXPECT_EQ(mapped, MAP_FAILED) << "a descriptor opened again read-write mapped the buffer writable";
    if (mapped != MAP_FAILED) munmap(mapped, 4096);
    close(writable);
  }
  void* readable = mmap(nullptr, 4096, PROT_READ, MAP_SHARED, buffer.read_only_fd(), 0);
  ASSERT_NE(readable, MAP_FAILED) << std::strerror(errno);
  buffer.memory()[0] = std::byte{9};
  EXPECT_EQ(static_cast<const std::byte*>(readable)[0], std::byte{9});
  munmap(readable, 4096);
}

// A listening socket on loopback and a socket connected to it (in its accept queue, not yet
// accepted): {listener, connected}, the second -1 (errno set) where either could not be made.
std::pair<int, int> loopback_connection() {
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  if (listener < 0 || bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      listen(listener, 1) != 0 || getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    return {listener, -1};
  }
  const int connected = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (connected >= 0 && connect(connected, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    close(connected);
    return {listener, -1};
  }
  return {listener, connected};
}

// A socket whose last close lingers for two minutes: connected on loopback to a listener that
// never accepts, with more written than the buffers hold. {listener, lingering}; closing the
// listener resets the connection, which ends a lingering close. The second is -1 on failure.
std::pair<int, int> lingering_socket() {
  const auto [listener, lingering] = loopback_connection();
  if (lingering < 0 || fcntl(lingering, F_SETFL, fcntl(lingering, F_GETFL) | O_NONBLOCK) != 0) return {listener, -1};
  const std::vector<char> chunk(1 << 16, 'x');
  while (write(lingering, chunk.data(), chunk.size()) > 0) {
  }
  const linger two_minutes{1, 120};
  if ((errno != EAGAIN && errno != EWOULDBLOCK) ||
      setsockopt(lingering, SOL_SOCKET, SO_LINGER, &two_minutes, sizeof two_minutes) != 0) {
    close(lingering);
    return {listener, -1};
  }
  return {listener, lingering};
}

// A client sent a TCP socket with unsent data and SO_LINGER set along with a request: the
// daemon's close of it (clients send no descriptors) held the one attach thread for the linger
// time, and every other client's request went unanswered (10 s, then "no answer"). Descriptors
// clients send are now closed off that thread.
TEST_F(DaemonTest, AClientSendingALingeringSocketHoldsUpNoOtherClient) {
  TestProducer producer(64);
  auto daemon = start_daemon(config(producer.producer->control_endpoint(), 2));
  modelcast::sidecar::Client other({socket(), "nope", 30s});  // returns once the daemon listens
  // With a request; and behind two empty messages, the first of which ends the connection (it
  // reads as its end) and the second of which stopped the drain of what was queued, which the
  // connection's close then released on the attach thread.
  for (const int empties : {0, 2}) {
    SCOPED_TRACE(std::to_string(empties) + " empty messages first");
    const auto [listener, lingering] = lingering_socket();
    ASSERT_GE(lingering, 0) << std::strerror(errno);

    const int raw = modelcastd::attach::connect_to(socket());
    ASSERT_GE(raw, 0) << std::strerror(errno);
    modelcastd::attach::Request request;
    request.model = "nope";  // answered at once, with an error
    const int sent[] = {lingering};
    // The daemon's close must be the socket's last (the one that lingers): this process lets go
    // of its copy while the daemon is stopped, the descriptor in flight keeping the socket.
    ASSERT_TRUE(testing_support::stop_process(daemon->pid()));
    bool handed = true;
    for (int i = 0; i < empties; ++i) handed = handed && modelcastd::attach::send_message(raw, {});
    handed = handed && modelcastd::attach::send_message(raw, modelcastd::attach::encode(request), sent);
    close(lingering);
    ASSERT_EQ(kill(daemon->pid(), SIGCONT), 0);
    ASSERT_TRUE(handed) << std::strerror(errno);
    // An answer, or the connection's end.
    pollfd ready{raw, POLLIN, 0};
    EXPECT_EQ(poll(&ready, 1, 30'000), 1) << "the client that sent the socket heard nothing";
    for (int i = 0; i < 2; ++i) {
      try {
        other.acquire();
        ADD_FAILURE() << "acquire of an unconfigured model succeeded";
      } catch (const modelcast::Error& e) {
        EXPECT_EQ(e.code(), modelcast::ErrorCode::kInvalidArgument) << "another client was held up: " << e.what();
      }
    }
    close(raw);
    close(listener);  // resets the connection, which ends the daemon's lingering close
  }
}

// A client may send a socket it goes on using (SCM_RIGHTS passes a copy): the daemon closes its
// copy and changes nothing about the socket. Reset (SO_LINGER 0, once tried against lingering
// closes), the client's own close later dropped what it had not sent, and its peer read a reset.
TEST(DescriptorCloser, ASocketAClientStillHoldsIsClosedHereAndLeftAsItWas) {
  const auto [listener, kept] = loopback_connection();
  ASSERT_GE(kept, 0) << std::strerror(errno);
  const int peer = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
  ASSERT_GE(peer, 0) << std::strerror(errno);
  {
    modelcastd::attach::DescriptorCloser closer;
    closer.close_later(fcntl(kept, F_DUPFD_CLOEXEC, 0));  // the daemon's copy
  }
  // The client writes more than the buffers hold, then closes: every byte must reach the peer.
  constexpr std::size_t kBytes = 4u << 20;
  std::thread writer([&] {
    const std::vector<char> chunk(1 << 16, 'x');
    for (std::size_t sent = 0; sent < kBytes;) {
      const auto n = write(kept, chunk.data(), std::min(chunk.size(), kBytes - sent));
      if (n <= 0) break;
      sent += static_cast<std::size_t>(n);
    }
    close(kept);
  });
  std::size_t read_bytes = 0;
  std::vector<char> buffer(1 << 16);
  ssize_t n;
  while ((n = read(peer, buffer.data(), buffer.size())) > 0) read_bytes += static_cast<std::size_t>(n);
  const int last_errno = n < 0 ? errno : 0;
  writer.join();
  EXPECT_EQ(read_bytes, kBytes) << "the peer read " << read_bytes << " bytes, then " << std::strerror(last_errno);
  EXPECT_EQ(n, 0) << "the connection ended by " << std::strerror(last_errno) << ", not its end";
  close(peer);
  close(listener);
}

// A connection ends with messages still queued in it, carrying sockets whose close lingers: the
// closer reads them itself. Drained on the caller's thread, each descriptor took a place in the
// closer's queue, and past its bound the caller closed one itself, for the linger time: a
// client that sent more descriptors than the bound (one message carries 253) held the attach
// thread whenever the closing thread was held. A connection now takes one place.
TEST(DescriptorCloser, AConnectionsQueuedDescriptorsAreClosedOffTheCallersThread) {
  int pair[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair), 0) << std::strerror(errno);
  std::vector<int> listeners;
  std::vector<int> sent;
  for (int i = 0; i < 3; ++i) {
    const auto [listener, lingering] = lingering_socket();
    listeners.push_back(listener);
    ASSERT_GE(lingering, 0) << std::strerror(errno);
    sent.push_back(lingering);
  }
  for (int fd : sent) {
    ASSERT_TRUE(modelcastd::attach::send_message(pair[0], std::vector<char>{'x'}, std::vector<int>{fd}))
        << std::strerror(errno);
    close(fd);  // the closer's close is the socket's last
  }
  {
    modelcastd::attach::DescriptorCloser closer(/*max_pending=*/1);
    auto closed = std::async(std::launch::async, [&] { closer.close_connection(pair[1]); });
    EXPECT_EQ(closed.wait_for(30s), std::future_status::ready)
        << "ending a connection waited on the lingering close of a descriptor it carried";
    for (int fd : listeners) close(fd);  // ends every lingering close
    closed.wait();
  }
  // The client sees its end.
  char byte = 0;
  EXPECT_EQ(recv(pair[0], &byte, 1, 0), 0) << std::strerror(errno);
  close(pair[0]);
}

// One thread serves every client. Blocking sends to a client that never read stopped it once
// that client's socket was full: every other client waited, and timed out. Then such a client
// was dropped once its socket was full, by which time some hundred replies, each with a
// descriptor the kernel charges to the daemon's user until read, were queued to it; a client
// reconnecting could pile up more than the daemon's open-file limit, and from then on every
// reply's descriptor failed. Now its requests wait, unread, while one reply is unread.
TEST_F(DaemonTest, AClientThatDoesNotReadItsRepliesGetsOneAtATimeAndTheOthersAreServed) {
  TestProducer producer(64);
  auto daemon = start_daemon(config(producer.producer->control_endpoint(), 2));
  modelcast::sidecar::Client other({socket(), "nope", 30s});  // returns once the daemon listens
  const int flood = modelcastd::attach::connect_to(socket());
  ASSERT_GE(flood, 0) << std::strerror(errno);
  struct CloseAtExit {
    int fd;
    ~CloseAtExit() { close(fd); }
  } close_at_exit{flood};
  ASSERT_EQ(fcntl(flood, F_SETFL, fcntl(flood, F_GETFL) | O_NONBLOCK), 0);
  modelcastd::attach::Request request;
  request.model = "nope";  // answered at once, with an error
  const auto message = modelcastd::attach::encode(request);
  int sent = 0;
  while (sent < 1'000'000 && modelcastd::attach::send_message(flood, message)) ++sent;
  ASSERT_TRUE(errno == EAGAIN || errno == EWOULDBLOCK) << "after " << sent << " requests: " << std::strerror(errno);
  auto served_other = [&] {
    try {
      other.acquire();
      ADD_FAILURE() << "acquire of an unconfigured model succeeded";
    } catch (const modelcast::Error& e) {
      EXPECT_EQ(e.code(), modelcast::ErrorCode::kInvalidArgument) << e.what();
    }
  };
  // Each of the other client's requests takes a turn of the daemon's loop at least, and the
  // flood's requests were all queued before: an unpaused flood would be answered on each turn.
  for (int i = 0; i < 3; ++i) served_other();
  modelcastd::attach::Reply refused;
  refused.code = static_cast<int>(modelcast::ErrorCode::kInvalidArgument);
  refused.error = "no model " + modelcast::shown_text(request.model) + " is configured";
  const auto one_reply = static_cast<int>(modelcastd::attach::encode(refused).size());
  int queued = -1;
  ASSERT_EQ(ioctl(flood, FIONREAD, &queued), 0) << std::strerror(errno);  // every message's bytes
  EXPECT_EQ(queued, one_reply) << "replies queued to a client that reads none";
  // Read, the next request is answered.
  for (int i = 0; i < 2; ++i) {
    pollfd ready{flood, POLLIN, 0};
    ASSERT_EQ(poll(&ready, 1, 60'000), 1) << "reply " << i << " never came";
    std::vector<char> reply;
    std::vector<int> fds;
    ASSERT_TRUE(modelcastd::attach::receive_message(flood, reply, fds)) << std::strerror(errno);
    EXPECT_EQ(modelcastd::attach::decode_reply(reply).code, refused.code);
  }
  served_other();
}

// The server's next reply on `fd` (a request for `model` sent first unless empty), code -1 "closed"
// when the server closed the connection; nothing when the request could not be sent or no reply
// came within a minute.
std::optional<modelcastd::attach::Reply> try_ask(int fd, const std::string& model) {
  if (!model.empty()) {
    modelcastd::attach::Request request;
    request.model = model;
    if (!modelcastd::attach::send_message(fd, modelcastd::attach::encode(request))) return std::nullopt;
  }
  pollfd ready{fd, POLLIN, 0};
  std::vector<char> message;
  std::vector<int> fds;
  if (poll(&ready, 1, 60'000) != 1) return std::nullopt;
  if (!modelcastd::attach::receive_message(fd, message, fds)) {
    return modelcastd::attach::Reply{.code = -1, .error = "closed", .manifest = {}, .manifest_in_fd = false};
  }
  return modelcastd::attach::decode_reply(message);
}

modelcastd::attach::Reply ask(int fd, const std::string& model) {
  auto reply = try_ask(fd, model);
  EXPECT_TRUE(reply) << "no reply, or the request was not sent: " << std::strerror(errno);
  return reply.value_or(modelcastd::attach::Reply{.code = -1, .error = "no reply", .manifest = {}, .manifest_in_fd = false});
}

// An attach server at `dir`/a.sock that knows no model (every request is answered at once, with
// an error), taking at most `max_clients` connections. It logs to the daemon's logger, which
// only modelcastd's main() makes.
std::unique_ptr<modelcastd::attach::AttachServer> server_of_no_model(const ScratchDir& dir, std::size_t max_clients) {
  if (!spdlog::get("modelcastd")) spdlog::register_logger(std::make_shared<spdlog::logger>("modelcastd"));
  auto server = std::make_unique<modelcastd::attach::AttachServer>(
      dir / "a.sock", [](const std::string&, bool& exists) { exists = false; return modelcastd::ServedPtr{}; },
      4096, max_clients);
  server->start();
  return server;
}

// 400 local connections against an open-file limit of 256 once left the daemon without
// descriptors: accept() failed with EMFILE on a listening socket that stayed readable (a busy
// loop), repository writes failed, new clients hung in connect(). Past its cap a connection is
// told why and closed, and the cap leaves the rest of the descriptors to the daemon.
TEST(AttachServer, AConnectionPastTheCapIsToldWhyAndClosed) {
  ScratchDir dir;
  auto server = server_of_no_model(dir, 3);
  std::vector<int> clients;
  for (int i = 0; i < 3; ++i) {
    clients.push_back(modelcastd::attach::connect_to(dir / "a.sock"));
    ASSERT_GE(clients.back(), 0) << std::strerror(errno);
    EXPECT_EQ(ask(clients.back(), "nope").code, static_cast<int>(modelcast::ErrorCode::kInvalidArgument));  // served
  }
  const int fourth = modelcastd::attach::connect_to(dir / "a.sock");
  ASSERT_GE(fourth, 0) << std::strerror(errno);
  const auto refused = ask(fourth, "");
  EXPECT_EQ(refused.code, static_cast<int>(modelcast::ErrorCode::kResource)) << refused.error;
  EXPECT_NE(refused.error.find("at most 3 attach clients"), std::string::npos) << refused.error;
  char byte;
  EXPECT_EQ(recv(fourth, &byte, 1, 0), 0) << "the refused connection was left open";
  close(fourth);
  EXPECT_EQ(server->stats().clients, 3u);
  close(clients[0]);
  // Once the server has seen that close, a new client is served again. Until then a new one is
  // refused and closed, which the request's send may meet first (EPIPE): not a failure here.
  EXPECT_TRUE(testing_support::eventually([&] {
    const int fd = modelcastd::attach::connect_to(dir / "a.sock");
    if (fd < 0) return false;
    const auto reply = try_ask(fd, "nope");
    const bool served = reply && reply->code == static_cast<int>(modelcast::ErrorCode::kInvalidArgument);
    close(fd);
    return served;
  }));
  close(clients[1]);
  close(clients[2]);
}

// A dropped connection whose last reply is unread stays open, counted against the cap, until the
// client has read it: closed at once, the descriptors in what it had not read stayed charged to
// the daemon's user, and a client dropped again and again could pile them up without limit.
TEST(AttachServer, ADroppedConnectionIsClosedOnlyOnceItsClientHasReadItsLastReply) {
  ScratchDir dir;
  auto server = server_of_no_model(dir, 2);
  const int dropped = modelcastd::attach::connect_to(dir / "a.sock");
  const int other = modelcastd::attach::connect_to(dir / "a.sock");
  ASSERT_GE(dropped, 0) << std::strerror(errno);
  ASSERT_GE(other, 0) << std::strerror(errno);
  const std::string garbage = "\xc1 not msgpack";
  ASSERT_TRUE(modelcastd::attach::send_message(dropped, std::span<const char>(garbage.data(), garbage.size())));
  // The other client's requests take turns of the server's loop; the first saw the garbage.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(ask(other, "nope").code, static_cast<int>(modelcast::ErrorCode::kInvalidArgument));
  EXPECT_EQ(server->stats().clients, 2u);
  const int third = modelcastd::attach::connect_to(dir / "a.sock");
  ASSERT_GE(third, 0) << std::strerror(errno);
  EXPECT_EQ(ask(third, "").code, static_cast<int>(modelcast::ErrorCode::kResource)) << "the dropped connection was closed unread";
  close(third);
  const auto told = ask(dropped, "");
  EXPECT_EQ(told.code, static_cast<int>(modelcast::ErrorCode::kProtocol)) << told.error;
  const timeval minute{.tv_sec = 60, .tv_usec = 0};
  ASSERT_EQ(setsockopt(dropped, SOL_SOCKET, SO_RCVTIMEO, &minute, sizeof minute), 0);
  char byte;
  EXPECT_EQ(recv(dropped, &byte, 1, 0), 0) << "read, the dropped connection was not closed";
  close(dropped);
  EXPECT_TRUE(testing_support::eventually([&] { return server->stats().clients == 1u; }));
  close(other);
}

// A client that left a reply unread and shut its socket down (keeping it open) looked hung up,
// and was closed and no longer counted: its queued descriptors stayed charged to the daemon, and
// clients doing so without end pushed them past the open-file limit. Only an emptied queue ends
// such a connection.
TEST(AttachServer, AClientThatShutsItsSocketDownWithAReplyUnreadStaysCounted) {
  ScratchDir dir;
  auto server = server_of_no_model(dir, 2);
  const int quiet = modelcastd::attach::connect_to(dir / "a.sock");
  const int other = modelcastd::attach::connect_to(dir / "a.sock");
  ASSERT_GE(quiet, 0) << std::strerror(errno);
  ASSERT_GE(other, 0) << std::strerror(errno);
  modelcastd::attach::Request request;
  request.model = "nope";
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(modelcastd::attach::send_message(quiet, modelcastd::attach::encode(request)));
  // The other client's requests take turns of the server's loop: the first reply is sent, and
  // the second request left unread behind it.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(ask(other, "nope").code, static_cast<int>(modelcast::ErrorCode::kInvalidArgument));
  ASSERT_EQ(shutdown(quiet, SHUT_RDWR), 0);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(ask(other, "nope").code, static_cast<int>(modelcast::ErrorCode::kInvalidArgument));
  EXPECT_EQ(server->stats().clients, 2u) << "the connection with a reply unread was closed";
  const int third = modelcastd::attach::connect_to(dir / "a.sock");
  ASSERT_GE(third, 0) << std::strerror(errno);
  EXPECT_EQ(ask(third, "").code, static_cast<int>(modelcast::ErrorCode::kResource));
  close(third);
  close(quiet);  // its queue goes with it: the connection ends at a recheck
  EXPECT_TRUE(testing_support::eventually([&] { return server->stats().clients == 1u; }));
  close(other);
}

// A client sending what is not a request is told why and dropped; clients can do that at will,
// so the daemon logs it at most once per interval, escaped, saying how many it held back.
TEST_F(DaemonTest, MalformedRequestsDropTheirClientsAndAreLoggedOncePerInterval) {
  TestProducer producer(64);
  auto daemon = start_daemon(config(producer.producer->control_endpoint(), 2));
  modelcast::sidecar::Client other({socket(), "nope", 30s});  // returns once the daemon listens
  const std::string garbage = "\xc1 not msgpack\nmodelcastd forged line";
  constexpr int kClients = 5;
  for (int i = 0; i < kClients; ++i) {
    const int fd = modelcastd::attach::connect_to(socket());
    ASSERT_GE(fd, 0) << std::strerror(errno);
    ASSERT_TRUE(modelcastd::attach::send_message(fd, std::span<const char>(garbage.data(), garbage.size())));
    const auto told = ask(fd, "");  // it once got only an end of file
    EXPECT_EQ(told.code, static_cast<int>(modelcast::ErrorCode::kProtocol)) << told.error;
    EXPECT_EQ(told.error.rfind("malformed request, connection closed: ", 0), 0u) << told.error;
    char byte;
    EXPECT_EQ(recv(fd, &byte, 1, 0), 0) << "client " << i << " was answered, not dropped";
    close(fd);
  }
  try {  // the daemon serves on
    other.acquire();
    FAIL() << "acquire of an unconfigured model succeeded";
  } catch (const modelcast::Error& e) {
    EXPECT_EQ(e.code(), modelcast::ErrorCode::kInvalidArgument) << e.what();
  }
  kill(daemon->pid(), SIGTERM);
  EXPECT_EQ(daemon->wait(), 0);
  int logged = 0;
  for (const auto& line : daemon->lines()) {
    logged += line.find("attach client dropped") != std::string::npos;
    EXPECT_NE(line.rfind("modelcastd forged line", 0), 0u) << "a client wrote a log line: " << line;
  }
  EXPECT_EQ(logged, 1) << joined_lines(*daemon);
}

}  // namespace
}  // namespace daemon_test
