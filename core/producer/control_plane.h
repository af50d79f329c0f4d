// The producer's ZeroMQ side: a ROUTER for requests and an XPUB for announcements, bound next
// to each other (subscriptions handled here, so only the model's topic takes memory), and, with a key, CurveZMQ on both with a ZAP handler admitting listed consumer
// keys. Constructed on the caller's thread; then used by the service thread only.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "modelcast/producer.h"

namespace spdlog {
class logger;
}

namespace modelcast::security {
class ManifestSigner;
class ZapHandler;
}  // namespace modelcast::security

namespace modelcast::producer {

class ControlPlane {
 public:
  // Resolves the key (options.key_file), applies the plaintext rule, binds both sockets.
  // Throws Error(kInvalidArgument) for bad options or keys, Error(kTransport) if binding fails.
  ControlPlane(ProducerOptions& options, spdlog::logger& log);
  ~ControlPlane();

  const std::string& endpoint() const { return endpoint_; }
  const std::string& announce_endpoint() const { return announce_endpoint_; }
  // Signs manifests; null on a plaintext control plane.
  const security::ManifestSigner* signer() const { return signer_.get(); }

  zmq::socket_t& router() { return router_; }
  zmq::socket_t& publisher() { return publisher_; }
  // Applies the subscriptions and unsubscriptions waiting on the publisher that name `topic`
  // (the model) and drops every other; returns how many were dropped. Poll publisher() for them.
  std::size_t answer_subscriptions(const std::string& topic);
  // The ZAP socket to poll (null on a plaintext control plane) and its answers: the keys refused.
  zmq::socket_t* authentication_socket();
  // See ZapHandler::answer_pending.
  void answer_authentication(const std::function<void(const std::string& key)>& on_refused);

 private:
  void set_up_security(ProducerOptions& options, spdlog::logger& log);

  zmq::context_t context_;
  std::unique_ptr<security::ManifestSigner> signer_;
  std::unique_ptr<security::ZapHandler> zap_;  // before the sockets it authenticates
  zmq::socket_t router_;
  zmq::socket_t publisher_;
  std::string endpoint_;
  std::string announce_endpoint_;
};

}  // namespace modelcast::producer
