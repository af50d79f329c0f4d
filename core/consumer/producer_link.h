// The consumer's control-plane connection to its producer: one DEALER (requests, replies and
// the announcements the producer sends every joined consumer), with CurveZMQ when the
// producer's key is pinned, a monitor that turns failed handshakes into errors and notices a
// lost connection, and the join/ping/liveness state. Service thread only.
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
  ~ProducerLink();  // wipes the consumer's secret key

  const std::optional<security::PublicKey>& pinned_key() const { return pinned_; }

  // A fresh DEALER (nothing queued for a dead producer is replayed) and a join request on it.
  // Throws Error(kResource) if the DEALER cannot be made (no descriptor left): the link keeps its
  // old one to poll, unjoined and unwatched, and the attempt counts, so join_due() waits before
  // the next.
  void join(const protocol::JoinRequest& request, Clock::time_point now);
  // A join that could not even be asked (the consumer's fresh transports could not be made):
  // counted as one, as above.
  void join_failed(Clock::time_point now);
  // Applies an accepted join: from now on announcements are due.
  void joined(const protocol::JoinReply& reply, Clock::time_point now);
  void refused() {
    join_refused_ = true;
    said_stopped_ = false;  // another producer answered
    unanswered_since_.reset();
    closed_unanswered_ = 0;
    sent_unanswered_ = 0;
  }
  bool is_joined() const { return joined_; }
  // Whether a join was ever answered at this endpoint (a producer ran there).
  bool joined_before() const { return joined_before_; }
  // The joined producer said it stops (Announce::stopping): the link is no longer joined, and
  // the next join is due once the producer's connection closes (or as an unanswered join's);
  // joins then go unanswered until another producer runs there, which is no fault.
  void producer_stopping(Clock::time_point now);
  // Since the producer said it stops, until a join is answered again.
  bool producer_said_it_stopped() const { return said_stopped_; }
  // Its connection closed before the word was read (both came in one turn): the join is due now.
  void stopped_connection_closed() {
    stop_closing_ = false;
    lost_unanswered_ = true;
  }
  // How long joins have gone without any answer (none while joined, or since a refusal).
  // A handshake failed since the last successful join (and was reported).
  bool handshake_failing() const { return handshake_reported_; }
  std::optional<Clock::duration> unanswered_for(Clock::time_point now) const {
    if (joined_ || !unanswered_since_) return std::nullopt;
    return now - *unanswered_since_;
  }
  // Whether most of those unanswered joins had their connection closed by the other end first
  // (something there accepts connections and closes them: not "nothing runs there"; one close,
  // a producer stopped with a join on its way, and joins into the void after it, are the latter).
  bool mostly_closed_unanswered() const { return closed_unanswered_ > 0 && 2 * closed_unanswered_ >= sent_unanswered_; }
  std::uint64_t closed_unanswered() const { return closed_unanswered_; }
  std::uint64_t sent_unanswered() const { return sent_unanswered_; }
  std::uint64_t incarnation() const { return incarnation_; }

  // The join should be sent again: unanswered for a while, refused a moment ago, or its
  // connection closed before any answer came.
  bool join_due(Clock::time_point now) const;
  bool ping_due(Clock::time_point now) const { return joined_ && now - last_ping_ > kPingInterval; }
  void pinged(Clock::time_point now) { last_ping_ = now; }
  void heard(Clock::time_point now) { last_heard_ = now; }
  // Joined, and no announcement for producer_timeout: the producer is gone, or has forgotten
  // this consumer (it announces to the consumers it knows only).
  bool silent(Clock::time_point now) const { return joined_ && now - last_heard_ > timeout_; }

  // Sockets to poll: dealer, monitor (or null).
  zmq::socket_t& dealer() { return *dealer_; }
  zmq::socket_t* monitor() { return monitor_.get(); }
  void send(const protocol::Message& message);
  // The consumer is closing: tells a producer it joined, or whose answer to its join has not come
  // yet (protocol::Leave), and gives the message kLeaveLinger to go out when the DEALER closes
  // (it drops what is unsent otherwise).
  void leave();
  static constexpr std::chrono::milliseconds kLeaveLinger{100};

  // What the monitor saw since it was last read: how many handshakes failed, a description of
  // the first failure since the last successful join (once per failing streak, not per retry),
  // and whether a connection of a joined link closed. The producer knows a consumer by its
  // connection: after a reconnect it has forgotten this one, and announces nothing to it.
  struct MonitorNews {
    std::size_t failed_handshakes = 0;
    std::optional<std::string> report;
    bool disconnected = false;
  };
  MonitorNews read_monitor();

  // The producer drops consumers silent for 5 s or more: ping well inside that.
  static constexpr std::chrono::milliseconds kPingInterval{1000};
  // The soonest a join whose connection closed unanswered is sent again: ZeroMQ's own reconnect
  // interval, so that a producer closing every connection at once is not asked faster than that.
  static constexpr std::chrono::milliseconds kRejoinFloor{100};

 private:
  void watch_handshakes();
  // The state every join attempt starts from, sent or not.
  void begin_attempt(Clock::time_point now);
  // Ends the DEALER's monitor, then closes its reading end. In that order: libzmq's I/O thread
  // reports an event to a reader that is gone by blocking for good (libzmq 4.3.4; upstream
  // issue 3575), and every socket of the context, the next join's included, with it.
  void stop_watching();

  std::string endpoint_;
  std::chrono::milliseconds timeout_;
  std::optional<security::PublicKey> pinned_;
  security::SecretKey own_{};
  zmq::context_t context_;
  std::unique_ptr<zmq::socket_t> dealer_;
  std::unique_ptr<zmq::socket_t> monitor_;
  bool joined_ = false;
  bool join_refused_ = false;
  bool handshake_reported_ = false;
  bool handshake_failed_ = false;  // since the last join was sent
  bool joined_before_ = false;     // a join was answered at this endpoint (with this link's keys or none)
  bool said_stopped_ = false;      // the producer last joined said it stops, and none answered since
  bool stop_closing_ = false;      // ... and its connection, on this DEALER, is yet to close
  bool lost_unanswered_ = false;   // the last join's connection closed before an answer
  std::uint64_t closed_unanswered_ = 0;  // such closes since the unanswered streak began
  std::uint64_t sent_unanswered_ = 0;    // joins sent since the unanswered streak began
  std::uint64_t incarnation_ = 0;
  Clock::time_point join_sent_{};
  std::optional<Clock::time_point> unanswered_since_;  // the first join of an unanswered streak
  Clock::time_point last_heard_{};
  Clock::time_point last_ping_{};
};

}  // namespace modelcast::consumer
