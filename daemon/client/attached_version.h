// What a sidecar View points at: one held version, the read-only mapping of its buffer, and
// the connection its hold is released on. Internal to the client library.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <memory>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "daemon/attach/protocol.h"
#include "modelcast/sidecar.h"

namespace modelcast::sidecar::detail {

// One read-only MAP_SHARED mapping of a daemon buffer; pages are faulted in only as read.
struct Mapping {
  const std::byte* base = nullptr;
  std::size_t size = 0;
  ~Mapping() {
    if (base) munmap(const_cast<std::byte*>(base), size);
  }
};

// The connection to the daemon. Shared by the Client and every View it handed out, so a hold
// can be released after the Client is gone and the daemon keeps pins for as long as views live.
struct Connection {
  int fd = -1;
  // The process that made it. A forked child inherits the socket: its views' releases and its
  // requests on it would be the parent's (a child dropping its copy of a view released the
  // parent's hold, and the daemon wrote the next version into the buffer the parent read).
  // Such a connection sends and reads nothing in the child, which makes its own.
  const pid_t owner = getpid();
  bool inherited() const { return getpid() != owner; }
  std::mutex request_mutex;  // one request/answer exchange at a time
  // An exchange that failed half-way leaves an answer we cannot pair with a request, and a
  // refusal the daemon closes the connection after (kResource, kProtocol) leaves nothing to use:
  // the connection is not used again, the Client makes a new one (the old one's holds stay until
  // the last view lets go). Written by the one call using the connection (request_mutex held
  // while it exchanges).
  bool broken = false;
  std::mutex send_mutex;     // whole messages on the socket (releases come from any thread)
  // Releases the socket had no room for (a daemon that reads nothing: stopped, or hung): sent
  // before the next request. A view's release never waits on the daemon. send_mutex.
  std::vector<std::uint64_t> unsent_releases;
  // A request this client gave up waiting for (a hung daemon) may still be answered. The daemon
  // reads nothing more of a connection until its last answer is read, so this connection's
  // releases would wait, pinning versions while other views still use it: the answer is read
  // (its hold released) before releases are sent, and at the Client's next request. Set by the
  // exchange that gave up. send_mutex.
  bool answer_outstanding = false;
  void read_late_answer();
  // Sends the unsent releases while the socket has room; false if some are left. send_mutex held.
  bool flush_releases();
  std::mutex cache_mutex;
  std::vector<std::pair<std::uint64_t, std::shared_ptr<Mapping>>> mappings;  // by buffer id; cache_mutex
  // A connection used for no more requests (lost, broken, or one idle too many) keeps only what
  // its views map: its cache let go, a view held across a daemon restart kept every buffer of
  // the dead daemon mapped, and with them its shared memory.
  void retire();
  ~Connection();
  void release(std::uint64_t hold) noexcept;
};

struct AttachedVersion {
  modelcastd::attach::Manifest manifest;
  std::vector<TensorSpec> specs;  // manifest.tensors as specs, in the same order
  // Each name's first place in `specs` (View::find): made with the specs, which never change
  // after, so any thread reads it; a scan per lookup made finding every tensor quadratic.
  std::unordered_map<std::string_view, std::size_t> first_at;
  std::shared_ptr<Mapping> mapping;
  std::shared_ptr<Connection> connection;
  ~AttachedVersion() { connection->release(manifest.hold); }
  const void* data(std::size_t i) const { return mapping->base + manifest.tensors[i].offset; }
  // The i-th tensor as readers see it: its part's place and its fp8 scales point into `manifest`.
  TensorView view(std::size_t i) const {
    const auto& t = manifest.tensors[i];
    return {&specs[i], data(i), t.scales, t.scale_block, t.box_offset, t.whole_shape};
  }
};

}  // namespace modelcast::sidecar::detail
