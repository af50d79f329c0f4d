#include "core/security/curve.h"

#include <vector>

#include <sodium.h>

#include "modelcast/error.h"

namespace modelcast::security {

void make_curve_server(zmq::socket_t& socket, const SecretKey& secret) {
  auto curve = curve_secret(secret);
  socket.set(zmq::sockopt::curve_server, 1);
  socket.set(zmq::sockopt::curve_secretkey, zmq::const_buffer(curve.data(), curve.size()));
  sodium_memzero(curve.data(), curve.size());  // libzmq keeps its own copy
  // Authentication requests carry this domain; the handler answers for it only.
  socket.set(zmq::sockopt::zap_domain, "modelcast");
}

void make_curve_client(zmq::socket_t& socket, const PublicKey& server, const SecretKey& own) {
  auto server_curve = curve_public(server, "the producer's public key");
  auto own_secret = curve_secret(own);
  PublicKey own_public{};
  std::copy(own.begin() + 32, own.end(), own_public.begin());  // libsodium: seed then public key
  auto own_curve = curve_public(own_public, "this consumer's own public key");
  socket.set(zmq::sockopt::curve_serverkey, zmq::const_buffer(server_curve.data(), server_curve.size()));
  socket.set(zmq::sockopt::curve_publickey, zmq::const_buffer(own_curve.data(), own_curve.size()));
  socket.set(zmq::sockopt::curve_secretkey, zmq::const_buffer(own_secret.data(), own_secret.size()));
  sodium_memzero(own_secret.data(), own_secret.size());
}

std::optional<std::string> peer_key(const zmq::message_t& message) {
  const char* user = zmq_msg_gets(const_cast<zmq_msg_t*>(message.handle()), "User-Id");
  if (user == nullptr) return std::nullopt;
  return std::string(user);
}

ZapHandler::ZapHandler(zmq::context_t& context, const std::vector<std::string>& allowed, bool allow_any,
                       const std::string& own_key)
    : socket_(context, zmq::socket_type::rep),
      own_curve_(encode_key(curve_public(decode_public_key(own_key, "the producer's key"), "the producer's key"))),
      allow_any_(allow_any) {
  // Named by index: in a list of dozens, "an allowed consumer key is not a key" left the operator
  // to find which (the key itself is never shown: it may be a secret pasted by mistake).
  for (std::size_t i = 0; i < allowed.size(); ++i) {
    const std::string what = "allowed_consumer_keys[" + std::to_string(i) + "] (of " + std::to_string(allowed.size()) + ")";
    allowed_curve_.insert(encode_key(curve_public(decode_public_key(allowed[i], what), what)));
  }
  socket_.set(zmq::sockopt::linger, 0);
  socket_.bind("inproc://zeromq.zap.01");
}

void ZapHandler::answer_pending(const std::function<void(const std::string& key)>& on_refused) {
  for (;;) {
    std::vector<zmq::message_t> frames;
    zmq::message_t frame;
    if (!socket_.recv(frame, zmq::recv_flags::dontwait)) return;
    bool more = frame.more();
    frames.push_back(std::move(frame));
    while (more) {
      zmq::message_t next;
      (void)socket_.recv(next, zmq::recv_flags::none);
      more = next.more();
      frames.push_back(std::move(next));
    }
    // RFC 27: version, request id, domain, address, identity, mechanism, credentials...
    std::string request_id = frames.size() > 1 ? frames[1].to_string() : std::string();
    bool curve = frames.size() >= 7 && frames[0].to_string() == "1.0" && frames[5].to_string() == "CURVE" &&
                 frames[6].size() == 32;
    std::string key;
    if (curve) {
      CurveKey client{};
      std::memcpy(client.data(), frames[6].data(), client.size());
      key = encode_key(client);
    }
    bool ok = curve && key != own_curve_ && (allow_any_ || allowed_curve_.count(key) != 0);
    if (!ok && on_refused) on_refused(curve ? key : std::string("(not CURVE)"));
    std::vector<std::string> reply = {"1.0", request_id, ok ? "200" : "400", ok ? "OK" : "key not allowed",
                                      ok ? key : std::string(), ""};
    for (std::size_t i = 0; i < reply.size(); ++i) {
      socket_.send(zmq::buffer(reply[i]), i + 1 < reply.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  }
}

}  // namespace modelcast::security
