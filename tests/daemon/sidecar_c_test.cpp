// The sidecar client's C ABI: the same version and bytes as the C++ client; errors as mc_status.
#include "daemon_fixture.h"
#include "modelcast/sidecar_c.h"
#include "sidecar_c_callers.h"
#include "sidecar_check.h"

namespace daemon_test {
namespace {

using exchange_test::TestProducer;

TEST_F(DaemonTest, TheCAbiSeesTheSameVersionAsTheCppClient) {
  TestProducer producer(1024);
  auto daemon = start_daemon(config(producer.producer->control_endpoint(), 3));
  ASSERT_TRUE(producer.producer->wait_for_consumers(1, 30s));
  producer.publish(1);
  auto view = client().wait_for_version(1, 30s);
  ASSERT_TRUE(view);
  ASSERT_EQ(sidecar_test::check(view, 1), "");
  std::uint64_t expected = 0;
  for (const auto& t : view.tensors()) {
    for (auto b : t.bytes()) expected += static_cast<unsigned char>(b);
  }
  std::uint64_t version = 0, sum = 0;
  std::size_t tensors = 0;
  char error[256] = "";
  ASSERT_EQ(sidecar_c_sum(socket().c_str(), "test", 30000, 1, &version, &tensors, &sum, error, sizeof error), MC_OK) << error;
  EXPECT_EQ(version, 1u);
  EXPECT_EQ(tensors, view.tensor_count());
  EXPECT_EQ(sum, expected);

  EXPECT_EQ(sidecar_c_sum(socket().c_str(), "nope", 30000, 1, &version, &tensors, &sum, error, sizeof error),
            MC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(error).find("nope"), std::string::npos) << error;
  EXPECT_EQ(sidecar_c_sum((dir / "absent.sock").c_str(), "test", 0, 1, &version, &tensors, &sum, error, sizeof error),
            MC_ERR_TRANSPORT);
}

}  // namespace
}  // namespace daemon_test
