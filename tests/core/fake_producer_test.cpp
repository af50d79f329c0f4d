// The consumer against a scripted producer that speaks the protocol directly: malformed
// announcements and replies, a version whose bytes fail their digest. The consumer must drop
// or reject each, say why, and keep serving its last good version.
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <future>
#include <mutex>

#include <zmq.hpp>

#include "core/digest.h"
#include "core/host_buffer.h"
#include "core/manifest.h"
#include "core/protocol.h"
#include "modelcast/consumer.h"
#include "modelcast/error.h"
#include "test_model.h"
#include "transports/ucx/ucx_transport.h"

namespace {

using namespace std::chrono_literals;
namespace protocol = modelcast::protocol;

class ScriptedProducer {
 public:
  ScriptedProducer()
      : transport_(modelcast::transport::make_ucx_transport()),
        router_(context_, zmq::socket_type::router),
        publisher_(context_, zmq::socket_type::pub),
        model_(testmodel::make(256)) {
    router_.set(zmq::sockopt::linger, 0);
    publisher_.set(zmq::sockopt::linger, 0);
    router_.bind("tcp://127.0.0.1:*");
    publisher_.bind("tcp://127.0.0.1:*");
    std::vector<modelcast::TensorSpec> specs;
    for (auto& t : model_) specs.push_back(t.spec);
    layout_.model = "test";
    layout_.incarnation = kIncarnation;
    layout_.tensors = modelcast::plan_layout(specs, &layout_.total_bytes);
    slot_ = modelcast::HostBuffer(layout_.total_bytes);
    region_ = transport_->register_memory(slot_.data(), slot_.size(), modelcast::MemoryKind::kHost);
  }
  ~ScriptedProducer() {
    region_.reset();
    transport_.reset();
  }

  std::string endpoint() { return router_.get(zmq::sockopt::last_endpoint); }
  static constexpr std::uint64_t kIncarnation = 77;

  // Next request from the consumer, decoded (routing id kept for replies).
  protocol::Message next_request() {
    zmq::pollitem_t item{router_.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, 30s) == 0) throw std::runtime_error("no request from the consumer in 30 s");
    zmq::message_t id, body;
    (void)router_.recv(id);
    (void)router_.recv(body);
    routing_id_ = id.to_string();
    return protocol::decode({static_cast<const std::byte*>(body.data()), body.size()});
  }

  void reply(const protocol::Message& message) {
    auto bytes = protocol::encode(message);
    reply_raw(bytes);
  }
  void reply_raw(std::span<const std::byte> bytes) {
    router_.send(zmq::buffer(routing_id_), zmq::send_flags::sndmore);
    router_.send(zmq::buffer(bytes.data(), bytes.size()));
  }
  void announce_raw(std::span<const std::byte> bytes) {
    publisher_.send(zmq::str_buffer("test"), zmq::send_flags::sndmore);
    publisher_.send(zmq::buffer(bytes.data(), bytes.size()));
  }
  void announce(std::uint64_t version) { announce_raw(protocol::encode(protocol::Announce{kIncarnation, version, 0, 1})); }

  void accept_join(std::string announce_endpoint = {}) {
    protocol::JoinRequest join;
    for (;;) {  // a consumer whose join went unanswered asks again: take the newest
      auto request = next_request();
      if (auto* j = std::get_if<protocol::JoinRequest>(&request)) {
        join = *j;
        break;
      }
    }
    if (peer_ == 0) peer_ = transport_->connect(join.transport_address, false, nullptr);
    if (announce_endpoint.empty()) announce_endpoint = publisher_.get(zmq::sockopt::last_endpoint);
    reply(protocol::JoinReply{true, protocol::Refusal::kNone, "", kIncarnation, announce_endpoint, 0, "ucx"});
  }

