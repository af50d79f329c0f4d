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
#include "few_descriptors.h"
#include "core/wire/protocol.h"
#include "modelcast/consumer.h"
#include "modelcast/error.h"

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

// A join that cannot make its socket is an error naming the resource (it ended the consumer's
// service thread), leaves the link a socket to poll, and counts as an attempt, so the next is not
// at once; the next, with descriptors free again, reaches the producer.
TEST(ProducerLink, AJoinWithNoDescriptorLeftIsAResourceErrorAndTheNextReachesTheProducer) {
  FakeProducer producer;
  auto options = options_for(producer);
  ProducerLink link(options);
  auto first = std::chrono::steady_clock::now();
  // ZeroMQ closes what the link's constructor opened (its endpoint probe, and the producer's side
  // of that connection) on its own threads, a moment later: a descriptor closed after the holding
  // can serve a join. A few tries take those up; each that failed is what is tested.
  bool refused = false;
  for (int attempt = 0; attempt < 5 && !refused; ++attempt) {
    first = std::chrono::steady_clock::now();
    testing_support::FewDescriptors none(0);
    try {
      link.join(join_request(), first);
    } catch (const modelcast::Error& e) {
      refused = true;
      EXPECT_EQ(e.code(), modelcast::ErrorCode::kResource) << e.what();
      EXPECT_NE(std::string(e.what()).find("cannot join the producer"), std::string::npos) << e.what();
    }
  }
  ASSERT_TRUE(refused) << "joined with no descriptor left, five times";
  zmq::pollitem_t item{link.dealer().handle(), 0, ZMQ_POLLIN, 0};
  EXPECT_EQ(zmq::poll(&item, 1, std::chrono::milliseconds(0)), 0);
  EXPECT_FALSE(link.join_due(first)) << "a failed join would be tried again at once, in a loop";
  EXPECT_TRUE(link.join_due(first + options.producer_timeout));
  link.join(join_request(), first + options.producer_timeout);
  auto heard = producer.next();  // an earlier try's join may come first: a join all the same
  EXPECT_TRUE(std::holds_alternative<protocol::JoinRequest>(heard));
}

}  // namespace
