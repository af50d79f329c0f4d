// Small helpers around cppzmq for the control plane.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "core/wire/protocol.h"

namespace modelcast::wire {

// "tcp://HOST:0" -> "tcp://HOST:*" (ZeroMQ's spelling of "pick a free port"); others unchanged.
std::string bind_spelling(const std::string& endpoint);

// Throws Error(kInvalidArgument) naming `what` if `endpoint` holds a NUL byte (ZeroMQ takes C strings).
void check_no_nul(const std::string& endpoint, const std::string& what);
// For a tcp:// endpoint, throws Error(kInvalidArgument) naming `what` unless its port is 1-65535
// (0 and "*", any free port, too when `any_port`: a producer binding).
void check_tcp_port(const std::string& endpoint, const std::string& what, bool any_port);

// Throws Error(kInvalidArgument) unless `control_endpoint` is ipc:// or tcp:// with a port:
// ZeroMQ would reject others only when binding, with a less helpful message.
void check_control_endpoint(const std::string& control_endpoint);

// True for ipc:// and for tcp:// on a loopback host (127.0.0.0/8, localhost, [::1]): the
// endpoints where a plaintext control plane reaches only this machine.
bool is_local_endpoint(const std::string& endpoint);

// True for a ZeroMQ error that says the process ran out of descriptors or memory (reported as
// Error(kResource), not as a bad endpoint or a transport failure).
bool short_of_resources(const zmq::error_t& e);

// ZeroMQ takes IPv6 addresses (tcp://[::1]:7000) only on a socket with ZMQ_IPV6 set; this sets
// it for such an endpoint, before the socket binds or connects there.
void allow_ipv6_for(zmq::socket_t& socket, const std::string& endpoint);

// ZeroMQ unlinks whatever is at an ipc:// path when binding, silently taking a live producer's
// endpoint or deleting a file. Throws Error(kTransport) if `endpoint` is ipc:// and a process is
// listening there, Error(kInvalidArgument) if the path holds something other than a socket; a
// stale socket left by a dead process is fine.
void check_ipc_endpoint_free(const std::string& endpoint);

// Endpoint as bound (ZMQ_LAST_ENDPOINT), with the port ZeroMQ picked.
std::string bound_endpoint(zmq::socket_t& socket);

// Sends one protocol message as a single frame, optionally after a routing-id frame (ROUTER).
// Never blocks: on a ROUTER (without ZMQ_ROUTER_MANDATORY), a message to a peer whose queue is
// full or who is gone is dropped; elsewhere a full queue throws nothing and drops it too.
void send(zmq::socket_t& socket, const protocol::Message& message, const std::string* first_frame = nullptr);

// Receives one multipart message without blocking; std::nullopt if none is waiting.
std::optional<std::vector<zmq::message_t>> receive(zmq::socket_t& socket);

}  // namespace modelcast::wire
