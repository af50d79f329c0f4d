// The UCX ceiling: UCP's own speed for moving one model of `size` bytes from the producer's
// process to every consumer process, the way modelcast does it (tagged send/recv, rendezvous,
// registered memory, the same 32 MiB chunks posted at once consumer by consumer, the same
// error-handling mode and UCX environment), with nothing else around it. The sender lives in
// the producer's process and the receivers in the consumer processes, each with its own UCP
// context, so a ceiling transfer can run between two published versions under the same load.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common.h"

namespace bench {

class UcpSender {
 public:
  UcpSender(std::byte* source, std::size_t size, std::size_t chunk);  // registers source
  ~UcpSender();
  void connect(const std::string& hex_address);  // one receiver, in the order of `receivers` below
  // Milliseconds from posting the first send until every receiver reported (over its pipe)
  // that all of its receives completed. Tells each child "ceiling REP", waits for "ready".
  double transfer(int repetition, std::vector<Child>& receivers);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class UcpReceiver {
 public:
  explicit UcpReceiver(std::size_t chunk);
  ~UcpReceiver();
  void map(std::byte* base, std::size_t length);  // registers a receive target
  std::string address() const;                    // hex worker address for UcpSender::connect
  // Progresses the worker until a line arrives on fd.
  void wait_for_command(int fd, std::string& pending, std::optional<std::string>& line);
  // Posts the receives into `target` (mapped), writes "ready", waits, writes "done".
  void receive(int repetition, std::byte* target, std::size_t size, int reply_fd);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace bench
