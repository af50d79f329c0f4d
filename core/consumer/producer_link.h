// The consumer's control-plane connection to its producer: the DEALER (requests and replies)
// and the SUB (announcements), with CurveZMQ when the producer's key is pinned, a monitor that
// turns failed handshakes into errors, and the join/ping/liveness state. Service thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "core/security/key_codec.h"
#include "core/wire/protocol.h"
#include "modelcast/consumer.h"

namespace modelcast::consumer {

class ProducerLink {
 public:
  using Clock = std::chrono::steady_clock;

  // Resolves keys (options.key_file; a fresh pair when a producer key is pinned and none is
  // given) and applies the plaintext rule. Throws Error(kInvalidArgument) for a bad endpoint or key.
  explicit ProducerLink(ConsumerOptions& options);

  const std::optional<security::PublicKey>& pinned_key() const { return pinned_; }

  // A fresh DEALER (nothing queued for a dead producer is replayed) and a join request on it.
  void join(const protocol::JoinRequest& request, Clock::time_point now);
  // Applies an accepted join: subscribes to the announcement endpoint. Throws Error(kProtocol)
  // for an endpoint that cannot be used (the join is then tried again).
  void joined(const protocol::JoinReply& reply, Clock::time_point now);
  void refused() { join_refused_ = true; }
  bool is_joined() const { return joined_; }
  std::uint64_t incarnation() const { return incarnation_; }

  // The join should be sent again: unanswered for a while, or refused a moment ago.
  bool join_due(Clock::time_point now) const;
  bool ping_due(Clock::time_point now) const { return joined_ && now - last_ping_ > kPingInterval; }
  void pinged(Clock::time_point now) { last_ping_ = now; }
  void heard(Clock::time_point now) { last_heard_ = now; }
  bool silent(Clock::time_point now) const { return joined_ && now - last_heard_ > timeout_; }

  // Sockets to poll: dealer, monitor (or null), subscriber (or null).
  zmq::socket_t& dealer() { return *dealer_; }
  zmq::socket_t* monitor() { return monitor_.get(); }
  zmq::socket_t* subscriber() { return subscriber_.get(); }
  void send(const protocol::Message& message);

  // Reads the monitor: how many handshakes failed, and a description of the first failure
  // since the last successful join (once per failing streak, not per retry).
  std::pair<std::size_t, std::optional<std::string>> failed_handshakes();

  // The producer drops consumers silent for 5 s or more: ping well inside that.
  static constexpr std::chrono::milliseconds kPingInterval{1000};

 private:
  void watch_handshakes();

  std::string endpoint_;
  std::string model_;
  std::chrono::milliseconds timeout_;
  std::optional<security::PublicKey> pinned_;
  security::SecretKey own_{};
  zmq::context_t context_;
  std::unique_ptr<zmq::socket_t> dealer_;
  std::unique_ptr<zmq::socket_t> monitor_;
  std::unique_ptr<zmq::socket_t> subscriber_;
  bool joined_ = false;
  bool join_refused_ = false;
  bool handshake_reported_ = false;
  std::uint64_t incarnation_ = 0;
  Clock::time_point join_sent_{};
  Clock::time_point last_heard_{};
  Clock::time_point last_ping_{};
};

}  // namespace modelcast::consumer
