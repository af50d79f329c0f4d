#include "core/producer/control_plane.h"

#include <sys/resource.h>

#include <cerrno>
#include <set>

#include <spdlog/spdlog.h>

#include "core/producer/open_file_limit.h"
#include "core/security/curve.h"
#include "core/security/manifest_signature.h"
#include "core/wire/socket_directory.h"
#include "core/wire/protocol.h"
#include "core/wire/zmq_channel.h"
#include "core/wire/zmq_context.h"
#include "common/shown_text.h"
#include "modelcast/error.h"

namespace modelcast::producer {
namespace {

// A connection that has not finished its ZeroMQ handshake by then is closed (ZeroMQ's default
// is 30 s): a peer that connects and says nothing holds a descriptor only this long.
constexpr int kHandshakeMs = 5000;


}  // namespace

ControlPlane::ControlPlane(ProducerOptions& options, spdlog::logger& log)
    : context_(wire::new_context("producer control plane")), router_(context_, zmq::socket_type::router) {
  wire::check_control_endpoint(options.control_endpoint);  // rejects a bad scheme before binding
  const std::string security = set_up_security(options);
  auto open_files = raise_open_file_limit(log);  // raised by the producer already: the limit in effect
  connections_ = std::make_unique<ConnectionCap>(context_, router_, ConnectionCap::for_open_file_limit(open_files));
  router_.set(zmq::sockopt::linger, 0);
  router_.set(zmq::sockopt::handshake_ivl, kHandshakeMs);
  // The service loop sends announcements, replies and relay orders on this socket and must
  // never wait on a consumer: without ROUTER_MANDATORY a message to a connection whose queue
  // (SNDHWM, 1,000 messages) is full, or that is gone, is dropped (and sends never block, see
  // wire::send): that consumer misses a heartbeat, and neither the loop nor the trainer waits.
  router_.set(zmq::sockopt::router_mandatory, false);
  // Requests are small (a join carries a UCX address of a few KiB): a peer sending more is
  // disconnected by ZeroMQ before anything is decoded.
  router_.set(zmq::sockopt::maxmsgsize, static_cast<std::int64_t>(protocol::kRequestLimits.max_message_bytes));
  wire::check_ipc_endpoint_free(options.control_endpoint);
  wire::allow_ipv6_for(router_, options.control_endpoint);
  try {
    router_.bind(wire::bind_spelling(options.control_endpoint));
    endpoint_ = wire::bound_endpoint(router_);
    if (const int listener = connections_->set_listener(endpoint_); listener >= 0) listener_in_children_.emplace(listener);
  } catch (const zmq::error_t& e) {
    // ZeroMQ reads the host as an interface name or an IPv4 address and resolves no names.
    const std::string hint = e.num() == ENODEV ? " (give an IPv4 address such as 127.0.0.1, an IPv6 address in "
                                                 "brackets such as [::1], or an interface name: host names are not "
                                                 "bound)"
                                               : "";
    throw Error(wire::short_of_resources(e) ? ErrorCode::kResource : ErrorCode::kTransport,
                "cannot bind '" + options.control_endpoint + "': " + e.what() + hint);
  }
  if (signer_) {
    log.info("CurveZMQ control plane on {}, {}", endpoint_, security);
  } else {
    log.warn("plaintext control plane on {}: {}", endpoint_, security);
  }
}

ControlPlane::~ControlPlane() = default;

std::string ControlPlane::set_up_security(ProducerOptions& options) {
  if (!options.key_file.empty()) {
    if (!options.key.empty()) throw Error(ErrorCode::kInvalidArgument, "give key or key_file, not both");
    options.key = load_key_pair(options.key_file);
  }
  bool local = wire::is_local_endpoint(options.control_endpoint);
  if (options.key.empty()) {
    // A plaintext control plane cannot tell consumers apart: a list would admit anyone.
    if (!options.allowed_consumer_keys.empty()) {
      throw Error(ErrorCode::kInvalidArgument,
                  "allowed_consumer_keys needs the producer's own key (key or key_file): without one the "
                  "control plane is plaintext and admits any consumer");
    }
    if (!local && !options.allow_plaintext_remote) {
      throw Error(ErrorCode::kInvalidArgument,
                  "control endpoint " + shown_text(options.control_endpoint, 4096) +
                      " is reachable from other hosts: give the producer a key (modelcast-keygen) or set "
                      "allow_plaintext_remote");
    }
    wire::check_private_ipc_directory(options.control_endpoint, "producer");
    return std::string("any ") + (local ? "local process" : "host that reaches it") +
           " can join, and versions are unsigned";
  }
  if (!options.integrity) {
    throw Error(ErrorCode::kInvalidArgument, "a signing producer needs integrity on: the signature covers the digests");
  }
  // The key first: a key that is no key was reported as an empty allow-list.
  signer_ = std::make_unique<security::ManifestSigner>(options.key);
  if (options.allowed_consumer_keys.empty() && !options.allow_any_consumer) {
    throw Error(ErrorCode::kInvalidArgument, "no consumer could join: list allowed_consumer_keys or set allow_any_consumer");
  }
  // Both: the list would be ignored, and whoever wrote it believes only those keys join.
  if (!options.allowed_consumer_keys.empty() && options.allow_any_consumer) {
    throw Error(ErrorCode::kInvalidArgument,
                "allowed_consumer_keys lists " + std::to_string(options.allowed_consumer_keys.size()) +
                    " keys and allow_any_consumer admits any: choose one (the list would be ignored)");
  }
  std::set<std::string> allowed(options.allowed_consumer_keys.begin(), options.allowed_consumer_keys.end());
  if (allowed.count(options.key.public_key) != 0) {
    throw Error(ErrorCode::kInvalidArgument,
                "allowed_consumer_keys lists the producer's own public key: a consumer holding it holds the "
                "producer's secret, which signs versions; give each consumer a key pair of its own");
  }
  zap_ = std::make_unique<security::ZapHandler>(context_, options.allowed_consumer_keys, options.allow_any_consumer,
                                                 options.key.public_key);
  security::make_curve_server(router_, signer_->secret());
  return "versions signed by " + options.key.public_key + "; " +
         (options.allow_any_consumer ? std::string("any consumer admitted")
                                     : std::to_string(allowed.size()) + " consumer keys admitted");
}

zmq::socket_t* ControlPlane::authentication_socket() { return zap_ ? &zap_->socket() : nullptr; }

void ControlPlane::answer_authentication(const std::function<void(const std::string& key)>& on_refused) {
  if (zap_) zap_->answer_pending(on_refused);
}

}  // namespace modelcast::producer
