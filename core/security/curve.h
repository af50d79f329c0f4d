// CurveZMQ on the control plane: the producer's sockets are CURVE servers keyed by its
// identity, consumers are CURVE clients that pin it, and a ZAP handler (RFC 27) admits the
// consumers whose keys the producer lists.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "core/security/key_codec.h"

namespace modelcast::security {

// Before bind: the socket only completes handshakes as this key's holder.
void make_curve_server(zmq::socket_t& socket, const SecretKey& secret);
// Before connect: the socket only completes handshakes with the holder of `server`.
void make_curve_client(zmq::socket_t& socket, const PublicKey& server, const SecretKey& own);

// The user id ZeroMQ attaches to each message from an authenticated peer (its CurveZMQ key in
// Z85), or nullopt on a plaintext socket.
std::optional<std::string> peer_key(const zmq::message_t& message);

// Answers ZeroMQ's authentication requests for every socket of one context. Owned and polled
// by the producer's service thread.
class ZapHandler {
 public:
  // `allowed`: Ed25519 public keys (Z85; ProducerOptions::allowed_consumer_keys, a key that is
  // none named by its index there, Error(kInvalidArgument)); with `allow_any`, every client that completes the
  // handshake is admitted, but never one presenting `own_key`, the producer's: whoever holds its
  // secret can sign versions, so a consumer given it is refused. Binds inproc://zeromq.zap.01
  // in `context`.
  ZapHandler(zmq::context_t& context, const std::vector<std::string>& allowed, bool allow_any,
             const std::string& own_key);
  zmq::socket_t& socket() { return socket_; }
  // Answers every request waiting. `on_refused` runs with each refused key (Z85, CurveZMQ form)
  // before the refusal is sent, so whatever it counts is counted by the time the peer knows.
  void answer_pending(const std::function<void(const std::string& key)>& on_refused);

 private:
  zmq::socket_t socket_;
  std::set<std::string> allowed_curve_;  // Z85 of the CurveZMQ forms
  std::string own_curve_;                // the producer's, in that form
  bool allow_any_;
};

}  // namespace modelcast::security