  // Announces `version` until the consumer asks for it, then answers with the layout as
  // `tweak` leaves it and `chunk_bytes`, sends no data and returns the consumer's ack: for
  // manifests the consumer must refuse before it allocates or posts anything.
  protocol::Ack answer_with_manifest(std::uint64_t version, std::uint64_t chunk_bytes,
                                     const std::function<void(modelcast::Manifest&)>& tweak) {
    auto fetch = await_fetch(version);
    auto manifest = layout_;
    manifest.version = version;
    tweak(manifest);
    reply(protocol::FetchReply{true, protocol::Refusal::kNone, "", fetch.fetch_id, chunk_bytes, false, manifest, {}});
    for (;;) {
      auto request = next_request();
      if (auto* ack = std::get_if<protocol::Ack>(&request)) return *ack;
    }
  }

  protocol::FetchRequest await_fetch(std::uint64_t version) {
    for (;;) {
      announce(version);
      zmq::pollitem_t item{router_.handle(), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, 20ms) == 0) continue;
      auto request = next_request();
      if (auto* f = std::get_if<protocol::FetchRequest>(&request)) return *f;
    }
  }

  // Announces `version` until the consumer asks for it (PUB drops messages to a subscriber that
  // is still connecting), then serves it; `corrupt` flips one byte after the digests are taken.
  // With `digests_later`, the manifest goes out without digests and they follow the data in a
  // Digests message, as the real producer does when a fetch beats its digest thread.
  protocol::Ack serve(std::uint64_t version, bool corrupt, bool digests_later = false,
                     std::function<void(modelcast::Manifest&)> tweak = nullptr) {
    protocol::FetchRequest fetch = await_fetch(version);
    testmodel::fill(model_, 1, version);
    auto manifest = layout_;
    manifest.version = version;
    for (std::size_t i = 0; i < model_.size(); ++i) {
      auto& entry = manifest.tensors[i];
      std::memcpy(slot_.data() + entry.offset, model_[i].words.data(), entry.size);
      entry.digest = modelcast::digest_bytes(slot_.data() + entry.offset, entry.size);
    }
    if (corrupt) slot_.data()[manifest.tensors[5].offset + 3] ^= std::byte{0x10};
    if (tweak) tweak(manifest);
    auto sent = manifest;
    if (digests_later) {
      for (auto& t : sent.tensors) t.digest = 0;
    }
    reply(protocol::FetchReply{true, protocol::Refusal::kNone, "", fetch.fetch_id, 1u << 20, digests_later, sent, {}});
    std::size_t chunks = (manifest.total_bytes + (1u << 20) - 1) / (1u << 20);
    for (std::size_t i = 0; i < chunks; ++i) {
      std::size_t offset = i << 20;
      transport_->post_send(peer_, *region_, offset, std::min<std::size_t>(1u << 20, manifest.total_bytes - offset),
                            protocol::chunk_tag(fetch.fetch_id, i), [](const auto&) {});
    }
    if (digests_later) {
      protocol::Digests digests{fetch.fetch_id, version, {}, {}};
      for (const auto& t : manifest.tensors) digests.digests.push_back(t.digest);
      reply(digests);
    }
    for (;;) {
      auto request = next_request();
      if (auto* ack = std::get_if<protocol::Ack>(&request)) return *ack;
    }
  }

 private:
  std::unique_ptr<modelcast::transport::Transport> transport_;
  zmq::context_t context_;
  zmq::socket_t router_;
  zmq::socket_t publisher_;
  std::vector<testmodel::Tensor> model_;
  modelcast::Manifest layout_;
  modelcast::HostBuffer slot_;
  std::unique_ptr<modelcast::transport::MemoryRegion> region_;
  modelcast::transport::PeerId peer_ = 0;
  std::string routing_id_;
};

