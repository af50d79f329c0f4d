#include "core/producer/connection_cap.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>

#include "modelcast/error.h"

namespace modelcast::producer {
namespace {

// The socket's inode, or 0 if `fd` is not an open socket.
std::uint64_t socket_inode(int fd) {
  struct stat info {};
  if (fstat(fd, &info) != 0 || !S_ISSOCK(info.st_mode)) return 0;
  return static_cast<std::uint64_t>(info.st_ino);
}

}  // namespace

std::size_t ConnectionCap::for_open_file_limit(std::uint64_t limit) {
  return static_cast<std::size_t>(std::max<std::uint64_t>(limit / 2, 16));
}

ConnectionCap::ConnectionCap(zmq::context_t& context, zmq::socket_t& router, std::size_t cap)
    : router_(router), events_(context, zmq::socket_type::pair), cap_(cap) {
  static std::atomic<std::uint64_t> next{0};
  const std::string address = "inproc://modelcast-connections-" + std::to_string(next++);
  if (zmq_socket_monitor(router.handle(), address.c_str(), ZMQ_EVENT_LISTENING | ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED) != 0) {
    throw Error(ErrorCode::kTransport,
                std::string("cannot watch the control socket's connections: ") + zmq_strerror(zmq_errno()));
  }
  // No limit on the monitor's queue: ZeroMQ drops events that do not fit, and a dropped
  // "accepted" would be a connection the cap never counts. The service thread drains it.
  events_.set(zmq::sockopt::rcvhwm, 0);
  events_.set(zmq::sockopt::linger, 0);
  events_.connect(address);
}

ConnectionCap::~ConnectionCap() { zmq_socket_monitor(router_.handle(), nullptr, 0); }

int ConnectionCap::set_listener(const std::string& bound_endpoint) {
  if (bound_endpoint.rfind("ipc://", 0) == 0) {
    listener_path_ = bound_endpoint.substr(6);
  } else if (auto colon = bound_endpoint.rfind(':'); colon != std::string::npos) {
    listener_port_ = std::stoi(bound_endpoint.substr(colon + 1));
  }
  // ZeroMQ sends the LISTENING event from within bind(), before any connection can be accepted,
  // so it is the first event queued; the wait only covers its way through the inproc pipe.
  const auto until = Clock::now() + std::chrono::seconds(1);
  while (listener_fd_ < 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
    if (left <= 0 || !read_event(static_cast<int>(left))) break;
  }
  return listener_fd_;
}

// An accepted socket has the listener's local address: the port of a TCP listener, the path
// of an ipc:// one. A descriptor already closed and reused by anything else (a UCX socket, a
// file) does not, and is not counted.
bool ConnectionCap::is_listener_socket(int fd) const {
  sockaddr_storage local{};
  socklen_t length = sizeof local;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) != 0) return false;
  if (local.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in&>(local).sin_port) == listener_port_;
  if (local.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6&>(local).sin6_port) == listener_port_;
  if (local.ss_family == AF_UNIX) {
    const auto& unix_address = reinterpret_cast<sockaddr_un&>(local);
    auto path_length = length > offsetof(sockaddr_un, sun_path) ? length - offsetof(sockaddr_un, sun_path) : 0;
    if (path_length == 0) return false;
    // An abstract name starts with a NUL byte, which ZeroMQ spells '@'.
    std::string path = unix_address.sun_path[0] == '\0'
                           ? "@" + std::string(unix_address.sun_path + 1, path_length - 1)
                           : std::string(unix_address.sun_path, strnlen(unix_address.sun_path, path_length));
    return !listener_path_.empty() && path == listener_path_;
  }
  return false;
}

void ConnectionCap::accepted(int fd) {
  std::uint64_t inode = socket_inode(fd);
  if (inode == 0 || !is_listener_socket(fd)) {
    open_.erase(fd);
    return;
  }
  open_[fd] = Accepted{inode, Clock::now()};
}

bool ConnectionCap::read_event(int wait_ms) {
  if (wait_ms > 0) {
    zmq::pollitem_t item{events_.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, std::chrono::milliseconds(wait_ms)) == 0) return false;
  }
  zmq::message_t event, endpoint;
  if (!events_.recv(event, zmq::recv_flags::dontwait)) return false;
  if (event.more()) (void)events_.recv(endpoint, zmq::recv_flags::none);  // the endpoint: unused
  if (event.size() < 6) return true;
  std::uint16_t code = 0;
  std::int32_t fd = -1;
  std::memcpy(&code, event.data(), sizeof code);
  std::memcpy(&fd, static_cast<const char*>(event.data()) + sizeof code, sizeof fd);
  if (code == ZMQ_EVENT_LISTENING) listener_fd_ = fd;
  if (code == ZMQ_EVENT_ACCEPTED) accepted(fd);
  if (code == ZMQ_EVENT_DISCONNECTED) {
    open_.erase(fd);
    closed_.push_back(fd);
  }
  return true;
}

std::vector<int> ConnectionCap::read_events() {
  while (read_event(0)) {
  }
  return std::exchange(closed_, {});
}

ConnectionCap::Enforced ConnectionCap::enforce(const std::set<int>& joined) {
  Enforced result;
  while (open_.size() > cap_) {
    auto oldest = open_.end();
    for (auto it = open_.begin(); it != open_.end(); ++it) {
      if (joined.count(it->first)) continue;
      if (oldest == open_.end() || it->second.at < oldest->second.at) oldest = it;
    }
    if (oldest == open_.end()) break;  // every connection is a joined consumer's
    // Still the socket accepted (see the file comment): a descriptor closed since, and maybe
    // reused, is only forgotten. Checked and shut down through a duplicate, which holds the
    // socket checked: ZeroMQ's I/O thread may close the descriptor, and it be reused, between the
    // check and the shutdown.
    // Out of descriptors (a flood against the open-file limit, what the cap is for), the check
    // and the shutdown go to the descriptor itself, as the window is only microseconds.
    const int held = fcntl(oldest->first, F_DUPFD_CLOEXEC, 0);
    const int fd = held >= 0 ? held : errno == EBADF ? -1 : oldest->first;
    if (fd >= 0 && socket_inode(fd) == oldest->second.inode) {
      ::shutdown(fd, SHUT_RDWR);
      result.evicted++;
    }
    if (held >= 0) ::close(held);
    open_.erase(oldest);
  }
  if (result.evicted > 0 && !reached_) {
    reached_ = true;
    result.first = true;
  }
  return result;
}

}  // namespace modelcast::producer
