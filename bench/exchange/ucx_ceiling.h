// The UCX ceiling: UCP's own speed for moving one model of `size` bytes from one process to
// `receivers` processes, the way modelcast does it (tagged send/recv, rendezvous, registered
// memory, the same chunk size, the same UCX environment), without anything else around it.
#pragma once

#include <cstddef>
#include <vector>

namespace bench {

// Milliseconds per repetition (all of them; the caller drops warm-ups): from posting the first
// send until every receiver has reported (over a pipe) that all of its receives completed.
std::vector<double> measure_ucx_ceiling(std::size_t size, int receivers, std::size_t chunk, int repetitions);

// Child side ("ucx-recv" subcommand).
int run_ucx_receiver(std::size_t size, std::size_t chunk);

}  // namespace bench
