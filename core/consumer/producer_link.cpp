#include "core/consumer/producer_link.h"

#include <sodium.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <utility>

#include "core/security/curve.h"
#include "core/wire/connect_host.h"
#include "core/wire/socket_directory.h"
#include "core/wire/zmq_channel.h"
#include "core/wire/zmq_context.h"
#include "modelcast/error.h"
#include "modelcast/keys.h"

namespace modelcast::consumer {

// A secret left in freed memory outlives the consumer in core dumps and swap.
ProducerLink::~ProducerLink() {
  stop_watching();  // before the sockets close (see stop_watching)
  sodium_memzero(own_.data(), own_.size());
}

ProducerLink::ProducerLink(ConsumerOptions& options)
    : endpoint_(options.producer_endpoint),
      timeout_(options.producer_timeout),
      context_(wire::new_context("consumer link")) {
  // ZeroMQ parses an endpoint only when connecting, and throws there: on the service thread
  // that would end the process, so a bad one is refused here, in the caller's thread.
  if (endpoint_.rfind("tcp://", 0) != 0 && endpoint_.rfind("ipc://", 0) != 0) {
    throw Error(ErrorCode::kInvalidArgument, "producer_endpoint '" + endpoint_ + "' must start with tcp:// or ipc://");
  }
  wire::check_tcp_port(endpoint_, "producer_endpoint", false);
  if (auto why = wire::connect_host_problem(endpoint_)) {
    throw Error(ErrorCode::kInvalidArgument, "producer_endpoint '" + endpoint_ + "': " + *why);
  }
  try {
    zmq::socket_t probe(context_, zmq::socket_type::dealer);
    probe.set(zmq::sockopt::linger, 0);
    wire::allow_ipv6_for(probe, endpoint_);
    probe.connect(endpoint_);
    // Unconnected until the first join replaces it: the service thread polls a dealer from its
    // first turn, and a join that cannot make its socket (no descriptor left) keeps the one before.
    dealer_ = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::dealer);
    dealer_->set(zmq::sockopt::linger, 0);
  } catch (const zmq::error_t& e) {
    if (wire::short_of_resources(e)) throw Error(ErrorCode::kResource, std::string("consumer link: ") + e.what());
    throw Error(ErrorCode::kInvalidArgument, "producer_endpoint '" + endpoint_ + "' is not usable: " + e.what());
  }
  if (!options.key_file.empty()) {
    if (!options.key.empty()) throw Error(ErrorCode::kInvalidArgument, "give key or key_file, not both");
    options.key = load_key_pair(options.key_file);
  }
  if (options.producer_public_key.empty()) {
    // Keys are used only with a pinned producer: without one, the control plane is plaintext and
    // versions unchecked, which whoever gave a key did not mean.
    if (!options.key.public_key.empty() || !options.key.secret_key.empty()) {
      throw Error(ErrorCode::kInvalidArgument,
                  std::string(options.key_file.empty() ? "key" : "key_file") +
                      " is given but producer_public_key is not: without the producer's key the control plane "
                      "would be plaintext and versions unsigned; pin it (producer_public_key) or give no key");
    }
    if (!wire::is_local_endpoint(endpoint_) && !options.allow_plaintext_remote) {
      throw Error(ErrorCode::kInvalidArgument, "producer endpoint '" + endpoint_ +
                                                   "' is on another host: pin the producer's public key "
                                                   "(producer_public_key) or set allow_plaintext_remote");
    }
    wire::check_private_ipc_directory(endpoint_, "consumer");
    return;
  }
  pinned_ = security::decode_public_key(options.producer_public_key, "producer_public_key");
  // Refuses a key that is no Ed25519 point here, not at the first connection.
  security::curve_public(*pinned_, "producer_public_key");
  if (options.key.empty()) options.key = generate_key_pair();
  own_ = security::decode_secret_key(options.key, "consumer key");
}

void ProducerLink::begin_attempt(Clock::time_point now) {
  joined_ = false;
  join_refused_ = false;
  lost_unanswered_ = false;
  handshake_failed_ = false;
  join_sent_ = now;  // even for an attempt that fails: the next is join_due()'s wait away
}

void ProducerLink::producer_stopping(Clock::time_point now) {
  begin_attempt(now);
  said_stopped_ = true;
  stop_closing_ = true;
  unanswered_since_ = now;  // "no answer" counts from the producer's last word
  closed_unanswered_ = 0;
  sent_unanswered_ = 0;
}

void ProducerLink::join_failed(Clock::time_point now) {
  begin_attempt(now);
  stop_watching();  // the old connection's events are no news of this link's
}

void ProducerLink::stop_watching() {
  if (dealer_) zmq_socket_monitor(dealer_->handle(), nullptr, 0);
  monitor_.reset();
}

void ProducerLink::join(const protocol::JoinRequest& request, Clock::time_point now) {
  begin_attempt(now);
  std::unique_ptr<zmq::socket_t> dealer;
  try {
    dealer = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::dealer);
  } catch (const zmq::error_t& e) {
    stop_watching();
    throw Error(wire::short_of_resources(e) ? ErrorCode::kResource : ErrorCode::kTransport,
                "cannot join the producer at " + endpoint_ + ": no socket (" + e.what() + "); trying again in " +
                    std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(timeout_ / 2).count()) +
                    " ms");
  }
  stop_watching();
  stop_closing_ = false;  // the old DEALER's events are read no more
  dealer_ = std::move(dealer);
  dealer_->set(zmq::sockopt::linger, 0);
  dealer_->set(zmq::sockopt::maxmsgsize, static_cast<std::int64_t>(protocol::DecodeLimits{}.max_message_bytes));
  if (pinned_) security::make_curve_client(*dealer_, *pinned_, own_);
  wire::allow_ipv6_for(*dealer_, endpoint_);
  watch_handshakes();
  dealer_->connect(endpoint_);
  wire::send(*dealer_, request);
  if (!unanswered_since_) unanswered_since_ = now;  // a join that went out waits for its answer
  ++sent_unanswered_;
}

