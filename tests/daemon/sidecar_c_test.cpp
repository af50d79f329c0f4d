// The sidecar client's C ABI: the same version and bytes as the C++ client; errors as mc_status.
#include "daemon_fixture.h"
#include "modelcast/sidecar_c.h"
#include "sidecar_c_callers.h"
#include "sidecar_check.h"

#include <functional>
#include <initializer_list>

#include "modelcast/sidecar.h"

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

// A caller that cleans up whatever *out holds after a failure must find NULL there, and the
// message must name the argument that was wrong.
TEST(SidecarCAbi, AFailedCallClearsOutAndNamesTheBadArgument) {
  auto* sentinel = reinterpret_cast<mcs_client_t*>(0x1);
  mcs_client_t* client = sentinel;
  EXPECT_EQ(mcs_client_open(nullptr, "m", 0, &client), MC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(client, nullptr);
  EXPECT_STREQ(mcs_last_error(), "mcs_client_open: socket_path is NULL");
  client = sentinel;
  EXPECT_EQ(mcs_client_open("/x.sock", "m", -1, &client), MC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(client, nullptr);
  EXPECT_NE(std::string(mcs_last_error()).find("connect_timeout_ms is negative (-1)"), std::string::npos)
      << mcs_last_error();
  // Failed only after the reconnect timeout (10 s), as a lost connection, past a socket message.
  client = sentinel;
  EXPECT_EQ(mcs_client_open("/x.sock", std::string(300'000, 'm').c_str(), 0, &client), MC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(client, nullptr);
  EXPECT_NE(std::string(mcs_last_error()).find("the model name is 300000 bytes; a model's name is at most 255"),
            std::string::npos) << mcs_last_error();
  auto* view_sentinel = reinterpret_cast<mcs_view_t*>(0x1);
  mcs_view_t* view = view_sentinel;
  EXPECT_EQ(mcs_acquire(nullptr, &view), MC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(view, nullptr);
  EXPECT_STREQ(mcs_last_error(), "mcs_acquire: client is NULL");
  view = view_sentinel;
  EXPECT_EQ(mcs_wait_for_version(nullptr, 1, 0, &view), MC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(view, nullptr);
  // One message said "view and out must not be NULL and index below ..." whichever it was, and a
  // NULL view's metadata left the previous call's message.
  mc_tensor_info info{};
  EXPECT_EQ(mcs_view_tensor_at(nullptr, 0, &info), MC_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(mcs_last_error(), "mcs_view_tensor_at: view is NULL");
  EXPECT_EQ(mcs_view_find_tensor(nullptr, "w", &info), MC_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(mcs_last_error(), "mcs_view_find_tensor: view is NULL");
  EXPECT_EQ(mcs_view_metadata_get(nullptr, "step"), nullptr);
  EXPECT_STREQ(mcs_last_error(), "mcs_view_metadata_get: view is NULL");
}

// Each argument of a view's accessors is named when wrong; an index, with the count it exceeds.
TEST_F(DaemonTest, TheCAbisViewAccessorsNameTheArgumentThatIsWrong) {
  TestProducer producer(64);
  auto daemon = start_daemon(config(producer.producer->control_endpoint(), 3));
  ASSERT_TRUE(producer.producer->wait_for_consumers(1, 30s));
  producer.publish(1);
  mcs_client_t* client = nullptr;
  ASSERT_EQ(mcs_client_open(socket().c_str(), "test", 30000, &client), MC_OK) << mcs_last_error();
  mcs_view_t* view = nullptr;
  ASSERT_EQ(mcs_wait_for_version(client, 1, 30000, &view), MC_OK) << mcs_last_error();
  const std::size_t count = mcs_view_tensor_count(view);
  mc_tensor_info info{};
  EXPECT_EQ(mcs_view_tensor_at(view, count, &info), MC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(mcs_last_error()), "mcs_view_tensor_at: tensor index " + std::to_string(count) +
                                               " is out of range (version 1 has " + std::to_string(count) + " tensors)");
  EXPECT_EQ(mcs_view_tensor_at(view, 0, nullptr), MC_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(mcs_last_error(), "mcs_view_tensor_at: out is NULL");
  const std::int64_t* offset = nullptr;
  const std::int64_t* whole = nullptr;
  EXPECT_EQ(mcs_view_tensor_box(view, 0, &offset, &whole, nullptr), MC_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(mcs_last_error(), "mcs_view_tensor_box: ndim is NULL");
  EXPECT_EQ(mcs_view_find_tensor(view, nullptr, &info), MC_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(mcs_last_error(), "mcs_view_find_tensor: name is NULL");
  EXPECT_EQ(mcs_view_tensor_at(view, 0, &info), MC_OK) << mcs_last_error();
  // Found by name: the same tensor (its name, bytes and place) as by index.
  for (std::size_t i = 0; i < count; ++i) {
    mc_tensor_info at{}, found{};
    ASSERT_EQ(mcs_view_tensor_at(view, i, &at), MC_OK) << mcs_last_error();
    ASSERT_EQ(mcs_view_find_tensor(view, at.name, &found), MC_OK) << mcs_last_error();
    EXPECT_STREQ(found.name, at.name);
    EXPECT_EQ(found.data, at.data);
    EXPECT_EQ(found.size_bytes, at.size_bytes);
  }
  EXPECT_EQ(mcs_view_find_tensor(view, "no such tensor", &info), MC_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(mcs_last_error(), "mcs_view_find_tensor: no tensor 'no such tensor'");
  mcs_view_release(view);
  mcs_client_close(client);
}

// The C++ client refuses what the C API refuses (a negative connect_timeout was "try once", a
// negative wait returned at once), a name no daemon can serve (its control characters came back
// in the daemon's answer), and names a socket path that is no socket as what it is (it said
// "Connection refused", as for a daemon that is not running).
TEST_F(DaemonTest, TheCppClientRefusesWhatNoDaemonCouldServeAndNamesAPathThatIsNoSocket) {
  using modelcast::sidecar::Client;
  auto refused = [](modelcast::sidecar::ClientOptions options, modelcast::ErrorCode code, const std::string& words) {
    try {
      Client c(std::move(options));
      ADD_FAILURE() << "accepted: " << words;
    } catch (const modelcast::Error& e) {
      EXPECT_EQ(e.code(), code) << e.what();
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  refused({socket(), "te\xffst\n", 0ms}, modelcast::ErrorCode::kInvalidArgument,
          "the model name has a control character at byte 5");
  refused({socket(), "test", -1ms}, modelcast::ErrorCode::kInvalidArgument, "connect_timeout is negative (-1 ms)");
  refused({"", "test", 0ms}, modelcast::ErrorCode::kInvalidArgument, "no socket_path");
  write_file(dir / "file.sock", "not a socket");
  refused({dir / "file.sock", "test", 0ms}, modelcast::ErrorCode::kTransport, "it is a file, not a socket");
  std::filesystem::create_directory(dir / "dir.sock");
  refused({dir / "dir.sock", "test", 0ms}, modelcast::ErrorCode::kTransport, "it is a directory, not a socket");

  TestProducer producer(64);
  auto daemon = start_daemon(config(producer.producer->control_endpoint(), 4));
  Client c({socket(), "test", 30s});
  try {
    c.wait_for_version(1, -5ms);
    ADD_FAILURE() << "a negative wait was accepted";
  } catch (const modelcast::Error& e) {
    EXPECT_EQ(e.code(), modelcast::ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("wait_for_version timeout is negative (-5 ms)"), std::string::npos) << e.what();
  }
}

// An empty View's accessors once read through a null pointer.
TEST(SidecarView, AnEmptyViewsAccessorsSayItIsEmpty) {
  modelcast::sidecar::View empty;
  for (auto call : std::initializer_list<std::function<void()>>{
           [&] { (void)empty.version(); }, [&] { (void)empty.tensors(); }, [&] { (void)empty.find("w"); },
           [&] { (void)empty.metadata(); }, [&] { (void)empty.tensor_count(); }}) {
    try {
      call();
      ADD_FAILURE() << "an empty View answered";
    } catch (const modelcast::Error& e) {
      EXPECT_EQ(e.code(), modelcast::ErrorCode::kState);
      EXPECT_NE(std::string(e.what()).find("empty sidecar View"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace daemon_test
