// The Unix socket local clients attach at. Hands out the newest served version of a model as
// a read-only memfd plus its manifest, and keeps one reference per hold until the client
// releases it or its connection closes (so a dead client releases everything it held).
//
// A connection has at most one reply unread: its requests are not read until the client has read
// the last reply, so a client that reads nothing cannot pile up descriptors in flight, which the
// kernel charges to the daemon's user. A dropped connection stays open, counted, until its last
// reply has been read or its client has closed.
//
// Threads: one server thread owns the listening socket, every client connection, their holds
// and pending waits. notify() (any thread) wakes it when a model serves a new version.
// Descriptors clients send are closed by a DescriptorCloser's thread.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/log_rate.h"
#include "daemon/attach/descriptor_closer.h"
#include "daemon/served_version.h"

namespace modelcastd::attach {

// Looks up the version a model serves now: nullptr with `exists` false for an unknown model.
using Lookup = std::function<ServedPtr(const std::string& model, bool& exists)>;

struct AttachStats {
  std::size_t clients = 0;  // connections open
  std::size_t holds = 0;    // versions pinned by clients
  std::uint64_t attaches = 0;  // versions handed out
  std::map<std::string, std::size_t> holds_by_model;
};

class AttachServer {
 public:
  // Listens at `socket_path` (see listen_at); connections wait in the backlog until start().
  // At most `max_clients` connections at once (0: half the process's open-file limit, so that
  // local clients cannot take the descriptors the transports and the repository need); one
  // more is told so (kResource) and closed. Throws modelcast::Error(kTransport) if the socket
  // cannot be had.
  AttachServer(const std::string& socket_path, Lookup lookup, std::size_t max_holds_per_client = 4096,
               std::size_t max_clients = 0);
  // Starts the server thread, once `lookup` knows every configured model: a client that
  // reconnects while the daemon starts must not be told its model does not exist. Idempotent.
  void start();
  ~AttachServer();  // closes every connection (clients' mappings stay valid) and the socket
  AttachServer(const AttachServer&) = delete;
  AttachServer& operator=(const AttachServer&) = delete;

  void notify();  // a model serves a new version: re-check waiting clients. Any thread.
  AttachStats stats() const;

 private:
  struct Client;
  void run();
  void accept_clients();
  bool serve(Client& client);  // false: close the connection
  bool answer(Client& client, ServedPtr version);
  bool send_to(int fd, std::span<const char> message, std::span<const int> fds = {});
  void check_waiters();
  void count_hold(const ServedPtr& version, int delta);
  void drop_client(int fd);
  // Once a second: listens at path_ again if the socket file was removed (rm, a tmp cleaner),
  // which locked every new client out without a word; says so once if another file took its place.
  void check_socket_path(std::chrono::steady_clock::time_point now);

  const std::string path_;
  const Lookup lookup_;
  const std::size_t max_holds_;
  const std::size_t max_clients_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // eventfd
  std::atomic<bool> stop_{false};
  std::atomic<std::size_t> clients_count_{0}, holds_count_{0};
  std::atomic<std::uint64_t> attaches_{0};
  mutable std::mutex holds_mutex_;
  std::map<std::string, std::size_t> holds_by_model_;  // holds_mutex_
  DescriptorCloser closer_;  // before the clients whose stray descriptors it closes
  // Server thread only:
  std::map<int, std::unique_ptr<Client>> clients_;
  std::uint64_t next_hold_ = 1;
  // Out of descriptors (EMFILE): the listening socket stays readable, so it is left out of poll
  // until then rather than polled (and failed) in a busy loop.
  std::chrono::steady_clock::time_point accept_paused_until_{};
  // The socket file listen_fd_ is bound to (device, inode), when the path is next checked, and
  // whether a foreign file there, or a failure to make the socket again, was said.
  std::pair<dev_t, ino_t> bound_file_{};
  std::chrono::steady_clock::time_point path_check_at_{};
  bool foreign_file_said_ = false;
  bool remake_failure_said_ = false;
  // What clients can cause at will (malformed requests, unread replies) is logged at most once
  // per 10 s each.
  modelcast::LogRate malformed_logged_, drops_logged_, refusals_logged_;
  std::thread thread_;  // last: starts after the members above exist
};

}  // namespace modelcastd::attach
