#include "core/wire/zmq_channel.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <arpa/inet.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "modelcast/error.h"

namespace modelcast::wire {

bool short_of_resources(const zmq::error_t& e) {
  return e.num() == EMFILE || e.num() == ENFILE || e.num() == ENOMEM;
}

std::string bind_spelling(const std::string& endpoint) {
  if (endpoint.rfind("tcp://", 0) == 0 && endpoint.size() > 2 && endpoint.ends_with(":0")) {
    return endpoint.substr(0, endpoint.size() - 1) + "*";
  }
  return endpoint;
}

void check_no_nul(const std::string& endpoint, const std::string& what) {
  if (const auto nul = endpoint.find('\0'); nul != std::string::npos) {
    throw Error(ErrorCode::kInvalidArgument, what + " '" + endpoint.substr(0, nul) + "' goes on past a NUL byte at byte " +
                                                 std::to_string(nul) + ": ZeroMQ would take only the part before it");
  }
}

void check_tcp_port(const std::string& endpoint, const std::string& what, bool any_port) {
  if (endpoint.rfind("tcp://", 0) != 0) return;
  auto colon = endpoint.rfind(':');
  if (colon == std::string::npos || colon < 6) throw Error(ErrorCode::kInvalidArgument, what + " '" + endpoint + "' has no port");
  const std::string port = endpoint.substr(colon + 1);
  if (any_port && port == "*") return;  // ZeroMQ's spelling of "any free port"
  // ZeroMQ reads the port with atoi and keeps it modulo 2^16: 99999 would bind 34463.
  const bool digits = !port.empty() && port.size() <= 5 &&
                      std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; });
  const long number = digits ? std::stol(port) : -1;
  if (number < (any_port ? 0 : 1) || number > 65535) {
    throw Error(ErrorCode::kInvalidArgument, what + " '" + endpoint + "' has port '" + port + "'; a port is " +
                                                 (any_port ? "0 (any free one)" : "1") + " to 65535");
  }
}

void check_control_endpoint(const std::string& control_endpoint) {
  check_no_nul(control_endpoint, "control endpoint");
  if (control_endpoint.rfind("tcp://", 0) == 0) {
    check_tcp_port(control_endpoint, "control endpoint", true);
    // Digits and dots are meant as an IPv4 address; one that is none (256.1.1.1, 10.1.1) was
    // called "reachable from other hosts" (give a key), or, with allow_plaintext_remote, "No such
    // device" from ZeroMQ, which reads it as an interface name.
    const std::string host = control_endpoint.substr(6, control_endpoint.rfind(':') - 6);
    in_addr v4{};
    if (!host.empty() && host.find_first_not_of("0123456789.") == std::string::npos &&
        inet_pton(AF_INET, host.c_str(), &v4) != 1) {
      throw Error(ErrorCode::kInvalidArgument, "control endpoint '" + control_endpoint + "' has host '" + host +
                                                   "', which is not an IPv4 address (four numbers 0 to 255)");
    }
    return;
  }
  if (control_endpoint.rfind("ipc://", 0) == 0) return;
  throw Error(ErrorCode::kInvalidArgument,
              "control endpoint '" + control_endpoint + "' must start with tcp:// or ipc://");
}

bool is_local_endpoint(const std::string& endpoint) {
  if (endpoint.rfind("ipc://", 0) == 0) return true;
  if (endpoint.rfind("tcp://", 0) != 0) return false;
  auto colon = endpoint.rfind(':');
  if (colon == std::string::npos || colon < 6) return false;
  std::string host = endpoint.substr(6, colon - 6);
  // "lo": a producer may bind to an interface by name, and Linux's loopback one is lo.
  if (host == "localhost" || host == "[::1]" || host == "lo") return true;
  // A literal IPv4 address in 127.0.0.0/8, read by inet_pton: a prefix test would take a host
  // name such as 127.0.0.1.example.com for loopback.
  in_addr v4{};
  return inet_pton(AF_INET, host.c_str(), &v4) == 1 && (ntohl(v4.s_addr) >> 24) == 127;
}

void allow_ipv6_for(zmq::socket_t& socket, const std::string& endpoint) {
  if (endpoint.rfind("tcp://[", 0) == 0) socket.set(zmq::sockopt::ipv6, true);
}

void check_ipc_endpoint_free(const std::string& endpoint) {
  if (endpoint.rfind("ipc://", 0) != 0) return;
  std::string path = endpoint.substr(6);
  sockaddr_un address{};
  if (path.empty() || path.size() >= sizeof address.sun_path || path[0] == '@') return;  // abstract: the kernel refuses
  // ZeroMQ unlinks the path before it binds, whatever is there: a regular file named by mistake
  // (a model's weights) was deleted, and a directory read as "Address already in use".
  if (struct stat st{}; ::lstat(path.c_str(), &st) == 0 && !S_ISSOCK(st.st_mode)) {
    throw Error(ErrorCode::kInvalidArgument, "'" + endpoint + "' names " +
                                                 (S_ISDIR(st.st_mode) ? "a directory" : "a file that is not a socket") +
                                                 ": give the path of a socket to create (what is there is left alone)");
  }
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.c_str(), path.size());
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  bool live = ::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0;
  ::close(fd);
  if (live) {
    throw Error(ErrorCode::kTransport, "'" + endpoint + "' is in use by another process (a producer already serves there)");
  }
}

std::string bound_endpoint(zmq::socket_t& socket) { return socket.get(zmq::sockopt::last_endpoint); }

void send(zmq::socket_t& socket, const protocol::Message& message, const std::string* first_frame) {
  auto bytes = protocol::encode(message);
  if (first_frame) {
    socket.send(zmq::buffer(*first_frame), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
  }
  socket.send(zmq::buffer(bytes.data(), bytes.size()), zmq::send_flags::dontwait);
}

std::optional<std::vector<zmq::message_t>> receive(zmq::socket_t& socket) {
  std::vector<zmq::message_t> parts;
  zmq::message_t part;
  if (!socket.recv(part, zmq::recv_flags::dontwait)) return std::nullopt;
  bool more = part.more();
  parts.push_back(std::move(part));
  while (more) {
    zmq::message_t next;
    (void)socket.recv(next, zmq::recv_flags::none);  // the rest of a multipart arrives atomically
    more = next.more();
    parts.push_back(std::move(next));
  }
  return parts;
}

}  // namespace modelcast::wire
