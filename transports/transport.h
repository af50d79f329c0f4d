// The transport seam: one interface, one implementation per folder (ucx/ now; CUDA IPC later).
//
// Shape taken from NIXL's backend engine: a transport says what it can do, then
// register (memory, once) / connect (prepare a peer) / post (send, receive) / cancel / release.
// Completion is a callback rather than a check() poll: it runs on the transport's own progress
// thread, so it must be short and must not call back into the transport synchronously.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "modelcast/types.h"

namespace modelcast::transport {

struct Capabilities {
  bool host_memory = true;
  bool cuda_memory = false;   // can move device memory directly
  bool remote = false;        // can reach other hosts
};

// Memory registered with a transport; deregistered when destroyed. Must not outlive it.
class MemoryRegion {
 public:
  virtual ~MemoryRegion() = default;
  virtual std::byte* base() const = 0;
  virtual std::size_t length() const = 0;
  virtual MemoryKind kind() const = 0;
};

using PeerId = std::uint64_t;
using TransferId = std::uint64_t;

struct TransferResult {
  bool ok = false;
  std::string error;  // set when !ok
};
using Completion = std::function<void(const TransferResult&)>;
using PeerFailure = std::function<void(PeerId, const std::string& error)>;

// All methods are thread-safe. Errors throw modelcast::Error(kTransport) naming the cause.
class Transport {
 public:
  virtual ~Transport() = default;

  virtual std::string name() const = 0;
  virtual Capabilities capabilities() const = 0;

  // Registers [base, base+length) once; reuse the region for every transfer.
  virtual std::unique_ptr<MemoryRegion> register_memory(void* base, std::size_t length, MemoryKind kind) = 0;

  // Opaque address a peer passes to connect().
  virtual std::vector<std::byte> address() const = 0;

  // Prepares a peer. With `detect_failure`, `on_failure` runs (progress thread) if the peer is
  // later found dead; some transports (UCX's shared memory) are usable only without it.
  virtual PeerId connect(std::span<const std::byte> peer_address, bool detect_failure, PeerFailure on_failure) = 0;
  // Releases a peer; its transfers in flight complete with an error.
  virtual void disconnect(PeerId peer) = 0;

  // Moves region[offset, offset+length) to the peer's receive posted with the same tag.
  virtual TransferId post_send(PeerId peer, const MemoryRegion& region, std::size_t offset,
                               std::size_t length, std::uint64_t tag, Completion done) = 0;
  // Receives a message with `tag` (from any peer) into region[offset, offset+length).
  virtual TransferId post_recv(const MemoryRegion& region, std::size_t offset, std::size_t length,
                               std::uint64_t tag, Completion done) = 0;
  // Completes the transfer with an error if it has not completed yet. Never blocks on the peer.
  virtual void cancel(TransferId transfer) = 0;
};

}  // namespace modelcast::transport
