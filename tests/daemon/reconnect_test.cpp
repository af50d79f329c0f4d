// A sidecar Client outlives the daemon it attached to: after the daemon is killed and started
// again, the same Client gets the new daemon's versions (reconnecting by itself), views it held
// from before stay readable, and a daemon that stays down ends in a clear error.
#include <future>

#include "daemon_fixture.h"
#include "modelcast/error.h"
#include "sidecar_check.h"

namespace daemon_test {
namespace {

using exchange_test::TestProducer;

TEST_F(DaemonTest, AClientReconnectsToARestartedDaemonAndKeepsItsOldViews) {
  TestProducer producer(1024);
  auto daemon = start_daemon(config(producer.producer->control_endpoint(), 4));
  // Generous: the restart below includes the daemon's start-up.
  modelcast::sidecar::Client c({socket(), "test", 30s, 120s});
  ASSERT_TRUE(producer.producer->wait_for_consumers(1, 30s));
  producer.publish(1);
  auto old = c.wait_for_version(1, 60s);
  ASSERT_TRUE(old);
  EXPECT_EQ(sidecar_test::check(old, 1), "");

  // Started before or after the kill (either way its connection is to the old daemon or to
  // none): the same request must end on the new daemon.
  auto waiting = std::async(std::launch::async, [&] { return c.wait_for_version(2, 120s); });
  daemon->kill_now();
  daemon->wait();
  EXPECT_EQ(sidecar_test::check(old, 1), "") << "a held view changed when its daemon died";

  daemon = start_daemon(config(producer.producer->control_endpoint(), 4));
  producer.publish(2);
  auto fresh = waiting.get();
  ASSERT_TRUE(fresh) << "no version 2 through the restarted daemon";
  EXPECT_EQ(fresh.version(), 2u);
  EXPECT_EQ(sidecar_test::check(fresh, 1), "");
  auto again = c.acquire();  // on the new connection, without another reconnect
  ASSERT_TRUE(again);
  EXPECT_EQ(again.version(), 2u);
  EXPECT_EQ(sidecar_test::check(old, 1), "");
  EXPECT_EQ(old.version(), 1u);
}

// A clean stop (SIGTERM, as a restart by the service manager) is not a removal: a waiting client
// was answered "the model was removed from the configuration" as the stopping daemon let go of its
// models, and gave up instead of reconnecting.
TEST_F(DaemonTest, AWaitingClientOutlivesACleanRestartOfTheDaemon) {
  TestProducer producer(1024);
  auto daemon = start_daemon(config(producer.producer->control_endpoint(), 4));
  modelcast::sidecar::Client c({socket(), "test", 30s, 120s});
  ASSERT_TRUE(producer.producer->wait_for_consumers(1, 30s));
  producer.publish(1);
  ASSERT_TRUE(c.wait_for_version(1, 60s));
  auto waiting = std::async(std::launch::async, [&] { return c.wait_for_version(2, 120s); });
  daemon->terminate();
  EXPECT_EQ(daemon->wait(), 0);
  daemon = start_daemon(config(producer.producer->control_endpoint(), 4));
  producer.publish(2);
  modelcast::sidecar::View fresh;
  ASSERT_NO_THROW(fresh = waiting.get()) << "the wait did not survive the restart";
  ASSERT_TRUE(fresh) << "no version 2 through the restarted daemon";
  EXPECT_EQ(fresh.version(), 2u);
  EXPECT_EQ(sidecar_test::check(fresh, 1), "");
}

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
