#include "daemon/attach/seqpacket.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/shown_text.h"
#include "core/wire/socket_directory.h"
#include "daemon/attach/protocol.h"
#include "modelcast/error.h"

namespace modelcastd::attach {
namespace {

sockaddr_un address(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) {
    throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument,
                           "socket path " + modelcast::shown_text(path, 4096) + " is longer than " + std::to_string(sizeof addr.sun_path - 1));
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return addr;
}

}  // namespace

void check_listen_directory(const std::string& path) {
  modelcast::wire::check_socket_directory(
      path, "daemon.socket " + modelcast::shown_text(path, 4096) + ": ",
      ": another local user could bind their own socket there while the daemon is down and serve its clients any "
      "model. Use a directory only the daemon's user can write, such as systemd's RuntimeDirectory (/run/modelcastd, "
      "mode 0750, with UMask=0007 so that clients in the daemon's group can connect)");
}

void check_socket_path_free(const std::string& path) {
  struct stat st{};
  if (lstat(path.c_str(), &st) == 0 && !S_ISSOCK(st.st_mode)) {
    throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument,
                           "socket path " + modelcast::shown_text(path, 4096) + " is taken by a " +
                               (S_ISDIR(st.st_mode) ? "directory" : "file that is not a socket") +
                               ", which is left as it is: set daemon.socket to a free path");
  }
}

int listen_at(const std::string& path) {
  sockaddr_un addr = address(path);
  check_listen_directory(path);
  int probe = connect_to(path);
  if (probe >= 0 || errno == EAGAIN) {  // EAGAIN: a listener there, too busy to take one more
    if (probe >= 0) close(probe);
    throw modelcast::Error(modelcast::ErrorCode::kTransport, "socket " + modelcast::shown_text(path, 4096) + " is served by another process");
  }
  // A socket left by a daemon that died is removed; anything else at the path is the user's
  // (a file, a directory) and is never removed.
  check_socket_path_free(path);
  unlink(path.c_str());
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(fd, 128) != 0) {
    std::string why = std::strerror(errno);
    if (fd >= 0) close(fd);
    throw modelcast::Error(modelcast::ErrorCode::kTransport, "cannot listen at " + modelcast::shown_text(path, 4096) + ": " + why);
  }
  return fd;
}

int connect_to(const std::string& path) {
  sockaddr_un addr = address(path);
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  // A Unix socket connects at once or not at all (EAGAIN: the listener's queue is full).
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) {
    int saved = errno;
    close(fd);
    errno = saved;
    return -1;
  }
  return fd;
}

void check_listener(int fd, const std::string& path) {
  ucred peer{};
  socklen_t size = sizeof peer;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &size) != 0) {
    throw modelcast::Error(modelcast::ErrorCode::kAuthentication,
                           "cannot tell who serves " + modelcast::shown_text(path, 4096) + ": " + std::strerror(errno));
  }
  const uid_t self = geteuid();
  if (peer.uid == self || peer.uid == 0) return;
  const std::string served_by =
      modelcast::shown_text(path, 4096) + " is served by user " + std::to_string(peer.uid) + " (pid " + std::to_string(peer.pid) + ")";
  const uid_t owner = modelcast::wire::socket_directory_owner(path, served_by + ", not attaching: ");
  if (peer.uid == owner) return;
  throw modelcast::Error(modelcast::ErrorCode::kAuthentication,
                         served_by + ", which is not this process's user (" +
                             std::to_string(self) + "), root, or the owner of the socket's directory (" +
                             std::to_string(owner) +
                             "): another user may have bound the path while modelcastd was down; not attaching");
}

bool send_message(int fd, std::span<const char> message, std::span<const int> fds, bool wait) {
  iovec iov{const_cast<char*>(message.data()), message.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerMessage)]{};
  if (fds.size() > kMaxFdsPerMessage) {
    errno = EINVAL;
    return false;
  }
  if (!fds.empty()) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  for (;;) {
    ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL | (wait ? 0 : MSG_DONTWAIT));
    if (n == static_cast<ssize_t>(message.size())) return true;
    if (n < 0 && errno == EINTR) continue;
    return false;
  }
}

namespace {

// Both readers' one way to read a message: up to `max_fds` descriptors taken (more: EMSGSIZE),
// and on failure closed here, or left to the caller.
bool receive(int fd, std::vector<char>& message, std::vector<int>& fds, std::size_t max_fds, bool close_on_failure) {
  fds.clear();
  // The next message's length first (MSG_TRUNC reports it for SOCK_SEQPACKET since Linux 3.4):
  // a buffer of kMaxMessageBytes, zero-filled for every request of a few hundred bytes, cost
  // more than the request. A message over the limit is still read into the limit, to be refused.
  ssize_t size;
  do {
    char probe;
    size = recv(fd, &probe, 1, MSG_PEEK | MSG_TRUNC);
  } while (size < 0 && errno == EINTR);
  if (size < 0) return false;  // as recvmsg would fail: callers read once poll says a message is in
  message.resize(std::clamp<std::size_t>(static_cast<std::size_t>(size), 1, kMaxMessageBytes));
  iovec iov{message.data(), message.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsTheKernelPasses)]{};
  msg.msg_control = control;
  msg.msg_controllen = CMSG_SPACE(sizeof(int) * max_fds);
  ssize_t n;
  do {
    n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS && c->cmsg_len >= CMSG_LEN(0)) {
      std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (std::size_t i = 0; i < count; ++i) {
        int received;
        std::memcpy(&received, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        fds.push_back(received);
      }
    }
  }
  if (n <= 0 || (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0) {
    if (close_on_failure) {
      for (int received : fds) close(received);
      fds.clear();
    }
    // Which of the three, for the caller's message: a closed connection said so for all.
    if (n == 0) errno = ECONNRESET;
    if (n > 0) errno = EMSGSIZE;
    return false;
  }
  message.resize(static_cast<std::size_t>(n));
  return true;
}

}  // namespace

bool receive_message(int fd, std::vector<char>& message, std::vector<int>& fds) {
  return receive(fd, message, fds, kMaxFdsPerMessage, true);
}

bool receive_request(int fd, std::vector<char>& message, std::vector<int>& fds) {
  return receive(fd, message, fds, kMaxFdsTheKernelPasses, false);
}

}  // namespace modelcastd::attach
