#include "daemon/ops_connection.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "daemon/ops_task_queue.h"

namespace modelcastd {

namespace {

void ip_and_port(const sockaddr_storage& address, std::string& ip, int& port) {
  char text[INET6_ADDRSTRLEN] = {};
  if (address.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(address);
    inet_ntop(AF_INET, &v4.sin_addr, text, sizeof text);
    port = ntohs(v4.sin_port);
  } else if (address.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(address);
    inet_ntop(AF_INET6, &v6.sin6_addr, text, sizeof text);
    port = ntohs(v6.sin6_port);
  }
  ip = text;
}

}  // namespace

BoundedStream::BoundedStream(int fd, const ConnectionLimits& limits, Clock::time_point accepted_at)
    : fd_(fd), limits_(limits), request_deadline_(accepted_at + limits.request_time) {}

bool BoundedStream::ready_for(short events, Clock::time_point deadline) const {
  for (;;) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd_, events, 0};
    const int rc = poll(&p, 1, static_cast<int>(std::min<long long>(left, 60'000)));
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) return false;
  }
}

bool BoundedStream::is_readable() const {
  return buffered_from_ < buffered_to_ || (bytes_read_ < limits_.request_bytes && ready_for(POLLIN, request_deadline_));
}

bool BoundedStream::is_writable() const {
  return ready_for(POLLOUT, answer_deadline_ == Clock::time_point{} ? Clock::now() + limits_.answer_time : answer_deadline_);
}

ssize_t BoundedStream::read(char* ptr, size_t size) {
  if (buffered_from_ == buffered_to_) {
    if (!is_readable()) return -1;
    // A large read goes straight to the caller; a small one fills the buffer first.
    const bool direct = size >= buffer_.size();
    char* into = direct ? ptr : buffer_.data();
    ssize_t n;
    do {
      n = recv(fd_, into, std::min(direct ? size : buffer_.size(), limits_.request_bytes - bytes_read_), 0);
    } while (n < 0 && errno == EINTR);
    if (n <= 0) return n;
    bytes_read_ += static_cast<std::size_t>(n);
    if (direct) return n;
    buffered_from_ = 0;
    buffered_to_ = static_cast<std::size_t>(n);
  }
  const std::size_t n = std::min(size, buffered_to_ - buffered_from_);
  std::memcpy(ptr, buffer_.data() + buffered_from_, n);
  buffered_from_ += n;
  return static_cast<ssize_t>(n);
}

ssize_t BoundedStream::write(const char* ptr, size_t size) {
  if (answer_deadline_ == Clock::time_point{}) answer_deadline_ = Clock::now() + limits_.answer_time;
  if (!ready_for(POLLOUT, answer_deadline_)) return -1;
  ssize_t n;
  do {
    n = send(fd_, ptr, size, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  return n;
}

void BoundedStream::get_remote_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  if (getpeername(fd_, reinterpret_cast<sockaddr*>(&address), &length) == 0) ip_and_port(address, ip, port);
}

void BoundedStream::get_local_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  if (getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length) == 0) ip_and_port(address, ip, port);
}

// One request per connection (answered with "Connection: close"): probes and scrapes open one
// per request or reconnect at once, and a kept-alive connection would hold a pooled thread idle.
bool BoundedServer::process_and_close_socket(socket_t sock) {
  BoundedStream stream(sock, limits_, OpsTaskQueue::accepted_at().value_or(std::chrono::steady_clock::now()));
  bool closed = false;
  const bool served = process_request(stream, true, closed, [](httplib::Request&) {});
  shutdown(sock, SHUT_RDWR);
  close(sock);
  return served;
}

}  // namespace modelcastd
