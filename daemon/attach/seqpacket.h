// Unix SOCK_SEQPACKET sockets: whole messages, optionally with one file descriptor attached
// (SCM_RIGHTS). Used by the daemon's attach server and by the client library.
#pragma once

#include <span>
#include <string>
#include <vector>

namespace modelcastd::attach {

// Nothing but the file system says who answers at a socket path, so the daemon listens only in
// a directory that no other user can write (core/wire/socket_directory.h), and a client attaches
// only to a listener run by itself, root, or the directory's owner: otherwise another user could
// bind the path while the daemon is down and serve clients any model.

// Throws Error(kInvalidArgument) naming `path`'s directory and what is wrong with it unless no
// other user can write it. listen_at checks; so does `modelcastd --check`.
void check_listen_directory(const std::string& path);

// Throws Error(kInvalidArgument) if something other than a socket is at `path` (a file, a
// directory), which listen_at leaves as it is. listen_at checks; so does `modelcastd --check`.
void check_socket_path_free(const std::string& path);

// Binds and listens at `path`, after check_listen_directory. A socket file left by a dead daemon
// is replaced; one a live process serves is not (Error(kTransport)). Returns the listening fd
// (caller closes it).
int listen_at(const std::string& path);

// Connects to `path`; returns the fd (blocking, as sockets are), or -1 with errno set (caller
// retries or reports). Never waits: a listener whose queue is full (a daemon that accepts
// nothing, stopped or hung) is EAGAIN, where a blocking connect() waited for it with no limit.
int connect_to(const std::string& path);

// Throws Error(kAuthentication), naming the listener's user and process, unless the process
// listening at the other end of `fd` (connected to `path`) runs as this process's user, root or
// the owner of `path`'s directory, where no other user controls the way there or could have made
// that directory (wire::socket_directory_owner). The caller keeps `fd` either way.
void check_listener(int fd, const std::string& path);

inline constexpr std::size_t kMaxFdsPerMessage = 2;

// Sends one message with `fds` (at most kMaxFdsPerMessage) attached. Returns false if the peer
// is gone or the message does not fit (errno set), and with `wait` false also when the socket
// has no room for it now (errno EAGAIN) instead of waiting; never raises SIGPIPE.
bool send_message(int fd, std::span<const char> message, std::span<const int> fds = {}, bool wait = true);

// Receives one message into `message` and the descriptors that came with it into `fds` (the
// caller owns them; close-on-exec). Returns false at end of stream (errno ECONNRESET) or on
// error. A message longer than kMaxMessageBytes, or with more than kMaxFdsPerMessage
// descriptors, is dropped and reported as an error (false, errno EMSGSIZE).
bool receive_message(int fd, std::vector<char>& message, std::vector<int>& fds);

// The most descriptors Linux passes in one message (SCM_MAX_FD); more are refused by the sender's
// kernel.
inline constexpr std::size_t kMaxFdsTheKernelPasses = 253;

// receive_message for the attach server, whose clients send no descriptors but may: every
// descriptor sent is taken (room for kMaxFdsTheKernelPasses, so that the kernel drops none, as
// dropping closes it on this thread, and the close of a lingering socket blocks) and left in
// `fds` for the caller, whether or not the message is taken (false).
bool receive_request(int fd, std::vector<char>& message, std::vector<int>& fds);

}  // namespace modelcastd::attach
