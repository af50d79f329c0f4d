// A sidecar client's wait longer than the daemon waits for one request (attach::kLongestWait):
// the client asks again for the rest instead of giving up early. A scripted daemon on the attach
// socket stands in for modelcastd, so the test reads the requests themselves and waits no day.
#include <gtest/gtest.h>

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <thread>
#include <vector>

#include "daemon/attach/protocol.h"
#include "daemon/attach/seqpacket.h"
#include "modelcast/error.h"
#include "modelcast/sidecar.h"
#include "private_directory.h"

namespace {

using namespace std::chrono_literals;
namespace attach = modelcastd::attach;

TEST(SidecarLongWait, AWaitLongerThanTheDaemonsIsAskedAgainForTheRest) {
  // Before, a 30 h wait went out whole; the daemon ended it at 24 h with "no version", and the
  // client returned that as the caller's timeout, six hours early.
  testing_support::PrivateDirectory directory;
  const std::string path = directory.file("attach.sock");
  const int listening = attach::listen_at(path);
  // The scripted daemon: answers the first acquire with "no version in time" and the second
  // with an error, which ends the caller's wait; it hands back the requests it read.
  auto daemon = std::async(std::launch::async, [listening] {
    std::vector<attach::Request> requests;
    // The listening socket does not block (the daemon polls it): wait for the client here, or
    // an accept run before the client connects ends the script and leaves the client waiting.
    pollfd ready{listening, POLLIN, 0};
    if (poll(&ready, 1, 60'000) != 1) return requests;
    const int fd = accept(listening, nullptr, nullptr);
    if (fd < 0) return requests;
    std::vector<char> message;
    std::vector<int> fds;
    while (requests.size() < 2 && attach::receive_message(fd, message, fds)) {
      requests.push_back(attach::decode_request(message));
      attach::Reply reply;
      if (requests.size() == 2) {
        reply.code = static_cast<int>(modelcast::ErrorCode::kState);
        reply.error = "scripted end";
      }
      attach::send_message(fd, attach::encode(reply));
    }
    close(fd);
    return requests;
  });
  struct CloseAtExit {
    int fd;
    ~CloseAtExit() {  // unblocks the scripted daemon's accept if the client never came
      shutdown(fd, SHUT_RDWR);
      close(fd);
    }
  } close_at_exit{listening};

  modelcast::sidecar::ClientOptions options;
  options.socket_path = path;
  options.model = "m";
  modelcast::sidecar::Client client(options);
  try {
    client.wait_for_version(1, std::chrono::hours(30));
    ADD_FAILURE() << "the wait returned before the second request was answered";
  } catch (const modelcast::Error& e) {
    EXPECT_NE(std::string(e.what()).find("scripted end"), std::string::npos) << e.what();
  }
  ASSERT_EQ(daemon.wait_for(60s), std::future_status::ready);
  const auto requests = daemon.get();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[0].timeout_ms, static_cast<std::uint64_t>(attach::kLongestWait.count()));
  EXPECT_EQ(requests[1].min_version, 1u);
  // Each request asks for at most the daemon's longest wait; this daemon answered at once, so
  // nearly all of the 30 h were still left for the second.
  EXPECT_EQ(requests[1].timeout_ms, static_cast<std::uint64_t>(attach::kLongestWait.count()));
}

}  // namespace
