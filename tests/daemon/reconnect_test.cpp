// A sidecar Client outlives the daemon it attached to: after the daemon is killed or stopped and
// started again, the same Client gets the new daemon's versions (reconnecting by itself), views it held
// from before stay readable, and a daemon that stays down ends in a clear error.
#include <future>

#include "daemon_fixture.h"
#include "modelcast/error.h"
#include "sidecar_check.h"

namespace daemon_test {
namespace {

using exchange_test::TestProducer;

// The daemon stopped while a client waits (killed, or stopped cleanly by SIGTERM as a service
// manager restarts it) and started again: the same wait ends on the new daemon, views held from
// before stay as they were, and the next request needs no reconnect.
class DaemonRestart : public DaemonTest, public testing::WithParamInterface<bool> {};

TEST_P(DaemonRestart, AClientReconnectsAndKeepsItsOldViews) {
  const bool clean = GetParam();
  TestProducer producer(1024);
  auto daemon = start_daemon(config(producer.producer->control_endpoint(), 4));
  // Generous: the restart below includes the daemon's start-up.
  modelcast::sidecar::Client c({socket(), "test", 30s, 120s});
  ASSERT_TRUE(producer.producer->wait_for_consumers(1, 30s));
  producer.publish(1);
  auto old = c.wait_for_version(1, 60s);
  ASSERT_TRUE(old);
  EXPECT_EQ(sidecar_test::check(old, 1), "");

  // Started before or after the stop (either way its connection is to the old daemon or to
  // none): the same request must end on the new daemon. A clean stop once answered it "no model
  // 'test' is configured" (or "removed from the configuration") as the daemon let go of its
  // models before its attach server, and the client gave up.
  auto waiting = std::async(std::launch::async, [&] { return c.wait_for_version(2, 120s); });
  if (clean) {
    daemon->terminate();
    EXPECT_EQ(daemon->wait(), 0);
  } else {
    daemon->kill_now();
    daemon->wait();
  }
  EXPECT_EQ(sidecar_test::check(old, 1), "") << "a held view changed when its daemon stopped";

  daemon = start_daemon(config(producer.producer->control_endpoint(), 4));
  producer.publish(2);
  modelcast::sidecar::View fresh;
  ASSERT_NO_THROW(fresh = waiting.get()) << "the wait did not survive the restart";
  ASSERT_TRUE(fresh) << "no version 2 through the restarted daemon";
  EXPECT_EQ(fresh.version(), 2u);
  EXPECT_EQ(sidecar_test::check(fresh, 1), "");
  auto again = c.acquire();  // on the new connection, without another reconnect
  ASSERT_TRUE(again);
  EXPECT_EQ(again.version(), 2u);
  EXPECT_EQ(sidecar_test::check(old, 1), "");
  EXPECT_EQ(old.version(), 1u);
}

INSTANTIATE_TEST_SUITE_P(KilledOrStopped, DaemonRestart, testing::Values(false, true),
                         [](const testing::TestParamInfo<bool>& param) { return param.param ? "Sigterm" : "Sigkill"; });

TEST_F(DaemonTest, AClientGivesUpClearlyWhenTheDaemonStaysDown) {
  TestProducer producer(64);
  auto daemon = start_daemon(config(producer.producer->control_endpoint(), 4));
  modelcast::sidecar::Client c({socket(), "test", 30s, 300ms});
  c.acquire();  // connected and answered
  daemon->kill_now();
  daemon->wait();
  try {
    c.acquire();
    ADD_FAILURE() << "acquire() succeeded with no daemon";
  } catch (const modelcast::Error& e) {
    EXPECT_EQ(e.code(), modelcast::ErrorCode::kTransport) << e.what();
    EXPECT_NE(std::string(e.what()).find("did not come back within 300 ms"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(socket()), std::string::npos) << e.what();
  }
  // A daemon that comes back later is still found by the same Client.
  daemon = start_daemon(config(producer.producer->control_endpoint(), 4));
  EXPECT_NO_THROW(c.acquire());
}

}  // namespace
}  // namespace daemon_test
