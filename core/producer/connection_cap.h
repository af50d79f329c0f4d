// A cap on the control plane's connections, below the producer's open-file limit, read from the
// ROUTER's connection events, which also say which connections closed. Constructed by the
// ControlPlane on the caller's thread (before the ROUTER binds); then used by the service thread
// only.
//
// Every ZeroMQ connection costs the producer a descriptor, whatever max_consumers says, and
// ZeroMQ offers no way to refuse one for being too many: a thousand connections that completed
// their handshake and then sat there once locked every consumer out, and UCX, short of
// descriptors, aborted the producer. The cap counts connections from the ROUTER's monitor
// events (accepted, disconnected) and, when a new one takes the count past the cap, closes the
// oldest connection that has not joined.
//
// Why evict the oldest unjoined connection rather than refuse newcomers (a ZAP handler that
// refuses handshakes at the cap): on a plaintext plane anyone local completes the handshake, so
// flooders that connect first would hold every place, and a consumer arriving later would never
// get in. Evicting the oldest that has not joined means a newcomer always gets a place, and
// keeps it for as long as (cap - joined) newer connections take to arrive: a consumer joins
// within milliseconds of connecting. Joined consumers are never evicted (max_consumers bounds
// them). With keys, a stranger's connection is refused at its handshake anyway and holds a
// place only that long.
//
// How a connection is closed: ZeroMQ has no call to close one peer of a ROUTER, so the cap
// shuts the socket down (shutdown(2)): ZeroMQ's I/O thread reads the end of the stream, closes
// the connection and its descriptor as for any peer that left. Descriptors are recycled, so
// before shutting one down the cap checks that it is still the socket it accepted (the same
// socket inode: Linux numbers sockets from a counter, so a later socket on a reused descriptor
// has another), on a duplicate of the descriptor that keeps that socket for the check and the
// shutdown; a descriptor that is no longer that socket is forgotten, never touched.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <zmq.hpp>

namespace modelcast::producer {

class ConnectionCap {
 public:
  using Clock = std::chrono::steady_clock;

  // Watches `router`'s connections; call before it binds. `cap`: connections held at most.
  // Throws Error(kTransport) if ZeroMQ cannot monitor the socket.
  ConnectionCap(zmq::context_t& context, zmq::socket_t& router, std::size_t cap);
  ~ConnectionCap();
  ConnectionCap(const ConnectionCap&) = delete;
  ConnectionCap& operator=(const ConnectionCap&) = delete;

  // After the bind, on the thread that bound: the endpoint as bound, so that only sockets
  // accepted there are counted. Returns the listening socket's descriptor (which ZeroMQ reports
  // from within the bind), or -1 if it was not reported within a second (never seen).
  int set_listener(const std::string& bound_endpoint);

  // The monitor socket to poll for connection events.
  zmq::socket_t& events() { return events_; }

  // Reads the pending connection events: counts the connections accepted, and returns the
  // descriptors of the connections that closed since the last call (any of the ROUTER's,
  // counted or not), in the order they closed.
  std::vector<int> read_events();

  struct Enforced {
    std::size_t evicted = 0;  // connections closed by this call
    bool first = false;       // the cap was reached for the first time
  };
  // While more connections are open than the cap, closes the oldest whose descriptor is not in
  // `joined` (the connections joined consumers spoke from). Counts what read_events() read.
  Enforced enforce(const std::set<int>& joined);

  std::size_t cap() const { return cap_; }
  std::size_t open() const { return open_.size(); }

  // The cap for an open-file limit: half of it, the other half left to UCX (descriptors per
  // consumer), the trainer's own files and ZeroMQ's internals.
  static std::size_t for_open_file_limit(std::uint64_t limit);
  // Joined consumers the cap leaves room for: half of it. Joined connections are never evicted,
  // and each joined consumer costs more than its connection (UCX's endpoint: a socket or two
  // over TCP); with joins bounded only by max_consumers, 99 consumers joined at an open-file
  // limit of 128, and the trainer's own opens (its checkpoints) failed with EMFILE.
  std::size_t joined_limit() const { return cap_ / 2; }

 private:
  struct Accepted {
    std::uint64_t inode = 0;
    Clock::time_point at{};
  };
  void accepted(int fd);
  // Reads one pending event, waiting up to `wait_ms`; false if there was none. Records the
  // listener, the connections accepted, and those closed (in closed_).
  bool read_event(int wait_ms);
  bool is_listener_socket(int fd) const;

  zmq::socket_t& router_;
  zmq::socket_t events_;
  std::size_t cap_;
  bool reached_ = false;
  // The listener: a TCP port (on any address) or an ipc:// path.
  int listener_port_ = -1;
  std::string listener_path_;
  int listener_fd_ = -1;
  std::map<int, Accepted> open_;  // by descriptor
  std::vector<int> closed_;       // read, not yet returned by read_events()
};

}  // namespace modelcast::producer
