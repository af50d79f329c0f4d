// What a closing consumer's link tells the producer, read off a ROUTER socket standing in for
// it: Leave with the incarnation of the producer it joined, or with none while the answer to its
// join has not come (the producer may have taken that join, and would otherwise keep the
// consumer until its silence limit).
#include <gtest/gtest.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "core/consumer/producer_link.h"
#include "core/wire/protocol.h"
#include "modelcast/consumer.h"

namespace {

namespace protocol = modelcast::protocol;
using modelcast::consumer::ProducerLink;

class FakeProducer {
 public:
  FakeProducer() : router_(context_, zmq::socket_type::router) {
    router_.set(zmq::sockopt::linger, 0);
    router_.bind("tcp://127.0.0.1:*");
  }
  std::string endpoint() const { return router_.get(zmq::sockopt::last_endpoint); }
  // The next message a consumer sent (its routing frame dropped).
  protocol::Message next() {
    zmq::pollitem_t item{router_.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, std::chrono::seconds(30)) == 0) throw std::runtime_error("nothing from the consumer");
    zmq::message_t routing, payload;
    (void)router_.recv(routing);
    (void)router_.recv(payload);
    return protocol::decode({static_cast<const std::byte*>(payload.data()), payload.size()});
  }

 private:
  zmq::context_t context_;
  zmq::socket_t router_;
};

modelcast::ConsumerOptions options_for(const FakeProducer& producer) {
  modelcast::ConsumerOptions options;
  options.producer_endpoint = producer.endpoint();
  options.model_name = "test";
  return options;
}

protocol::JoinRequest join_request() {
  protocol::JoinRequest request;
  request.model = "test";
  request.consumer_name = "closing";
  return request;
}

TEST(ProducerLink, ALinkClosingBeforeItsJoinIsAnsweredLeavesWithNoIncarnation) {
  FakeProducer producer;
  auto options = options_for(producer);
  ProducerLink link(options);
  link.join(join_request(), std::chrono::steady_clock::now());
  link.leave();
  EXPECT_TRUE(std::holds_alternative<protocol::JoinRequest>(producer.next()));
  auto leave = producer.next();
  ASSERT_TRUE(std::holds_alternative<protocol::Leave>(leave)) << "a join in flight was not followed by Leave";
  EXPECT_EQ(std::get<protocol::Leave>(leave).incarnation, 0u);
}

TEST(ProducerLink, AJoinedLinkLeavesWithTheIncarnationItJoined) {
  FakeProducer producer;
  auto options = options_for(producer);
  ProducerLink link(options);
  link.join(join_request(), std::chrono::steady_clock::now());
  protocol::JoinReply reply;
  reply.ok = true;
  reply.incarnation = 77;
  link.joined(reply, std::chrono::steady_clock::now());
  link.leave();
  EXPECT_TRUE(std::holds_alternative<protocol::JoinRequest>(producer.next()));
  auto leave = producer.next();
  ASSERT_TRUE(std::holds_alternative<protocol::Leave>(leave));
  EXPECT_EQ(std::get<protocol::Leave>(leave).incarnation, 77u);
}

}  // namespace
