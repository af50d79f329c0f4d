// The UCX defects the UCX transport works around, keyed on the UCX found at run time (libucp
// keeps its ABI, so a build against Debian's 1.13 may run on a newer library). Each field is true
// where the work-around it names is applied. A field turns false only from a version shown
// not to have the defect: versions not measured keep the work-around. What was measured, and
// how, is in bench/RESULTS.md ("Newer UCX") and scripts/ucx-defects/.
#pragma once

#include <string>

namespace modelcast::transport {

struct UcxVersion {
  unsigned major = 0;
  unsigned minor = 0;
  unsigned release = 0;
  auto operator<=>(const UcxVersion&) const = default;
};

struct UcxQuirks {
  // ucp_request_cancel leaves a receive already matched to a rendezvous send alone: it lands to
  // its last byte. Releasing its region waits for it, up to release_timeout, then halts the
  // worker (UcxTransport::quiesce).
  bool matched_receive_ignores_cancel = true;
  // Sends to a dead peer reached by shared memory (no failure detection) never end: not when
  // cancelled, not when their endpoint is closed by force. Same remedy as above, without the
  // wait once only such sends are left, a second past their endpoint's close.
  bool sends_to_dead_near_peer_never_end = true;
  // Destroying a worker that still tracks an unfinished rendezvous receive asserts: a halted
  // worker is leaked instead (UcxWorker::destroy).
  bool destroying_busy_worker_asserts = true;
  // With PROTO_INDIRECT_ID, a worker holding sends that never ended (to a dead near peer)
  // asserts when it destroys their endpoint: senders keep direct ids (ucx_factory.cpp).
  bool indirect_ids_assert_on_stuck_sends = true;
  // With direct ids, a receiver on its sender's host can read a freed endpoint when the sender
  // dies mid-transfer: receivers use indirect ids (ucx_factory.cpp).
  bool direct_ids_unsafe_for_receivers = true;
  // PEER error mode gets no shared-memory transport, so near peers are connected without failure
  // detection wherever shared memory is allowed (UcxTransport::detects_failure_at).
  bool peer_mode_lacks_shared_memory = true;
  // A peer dying while the two wire up over TCP trips an assertion (ucp_request.c, "got REP
  // message"). Nothing here branches on it: never reopening an endpoint still wiring up (the
  // producer's rejoin) is right on any version; it is logged so that a crash report says so.
  bool peer_death_in_tcp_wireup_asserts = true;
  // Not a 1.13 defect but a later rule: from 1.18.0, a worker in single-thread mode belongs to
  // the first thread that uses it (an assertion where assertions are built in). Ours is made on
  // the caller's thread and then used on its progress thread alone: serialized mode says so
  // (UcxWorker). Off where single-thread mode allowed it, keeping those versions as they were.
  bool single_thread_worker_bound_to_first_thread = false;
  // An address format fact rather than a defect: TCP's loopback device address carries a 64-bit
  // network namespace id up to 1.21 and a 32-bit one from 1.22.0 (18 or 14 bytes), and the
  // check of peers' addresses (check_peer_address) accepts only the one this UCX packs and
  // reads. UCX versions on either side of it cannot connect over loopback TCP.
  bool tcp_loopback_namespace_is_64_bit = true;
  // Closing by force a TCP endpoint with sends under way sometimes fails an assertion
  // (uct_iface.h, `comp->count > 0`; one producer in a few hundred stopped mid-transfer): a
  // region's release gives its sends half of release_timeout before it closes their endpoints
  // (UcxTransport::quiesce). Seen once on 1.13, not looked for on 1.22: kept everywhere.
  bool forced_close_of_busy_tcp_endpoint_may_assert = true;

  bool operator==(const UcxQuirks&) const = default;
};

// The work-arounds a UCX version needs.
UcxQuirks ucx_quirks_for(UcxVersion version);

// The UCX this process runs on (ucp_get_version).
UcxVersion running_ucx_version();

// ucx_quirks_for(running_ucx_version()), computed once; the first call logs the version and the
// work-arounds in force (debug level).
const UcxQuirks& running_ucx_quirks();

// "1.13.1"
std::string to_string(UcxVersion version);
// The names of the fields that are true, comma-separated; "none" if none.
std::string to_string(const UcxQuirks& quirks);

}  // namespace modelcast::transport
