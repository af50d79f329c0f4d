// What the systemd unit relies on: Type=notify (READY=1 once serving, RELOADING=1 on SIGHUP,
// STOPPING=1 on SIGTERM, sent to $NOTIFY_SOCKET), and the example config shipped with it.
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "daemon/config.h"
#include "daemon_fixture.h"

namespace daemon_test {
namespace {

// A datagram socket standing in for systemd's notification socket.
struct NotifySocket {
  explicit NotifySocket(const std::string& p) : path(p) {
    fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
    bound = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  }
  ~NotifySocket() { close(fd); }
  // The next notification, or "" after 30 s.
  std::string next() {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 30'000) <= 0) return {};
    char buffer[512];
    ssize_t n = recv(fd, buffer, sizeof buffer, 0);
    return n > 0 ? std::string(buffer, static_cast<std::size_t>(n)) : std::string();
  }
  std::string path;
  int fd = -1;
  bool bound = false;
};

// A daemon on a small config that reports to a stand-in for systemd.
class NotifyingDaemonTest : public DaemonTest {
 protected:
  std::unique_ptr<ChildProcess> start_notifying() {
    write_file(dir / "modelcastd.toml", config("tcp://127.0.0.1:9", 2));
    return std::make_unique<ChildProcess>(std::vector<std::string>{MODELCASTD, "--config", dir / "modelcastd.toml"},
                                          std::vector<std::string>{"NOTIFY_SOCKET=" + systemd.path});
  }
  // A reload answered with RELOADING=1 then READY=1, and a stop with STOPPING=1 and exit 0.
  void expect_reload_then_stop(ChildProcess& daemon) {
    kill(daemon.pid(), SIGHUP);
    EXPECT_EQ(systemd.next(), "RELOADING=1");
    EXPECT_EQ(systemd.next(), "READY=1");
    kill(daemon.pid(), SIGTERM);
    EXPECT_EQ(systemd.next(), "STOPPING=1");
    EXPECT_EQ(daemon.wait(), 0);
  }
  NotifySocket systemd{dir / "notify.sock"};
};

TEST_F(NotifyingDaemonTest, NotifiesSystemdWhenReadyReloadingAndStopping) {
  ASSERT_TRUE(systemd.bound);
  auto daemon = start_notifying();
  EXPECT_EQ(systemd.next(), "READY=1");
  expect_reload_then_stop(*daemon);
}

TEST_F(NotifyingDaemonTest, SignalsItHasNoUseForAreLoggedAndLeaveItServing) {
  ASSERT_TRUE(systemd.bound);
  auto daemon = start_notifying();
  EXPECT_EQ(systemd.next(), "READY=1");
  kill(daemon->pid(), SIGUSR1);
  EXPECT_NE(wait_for_text(*daemon, "SIGUSR1 ignored", std::chrono::seconds(30)), "");
  kill(daemon->pid(), SIGUSR2);
  EXPECT_NE(wait_for_text(*daemon, "SIGUSR2 ignored", std::chrono::seconds(30)), "");
  // Still taking signals in order: a reload after them is answered, and a stop.
  expect_reload_then_stop(*daemon);
}

TEST(DaemonConfig, TheExampleConfigIsValid) {
  auto config = modelcastd::load_config(MODELCASTD_EXAMPLE_CONFIG);
  ASSERT_EQ(config.models.size(), 3u);
  EXPECT_EQ(config.models[2].wants.size(), 2u);  // the tensor-parallel rank's shard
  EXPECT_EQ(config.models[2].conversions.size(), 1u);
  EXPECT_EQ(config.models[0].hook.http_post, "http://127.0.0.1:8000/v2/repository/models/{model}/load");
  EXPECT_EQ(config.http_listen, "127.0.0.1:9180");
}

}  // namespace
}  // namespace daemon_test