void ProducerLink::joined(const protocol::JoinReply& reply, Clock::time_point now) {
  incarnation_ = reply.incarnation;
  joined_ = true;
  joined_before_ = true;
  said_stopped_ = false;
  unanswered_since_.reset();
  closed_unanswered_ = 0;
  sent_unanswered_ = 0;
  handshake_reported_ = false;
  last_heard_ = now;
}

bool ProducerLink::join_due(Clock::time_point now) const {
  if (joined_) return false;
  if (lost_unanswered_) return now - join_sent_ >= kRejoinFloor;
  // Unanswered: the producer may not be up yet. Refused: ask again a little later.
  auto wait = join_refused_ ? std::min<Clock::duration>(timeout_ / 2, kPingInterval) : Clock::duration(timeout_ / 2);
  return now - join_sent_ > wait;
}

void ProducerLink::send(const protocol::Message& message) { wire::send(*dealer_, message); }

void ProducerLink::leave() {
  // A join sent and not yet answered may have been taken: the producer would keep this consumer
  // (and its place under max_consumers) until the silence limit. Leave{0} follows the join on
  // the same connection, so the producer reads it after the join, whatever it answered.
  const bool join_unanswered = !joined_ && !join_refused_ && dealer_;
  if (!joined_ && !join_unanswered) return;
  dealer_->set(zmq::sockopt::linger, static_cast<int>(kLeaveLinger.count()));
  send(protocol::Leave{joined_ ? incarnation_ : 0});
  joined_ = false;
}

// A handshake that fails (the wrong producer on the endpoint, this consumer's key not admitted,
// or a keyless consumer at a producer that has keys) is otherwise silent: ZeroMQ just retries.
// The monitor makes it an error. A connection that closes (the producer died or restarted)
// is otherwise noticed only when announcements stop, producer_timeout later.
void ProducerLink::watch_handshakes() {
  static std::atomic<std::uint64_t> next_monitor{0};
  std::string address = "inproc://modelcast-handshakes-" + std::to_string(next_monitor++);
  int events = ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
               ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_DISCONNECTED;
  if (zmq_socket_monitor(dealer_->handle(), address.c_str(), events) != 0) return;
  try {
    monitor_ = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::pair);
    monitor_->set(zmq::sockopt::linger, 0);
    monitor_->connect(address);
  } catch (const zmq::error_t&) {
    // No descriptor for it: the link goes on unwatched, as where ZeroMQ could not monitor.
    stop_watching();
  }
}

ProducerLink::MonitorNews ProducerLink::read_monitor() {
  MonitorNews news;
  while (auto parts = wire::receive(*monitor_)) {
    if (parts->empty() || (*parts)[0].size() < 6) continue;
    std::uint16_t event = 0;
    std::uint32_t value = 0;
    std::memcpy(&event, (*parts)[0].data(), 2);
    std::memcpy(&value, static_cast<const char*>((*parts)[0].data()) + 2, 4);
    if (event == ZMQ_EVENT_DISCONNECTED) {
      news.disconnected = news.disconnected || joined_;
      // Before the join is answered the join may have gone with the connection (a producer
      // under a connection flood closes the connections that have not joined): asked again
      // soon (join_due), not after the unanswered join's wait. Not after a failed handshake,
      // which ZeroMQ retries on its own and which would only fail again.
      if (!joined_ && !join_refused_ && !handshake_failed_) {
        lost_unanswered_ = true;
        // A producer that said it stops closing its connection is what was expected: not one
        // that closes joins unanswered.
        if (!std::exchange(stop_closing_, false)) ++closed_unanswered_;
      }
      continue;
    }
    handshake_failed_ = true;
    news.failed_handshakes++;
    if (handshake_reported_) continue;
    handshake_reported_ = true;
    std::string why;
    if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
      why = "the producer did not admit this consumer's key (status " + std::to_string(value) + ")";
    } else if (!pinned_ && joined_before_) {
      // A producer killed while a connection's handshake was under way breaks it off as a CURVE
      // server would: where the producer there has answered in plaintext before, a stop or a
      // restart is by far the likelier (its ranks' consumers said "uses keys" after a SIGKILL).
      why = "the producer there answered without keys before, so most likely it stopped or restarted mid-handshake "
            "(this consumer joins again when one answers); if it now uses keys (CurveZMQ), set producer_public_key "
            "and key_file (protocol status " + std::to_string(value) + ")";
    } else if (!pinned_) {
      // ZeroMQ reports a NULL client meeting a CURVE server in more than one way (a mechanism
      // mismatch, an unexpected command, or the connection broken off with an errno), the last
      // exactly as it reports a server that speaks no ZeroMQ at all (an HTTP server answering),
      // and as a producer at its connection cap closing a connection mid-handshake (this
      // consumer then joins again): the message names all three.
      why = "the peer speaks no plaintext ZeroMQ: most likely the producer there uses keys (CurveZMQ) and this "
            "consumer has none, so set producer_public_key to the producer's public key, and key_file to a key "
            "the producer admits; otherwise what listens there is no modelcast producer, so check the endpoint; "
            "or a producer at its cap on connections closed this one before its handshake ended (this consumer "
            "tries again) (protocol status " + std::to_string(value) + ")";
    } else {
      why = "the peer is not the producer whose key is pinned, or speaks no CurveZMQ";
    }
    news.report = "handshake with " + endpoint_ + " failed: " + why;
  }
  return news;
}

}  // namespace modelcast::consumer