TEST(ConsumerAgainstScriptedProducer, DropsMalformedMessagesAndRejectsCorruptVersions) {
  setenv("UCX_NET_DEVICES", "lo", 1);
  ScriptedProducer producer;
  std::promise<modelcast::Error> first_error;
  modelcast::ConsumerOptions options;
  options.producer_endpoint = producer.endpoint();
  options.model_name = "test";
  options.producer_timeout = 60s;  // the script sends no heartbeats between its steps
  for (const auto& t : testmodel::make(256)) options.expected_layout.push_back(t.spec);
  std::once_flag once;
  options.on_error = [&](const modelcast::Error& e) { std::call_once(once, [&] { first_error.set_value(e); }); };
  modelcast::Consumer consumer(options);
  producer.accept_join();

  auto ack = producer.serve(1, /*corrupt=*/false);
  ASSERT_TRUE(ack.ok) << ack.error;
  auto good = consumer.acquire();
  ASSERT_EQ(good.version(), 1u);
  ASSERT_EQ(testmodel::check(good, 1), "");

  // Malformed traffic on both channels: each is dropped and counted.
  std::vector<std::byte> garbage(40, std::byte{0xC1});
  producer.announce_raw(garbage);
  auto future_version = protocol::encode(protocol::Announce{ScriptedProducer::kIncarnation, 9, 0, 0});
  future_version[6] = std::byte{0x63};  // protocol version 99
  producer.announce_raw(future_version);
  auto truncated = protocol::encode(protocol::Announce{ScriptedProducer::kIncarnation, 9, 0, 0});
  truncated.resize(truncated.size() / 2);
  producer.announce_raw(truncated);
  producer.reply_raw(garbage);

  // A version whose bytes do not match their digests is rejected with the tensor named.
  ack = producer.serve(2, /*corrupt=*/true);
  EXPECT_FALSE(ack.ok);
  EXPECT_NE(ack.error.find("tensor 't5' of version 2 failed its digest check"), std::string::npos) << ack.error;
  auto error = first_error.get_future().get();
  EXPECT_EQ(error.code(), modelcast::ErrorCode::kIntegrity);

  auto stats = consumer.stats();
  EXPECT_EQ(stats.bad_messages, 4u);
  EXPECT_EQ(stats.versions_rejected, 1u);
  EXPECT_EQ(stats.current_version, 1u);
  auto still = consumer.acquire();
  EXPECT_EQ(still.version(), 1u);
  EXPECT_EQ(testmodel::check(still, 1), "");

  // And the next good version is taken.
  ack = producer.serve(3, /*corrupt=*/false);
  EXPECT_TRUE(ack.ok) << ack.error;
  EXPECT_EQ(testmodel::check(consumer.acquire(), 1), "");
  EXPECT_EQ(consumer.acquire().version(), 3u);

  // Digests that follow the data are waited for, and checked as strictly.
  ack = producer.serve(4, /*corrupt=*/true, /*digests_later=*/true);
  EXPECT_FALSE(ack.ok);
  EXPECT_NE(ack.error.find("failed its digest check"), std::string::npos) << ack.error;
  EXPECT_EQ(consumer.acquire().version(), 3u);
  ack = producer.serve(5, /*corrupt=*/false, /*digests_later=*/true);
  EXPECT_TRUE(ack.ok) << ack.error;
  EXPECT_EQ(consumer.acquire().version(), 5u);
  EXPECT_EQ(testmodel::check(consumer.acquire(), 1), "");
  EXPECT_EQ(consumer.stats().versions_rejected, 2u);

  // A version whose layout differs from the one the consumer expects is rejected, naming the
  // tensor, and version 5 stays.
  ack = producer.serve(6, /*corrupt=*/false, /*digests_later=*/false,
                       [](modelcast::Manifest& m) { m.tensors[0].spec.dtype = modelcast::DType::kI32; });
  EXPECT_FALSE(ack.ok);
  EXPECT_NE(ack.error.find("tensor 't0' is i32, expected f32"), std::string::npos) << ack.error;
  EXPECT_EQ(consumer.stats().versions_rejected, 3u);
  EXPECT_EQ(consumer.acquire().version(), 5u);
  EXPECT_EQ(testmodel::check(consumer.acquire(), 1), "");
}

std::vector<std::byte> bytes_of(std::initializer_list<unsigned> values) {
  std::vector<std::byte> bytes;
  for (auto v : values) bytes.push_back(static_cast<std::byte>(v));
  return bytes;
}

