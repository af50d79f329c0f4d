// Where a plaintext control plane may use an ipc:// endpoint. Without keys nothing proves who
// is at the other end of a socket file but the file system: whoever can write its directory can
// delete the producer's socket file and bind their own, and so serve every consumer that joins
// or reconnects (a takeover once installed seven rogue versions). So a plaintext ipc:// endpoint
// must lie in a directory that no other user can write: owned by this process's user (or by
// root) and writable by its owner only. A shared directory such as /tmp (world-writable, even
// with its sticky bit: anyone may create the name first) is refused; mkdtemp() and
// `mkdir -m 700` make directories that pass. With keys, the handshake proves the producer's
// identity and any directory will do.
#pragma once

#include <string>

namespace modelcast::wire {

// Throws Error(kInvalidArgument), naming the endpoint, the directory and what is wrong with it,
// unless `endpoint` is ipc:// in a directory that passes the rule above; tcp:// endpoints are
// not checked here. The producer checks before binding a plaintext endpoint, the consumer
// before connecting to one. `role` ("producer", "consumer") goes into the message.
void check_private_ipc_directory(const std::string& endpoint, const std::string& role);

}  // namespace modelcast::wire
