// What a failed UCX setup (ucp_init, ucp_worker_create) was short of, read off the process.
//
// Why: UCX reports a full /dev/shm, where its shared-memory transport makes its segments, as "Out
// of memory", and a process out of file descriptors as "Input/output error"; neither names what
// the user can do something about.
#pragma once

#include <optional>
#include <string>

namespace modelcast::transport {

// A sentence naming each resource nearly used up now (free descriptors, free space in /dev/shm),
// or nothing if none is. Reads /proc/self/fd and statvfs; any thread.
std::optional<std::string> ucx_setup_shortage();

}  // namespace modelcast::transport