// A hostile producer or relay: each of these once ended the consumer (the inference process)
// with an uncaught exception, or made it allocate per declared byte. Now each is refused, said
// why, and the last good version stays served.
TEST(ConsumerAgainstScriptedProducer, SurvivesHostileRepliesManifestsAndEndpoints) {
  setenv("UCX_NET_DEVICES", "lo", 1);
  ScriptedProducer producer;
  std::mutex mutex;
  std::vector<modelcast::Error> errors;
  modelcast::ConsumerOptions options;
  options.producer_endpoint = producer.endpoint();
  options.model_name = "test";
  options.producer_timeout = 60s;
  options.max_model_bytes = 64u << 20;
  options.on_error = [&](const modelcast::Error& e) {
    std::lock_guard lock(mutex);
    errors.push_back(e);
  };
  modelcast::Consumer consumer(options);

  // A join reply naming an announcement endpoint ZeroMQ cannot parse: refused, joined again.
  producer.accept_join("tcp://no such host:port");
  producer.accept_join();
  ASSERT_TRUE(producer.serve(1, false).ok);
  ASSERT_EQ(consumer.acquire().version(), 1u);
  {
    std::lock_guard lock(mutex);
    ASSERT_FALSE(errors.empty());
    EXPECT_NE(std::string(errors[0].what()).find("announcement endpoint"), std::string::npos) << errors[0].what();
  }

  // Allocation bombs on both channels.
  producer.announce_raw(bytes_of({0xdd, 0xff, 0xff, 0xff, 0xff}));
  producer.reply_raw(bytes_of({0xdd, 0xff, 0xff, 0xff, 0xff}));
  producer.reply_raw(bytes_of({0xdf, 0xff, 0xff, 0xff, 0xff}));

  auto expect_refused = [&](std::uint64_t version, std::uint64_t chunk, auto tweak, const std::string& why) {
    auto ack = producer.answer_with_manifest(version, chunk, tweak);
    EXPECT_FALSE(ack.ok);
    EXPECT_NE(ack.error.find(why), std::string::npos) << ack.error;
    EXPECT_EQ(consumer.acquire().version(), 1u);
  };
  expect_refused(2, 1u << 20, [](modelcast::Manifest& m) { m.total_bytes = std::uint64_t{1} << 40; }, "at most");
  expect_refused(3, 1u << 20, [](modelcast::Manifest& m) { m.total_bytes = ~std::uint64_t{0}; }, "at most");
  expect_refused(4, 1, [](modelcast::Manifest&) {}, "-byte chunks");
  expect_refused(5, 1u << 20, [](modelcast::Manifest& m) {
    m.tensors[0].spec.shape = {std::int64_t{1} << 40, std::int64_t{1} << 40};
  }, "64 bits");

  // Still alive, still serving version 1 exactly, and the next good version is taken.
  auto stats = consumer.stats();
  EXPECT_GE(stats.bad_messages, 3u);
  EXPECT_EQ(stats.versions_rejected, 4u);
  EXPECT_EQ(testmodel::check(consumer.acquire(), 1), "");
  ASSERT_TRUE(producer.serve(6, false).ok);
  EXPECT_EQ(consumer.acquire().version(), 6u);
}

TEST(ConsumerOptionsCheck, AnUnusableProducerEndpointIsAnInvalidArgument) {
  for (const char* endpoint : {"tcp://", "tcp://host-without-port", "udp://127.0.0.1:5", "ipc://"}) {
    modelcast::ConsumerOptions options;
    options.producer_endpoint = endpoint;
    try {
      modelcast::Consumer consumer(options);
      ADD_FAILURE() << "accepted producer_endpoint '" << endpoint << "'";
    } catch (const modelcast::Error& e) {
      EXPECT_EQ(e.code(), modelcast::ErrorCode::kInvalidArgument) << endpoint;
      EXPECT_NE(std::string(e.what()).find(endpoint), std::string::npos) << e.what();
    }
  }
}

}  // namespace
