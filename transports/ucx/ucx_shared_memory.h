// Whether UCX may reach a peer on this machine through shared memory. UCX offers its
// shared-memory transports only to endpoints without peer-failure detection, so the answer
// decides how the UCX transport connects to a near peer (UcxTransport::detects_failure_at).
#pragma once

namespace modelcast::transport {

// Whether UCX_TLS (as set in this process's environment) leaves a shared-memory transport on.
// Read at each call: the environment may change between transports (tests set UCX_TLS).
bool ucx_shared_memory_allowed();

// Whether UCX_TLS leaves UCX's mm transports (posix, sysv) on: the ones an MM_* setting applies
// to (xpmem too, which Debian's UCX lacks). A setting of theirs where none is loaded makes UCX warn "invalid configuration".
bool ucx_mm_transports_allowed();

}  // namespace modelcast::transport
