// The producer's ZeroMQ side: one ROUTER for requests, replies and announcements, and, with a
// key, CurveZMQ on it with a ZAP handler admitting listed consumer keys. Constructed on the
// caller's thread; then used by the service thread only.
//
// Announcements go over the ROUTER to joined consumers only, not through a PUB socket: ZeroMQ
// keeps a record of every subscription a connected peer sends until it leaves, so any process
// that could connect to a PUB could make the producer hold memory for it (100,000 random topics
// cost about 80 MB). Over the ROUTER, what a peer can make the producer hold is bounded by
// max_consumers (a record each) and the ROUTER's per-connection queues.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "common/closed_in_forked_children.h"
#include "core/producer/connection_cap.h"
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
  // Resolves the key (options.key_file), applies the plaintext rule, binds the ROUTER.
  // Throws Error(kInvalidArgument) for bad options or keys, Error(kTransport) if binding fails.
  ControlPlane(ProducerOptions& options, spdlog::logger& log);
  ~ControlPlane();

  const std::string& endpoint() const { return endpoint_; }
  // Signs manifests; null on a plaintext control plane.
  const security::ManifestSigner* signer() const { return signer_.get(); }

  zmq::socket_t& router() { return router_; }
  // The cap on the ROUTER's connections (connection_cap.h).
  ConnectionCap& connections() { return *connections_; }
  // The ZAP socket to poll (null on a plaintext control plane) and its answers: the keys refused.
  zmq::socket_t* authentication_socket();
  // See ZapHandler::answer_pending.
  void answer_authentication(const std::function<void(const std::string& key)>& on_refused);

 private:
  // Returns how the control plane is secured, for the log line written once the endpoint is bound
  // (the configured one may say port 0).
  std::string set_up_security(ProducerOptions& options);

  zmq::context_t context_;
  std::unique_ptr<security::ManifestSigner> signer_;
  std::unique_ptr<security::ZapHandler> zap_;  // before the sockets it authenticates
  zmq::socket_t router_;
  std::unique_ptr<ConnectionCap> connections_;  // after the router it watches
  // The listening socket, closed in children this process forks; let go before the router
  // closes it.
  std::optional<ClosedInForkedChildren> listener_in_children_;
  std::string endpoint_;
};

}  // namespace modelcast::producer
