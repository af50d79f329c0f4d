// Shared helpers of the exchange benchmark: clocks, statistics, pre-faulted memory, child
// processes of this same binary talking to the parent over pipes (one line per message).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/host_buffer.h"

namespace bench {

std::int64_t realtime_ns();  // CLOCK_REALTIME: comparable between processes on one host
std::int64_t steady_ns();

double median(std::vector<double> values);
double percentile(std::vector<double> values, double p);  // nearest rank, p in [0, 100]

// Pre-faulted, huge-page memory: the core's own HostBuffer, so the ceiling and memcpy buffers
// are allocated exactly like snapshot slots and receive buffers.
using TouchedBuffer = modelcast::HostBuffer;

// A child process running this binary with `args`; fd 3 reads what the parent writes,
// fd 4 writes to the parent.
struct Child {
  int pid = -1;
  int to_child = -1;    // parent writes
  int from_child = -1;  // parent reads
  std::string pending;  // bytes read but not yet returned as a line
};

Child spawn_child(const std::vector<std::string>& args);
// Waits for the child's exit; true if it exited with status 0.
bool reap(Child& child);

void write_line(int fd, const std::string& line);
// Reads one line (without '\n'); std::nullopt on EOF or after `timeout_ms` (-1: no limit).
std::optional<std::string> read_line(int fd, std::string& pending, int timeout_ms);
// Non-blocking: a complete line if one is available now.
std::optional<std::string> try_read_line(int fd, std::string& pending);

constexpr int kParentReadFd = 3;   // in a child
constexpr int kParentWriteFd = 4;  // in a child

std::string self_exe();

}  // namespace bench
