// The transport seam: one interface, one implementation per transport, each in its own folder
// and built as its own library (transports/CMakeLists.txt), created by name (transport_factory.h).
//
// Shape taken from NIXL's backend engine: a transport says what it can do (Capabilities), then
// register (memory, once) / export and import (a region as an opaque descriptor a peer can
// read: what CUDA IPC and RDMA need) / connect (prepare a peer) / post (send, receive, read) /
// cancel / release. transport_registry.h picks one per consumer by capability.
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

#include "transports/capabilities.h"

namespace modelcast::transport {

// Memory registered with a transport; deregistered when destroyed. Must not outlive it.
class MemoryRegion {
 public:
  virtual ~MemoryRegion() = default;
  virtual std::byte* base() const = 0;
  virtual std::size_t length() const = 0;
  virtual MemoryLocation location() const = 0;
};

using PeerId = std::uint64_t;
using TransferId = std::uint64_t;

// A peer's exported region, imported for one-sided reads. Must not outlive its transport; the
// peer's connection must stay up while reads are posted against it.
class RemoteRegion {
 public:
  virtual ~RemoteRegion() = default;
  virtual PeerId peer() const = 0;
  virtual std::size_t length() const = 0;
};

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

  // Registers [base, base+length) once; reuse the region for every transfer. Memory at a
  // location the capabilities do not handle throws Error(kTransport).
  virtual std::unique_ptr<MemoryRegion> register_memory(void* base, std::size_t length,
                                                        MemoryLocation location) = 0;

  // Opaque address a peer passes to connect().
  virtual std::vector<std::byte> address() const = 0;

  // Prepares a peer. With `detect_failure`, `on_failure` runs (progress thread) if the peer is
  // later found dead; detects_failure_at() says when to ask for it.
  virtual PeerId connect(std::span<const std::byte> peer_address, bool detect_failure, PeerFailure on_failure) = 0;
  // The `detect_failure` to connect a peer at `distance` with. Some transports reach a near
  // peer by their fastest means (shared memory) only without failure detection: they say false
  // there, and the caller notices a dead peer another way (the producer: the consumer's lease).
  // A transport that ignores `detect_failure` has nothing to trade and keeps this default.
  virtual bool detects_failure_at(Reach /*distance*/) const { return true; }
  // Releases a peer; its transfers in flight complete with an error.
  virtual void disconnect(PeerId peer) = 0;

  // Moves region[offset, offset+length) to the peer's receive posted with the same tag.
  virtual TransferId post_send(PeerId peer, const MemoryRegion& region, std::size_t offset,
                               std::size_t length, std::uint64_t tag, Completion done) = 0;
  // Receives a message with `tag` (from any peer) into region[offset, offset+length). It
  // succeeds only where the message is `length` bytes long: a shorter one fails too, naming both.
  virtual TransferId post_recv(const MemoryRegion& region, std::size_t offset, std::size_t length,
                               std::uint64_t tag, Completion done) = 0;
  // Takes the message with `tag` (from any peer), now or when it comes, and drops its bytes:
  // for a transfer refused after its sender posted it. Where a send waits for its receiver to
  // take it (UCX's rendezvous), nothing but that ends it: not a cancel, and over shared memory
  // not even closing the connection, so a send never taken would keep its source from being
  // written (the producer's slot) for good. A transport whose sends end without their receiver
  // (an eager protocol) need only let go of what it keeps of the message.
  virtual void discard(std::uint64_t /*tag*/) {}
  // One-sided access, only where capabilities().one_sided (Error(kTransport) otherwise).
  // An opaque descriptor of `region` that a connected peer imports to read it; the region must
  // stay registered while the peer may read.
  virtual std::vector<std::byte> export_region(const MemoryRegion& region) = 0;
  // A peer's descriptor (from export_region on its side). Throws Error(kTransport) for a
  // descriptor this transport cannot use; never trusts the peer's lengths beyond the descriptor.
  virtual std::unique_ptr<RemoteRegion> import_region(PeerId peer, std::span<const std::byte> descriptor) = 0;
  // Reads source[source_offset, +length) into destination[destination_offset, +length).
  // A range outside either region throws Error(kInvalidArgument) before anything moves.
  virtual TransferId post_read(const RemoteRegion& source, std::size_t source_offset,
                               const MemoryRegion& destination, std::size_t destination_offset,
                               std::size_t length, Completion done) = 0;

  // Completes the transfer with an error if it has not completed yet. Never blocks on the peer.
  virtual void cancel(TransferId transfer) = 0;
  // The caller will not read `source` again (a relay's buffer, which the relay frees or reuses
  // once the reader is done): a transport that keeps what it imported lets it go, at once where
  // no read of it is in flight. Call from a thread that may call the transport, with no read
  // of it posted after.
  virtual void forget_import(const RemoteRegion& /*source*/) {}
};

// Throws Error(kInvalidArgument) unless [offset, offset+length) lies within `size` bytes.
void check_range(const char* what, std::size_t offset, std::size_t length, std::size_t size);

}  // namespace modelcast::transport
