// An accept() that fails with an error cpp-httplib does not retry (ENFILE on a host out of
// descriptors, ECONNABORTED, EPROTO: accept(2) lists them) ended its listen and closed the
// socket: the ops endpoint was gone for good, without a word, while the daemon served on.
//
// This executable's accept() and accept4() come before libc's (an executable's definitions
// interpose on a shared library's, cpp-httplib's among them) and fail once on the port a test
// arms, with the error it names. A test binary of its own, so no other test meets them.
#include <dlfcn.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <httplib.h>

#include "daemon/ops_http.h"

namespace {

std::atomic<int> failing_port{0};  // 0: none armed
std::atomic<int> failing_errno{0};

// Whether the connection `accepted` on `listener` is to be failed: once per arming.
bool fail_this(int listener) {
  sockaddr_in address{};
  socklen_t length = sizeof address;
  if (getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length) != 0 || address.sin_family != AF_INET) return false;
  int port = ntohs(address.sin_port);
  return port != 0 && failing_port.compare_exchange_strong(port, 0);
}

template <typename Real>
Real real(const char* name) {
  return reinterpret_cast<Real>(dlsym(RTLD_NEXT, name));
}

}  // namespace

extern "C" int accept(int fd, sockaddr* address, socklen_t* length) {
  static const auto next = real<int (*)(int, sockaddr*, socklen_t*)>("accept");
  const int accepted = next(fd, address, length);
  if (accepted < 0 || !fail_this(fd)) return accepted;
  close(accepted);
  errno = failing_errno.load();
  return -1;
}

extern "C" int accept4(int fd, sockaddr* address, socklen_t* length, int flags) {
  static const auto next = real<int (*)(int, sockaddr*, socklen_t*, int)>("accept4");
  const int accepted = next(fd, address, length, flags);
  if (accepted < 0 || !fail_this(fd)) return accepted;
  close(accepted);
  errno = failing_errno.load();
  return -1;
}

namespace {

TEST(OpsHttpAcceptFault, AnAcceptThatFailsIsReportedAndTheEndpointListensAgain) {
  for (int error : {EPROTO, ECONNABORTED, ENFILE}) {
    SCOPED_TRACE(std::strerror(error));
    std::mutex mutex;
    std::condition_variable changed;
    std::vector<std::string> said;
    modelcastd::OpsProviders providers{[](const std::string&, std::string&) { return 200; }, [] { return std::string("[]"); },
                                       [] { return std::string(); },
                                       [&](const std::string& message) {
                                         std::lock_guard lock(mutex);
                                         said.push_back(message);
                                         changed.notify_all();
                                       }};
    modelcastd::OpsHttp ops("127.0.0.1:0", providers);
    failing_errno = error;
    failing_port = ops.port();
    httplib::Client http("127.0.0.1", ops.port());
    EXPECT_FALSE(http.Get("/healthz")) << "the failed accept answered";
    {
      std::unique_lock lock(mutex);
      ASSERT_TRUE(changed.wait_for(lock, std::chrono::seconds(30), [&] {
        return !said.empty() && said.back().find("listens again") != std::string::npos;
      })) << ::testing::PrintToString(said);
      EXPECT_NE(said.front().find("stopped listening"), std::string::npos) << said.front();
    }
    auto answer = http.Get("/healthz");
    ASSERT_TRUE(answer) << "not answered after listening again";
    EXPECT_EQ(answer->status, 200);
  }
}

}  // namespace
