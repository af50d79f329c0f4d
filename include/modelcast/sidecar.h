// Sidecar client: attaches a local inference process to modelcastd. The daemon receives every
// version once into shared memory; a Client maps it read-only, without copying, and gets the
// same acquire / wait_for_version / view interface as a Consumer. Needs no UCX or ZeroMQ setup.
#pragma once

#include "modelcast/export.h"

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "modelcast/tensor.h"

namespace modelcast::sidecar {

struct ClientOptions {
  std::string socket_path = "/run/modelcastd/attach.sock";  // modelcastd's [daemon] socket
  std::string model;                                        // a model the daemon serves
  // Keep retrying to connect this long (the daemon may still be starting); 0: try once. A daemon
  // whose queue of connections to accept is full is waited for a second at least.
  std::chrono::milliseconds connect_timeout{0};
  // After the daemon closed the connection (it restarted), acquire and wait_for_version keep
  // trying to reconnect this long, backing off up to 500 ms between tries, counted from when the
  // call began (calls waiting on another's reconnect give up with it); 0: try once (as
  // connect_timeout, a full queue for a second at least from when the call began).
  std::chrono::milliseconds reconnect_timeout{10000};
};

namespace detail {
struct AttachedVersion;
}

// A held version, like ModelView: cheap to copy, immutable, and its bytes stay valid and
// unchanged while any copy is alive (the daemon keeps the version pinned for this client),
// even after the Client is destroyed. Memory is mapped read-only: writing to it faults.
// Safe to use from any thread. Accessors below throw Error(kState) when empty().
class MODELCAST_API View {
 public:
  View() = default;
  explicit View(std::shared_ptr<const detail::AttachedVersion> state);

  bool empty() const noexcept { return state_ == nullptr; }
  explicit operator bool() const noexcept { return !empty(); }

  std::uint64_t version() const;
  std::int64_t step() const;
  std::uint64_t producer_incarnation() const;
  const std::map<std::string, std::string>& metadata() const;
  // "producer" (received by the daemon) or "repository" (recovered from disk after a restart).
  const std::string& source() const;

  std::size_t tensor_count() const;
  std::vector<TensorView> tensors() const;  // in the producer's registration order
  std::optional<TensorView> find(std::string_view name) const;
  TensorView tensor(std::string_view name) const;  // Error(kInvalidArgument) if absent

 private:
  const detail::AttachedVersion& state() const;  // Error(kState) when empty
  std::shared_ptr<const detail::AttachedVersion> state_;
};

class MODELCAST_API Client {
 public:
  // Connects to the daemon. Throws Error(kTransport) if it cannot within connect_timeout,
  // Error(kInvalidArgument) for an empty model name, one past 255 bytes or with a control
  // character, a negative connect_timeout or reconnect_timeout or a socket path that is too long, Error(kAuthentication) if the listener
  // runs as a user that is not this process's, root or the owner of the socket's directory (so
  // does a reconnect).
  explicit Client(ClientOptions options);
  // Views already handed out stay valid (their holds stay with the daemon). Calls already under
  // way on other threads end as they would have (a wait at its version or its timeout); one
  // begun as the client is destroyed is the caller's error. After fork(), the child's calls make
  // connections of their own, and its copies of the parent's views release nothing: the holds
  // stay the parent's.
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // The newest version the daemon serves, or an empty view before the first. Each buffer is
  // mapped once and the mapping cached, so the cost does not grow with the model's size (a
  // connection keeps at most 16 mappings no view uses: a model of more than 8 buffers in
  // rotation, or buffers a restarted model left, are mapped again when next used).
  // Thread-safe: each call in flight has a connection of its own (the daemon answers one
  // connection's requests in order), so one thread's long wait_for_version delays no other call;
  // a few idle connections are kept, each mapping buffers on its own. A restarted daemon is
  // reconnected to transparently; views held from before stay valid. Throws Error(kTransport) if the daemon
  // stays gone for reconnect_timeout or does not answer, Error(kInvalidArgument) if no model of
  // that name is configured (one configured whose start failed, tried again on a backoff or at a
  // reload, has no version yet: an empty view).
  View acquire() const;

  // Waits until the daemon serves a version >= `version`; returns it, or an empty view on timeout.
  // Reconnects like acquire(): reconnecting to a daemon that came back counts against `timeout`,
  // and one that stays gone for reconnect_timeout is Error(kTransport), however short `timeout`
  // is. Throws Error(kInvalidArgument) for a negative timeout.
  View wait_for_version(std::uint64_t version, std::chrono::milliseconds timeout) const;

 private:
  class Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace modelcast::sidecar
