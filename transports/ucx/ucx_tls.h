// What UCX_TLS, as set in this process's environment, leaves on: settings modelcast makes for a
// transport UCX does not load make UCX warn "invalid configuration" at every start, and whether
// shared memory is allowed decides how the UCX transport connects to a near peer
// (UcxTransport::detects_failure_at: UCX offers its shared-memory transports only to endpoints
// without peer-failure detection). Read at each call: the environment may change between
// transports (tests set UCX_TLS).
#pragma once

namespace modelcast::transport {

// Whether a shared-memory transport is on (posix, sysv, cma, knem, xpmem).
bool ucx_shared_memory_allowed();

// Whether UCX's mm transports (posix, sysv) are on: the ones an MM_* setting applies to (xpmem
// too, which Debian's UCX lacks).
bool ucx_mm_transports_allowed();

// Whether TCP is on: the one a TCP_* setting applies to.
bool ucx_tcp_allowed();

}  // namespace modelcast::transport
