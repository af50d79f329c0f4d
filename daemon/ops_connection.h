// One connection of the ops endpoint, read with a deadline for the whole request and a cap on its
// bytes. cpp-httplib (Debian's 0.11.4) restarts its read timeout at every byte it receives and
// keeps every header line it reads: a client sending a byte a second held one of its pooled
// threads for ever (64 such clients left every probe unanswered), and one sending header lines
// without end grew the daemon by hundreds of MB. Its Server reads a connection through a Stream;
// BoundedServer gives it this one and leaves the parsing, the routing and the answers to httplib.
//
// Threads: a BoundedStream is made, used and dropped by the pooled thread that serves its
// connection; BoundedServer adds no state to httplib's.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <string>

#include <httplib.h>

namespace modelcastd {

struct ConnectionLimits {
  std::chrono::milliseconds request_time{1000};   // from accept to the request's last byte
  std::chrono::milliseconds answer_time{1000};    // from the answer's first byte to its last
  std::size_t request_bytes = 64 * 1024;          // request line, headers and any body
};

class BoundedStream final : public httplib::Stream {
 public:
  // Reads and writes `fd` (owned by the caller) until the limits run out; then reads and writes
  // fail (-1), which httplib takes as a connection that went away. The request's time counts
  // from `accepted_at`.
  BoundedStream(int fd, const ConnectionLimits& limits, std::chrono::steady_clock::time_point accepted_at);

  bool is_readable() const override;
  bool is_writable() const override;
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  int socket() const override { return fd_; }

 private:
  using Clock = std::chrono::steady_clock;
  bool ready_for(short events, Clock::time_point deadline) const;

  int fd_;
  ConnectionLimits limits_;
  Clock::time_point request_deadline_;
  Clock::time_point answer_deadline_{};  // set by the first write
  std::size_t bytes_read_ = 0;           // received from the socket, buffered or read
  // Received and not yet read: cpp-httplib reads a request's line and headers a byte at a time,
  // and each byte was a poll and a recv of its own (64 KiB of headers took 0.1 s of CPU time).
  std::array<char, 4096> buffer_{};
  std::size_t buffered_from_ = 0, buffered_to_ = 0;
};

// httplib::Server answering one request per connection through a BoundedStream; a connection's
// request time counts from its accept when its job runs on an OpsTaskQueue (ops_task_queue.h),
// else from when a thread takes it.
class BoundedServer final : public httplib::Server {
 public:
  explicit BoundedServer(ConnectionLimits limits = {}) : limits_(limits) {}

 private:
  bool process_and_close_socket(socket_t sock) override;

  ConnectionLimits limits_;
};

}  // namespace modelcastd
