// Memory as UCX sees it: local regions (mapped with ucp_mem_map, unmapped when destroyed),
// imported remote regions (an unpacked remote key), and the descriptor an exported region
// travels as: its address and length and UCX's packed remote key, sealed like worker addresses.
//
// Threads: mapping, unmapping and key destruction run on the worker's progress thread (through
// UcxWorker::run/post); a region must not outlive the worker. Its destructor first runs `quiesce`
// there: once it returns nothing UCX does writes into the memory, so the owner may free it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "transports/transport.h"
#include "transports/ucx/ucx_worker.h"

namespace modelcast::transport {

class UcxRegion final : public MemoryRegion {
 public:
  using Quiesce = std::function<void(ucp_mem_h)>;  // progress thread, before ucp_mem_unmap
  UcxRegion(UcxWorker& worker, ucp_mem_h memh, void* base, std::size_t length, MemoryLocation location,
            Quiesce quiesce)
      : worker_(worker), memh_(memh), base_(static_cast<std::byte*>(base)), length_(length), location_(location),
        quiesce_(std::move(quiesce)) {}
  ~UcxRegion() override;
  std::byte* base() const override { return base_; }
  std::size_t length() const override { return length_; }
  MemoryLocation location() const override { return location_; }
  ucp_mem_h memh() const { return memh_; }

 private:
  UcxWorker& worker_;
  ucp_mem_h memh_;
  std::byte* base_;
  std::size_t length_;
  MemoryLocation location_;
  Quiesce quiesce_;
};

class UcxRemoteRegion final : public RemoteRegion {
 public:
  UcxRemoteRegion(UcxWorker& worker, PeerId peer, ucp_rkey_h rkey, std::uint64_t address, std::size_t length)
      : worker_(worker), peer_(peer), rkey_(rkey), address_(address), length_(length) {}
  ~UcxRemoteRegion() override;
  PeerId peer() const override { return peer_; }
  std::size_t length() const override { return length_; }
  ucp_rkey_h rkey() const { return rkey_; }
  std::uint64_t address() const { return address_; }

 private:
  UcxWorker& worker_;
  PeerId peer_;
  ucp_rkey_h rkey_;
  std::uint64_t address_;
  std::size_t length_;
};

// Maps [base, base+length) at `location` with the worker's context. Throws Error(kTransport).
std::unique_ptr<UcxRegion> map_region(UcxWorker& worker, void* base, std::size_t length, MemoryLocation location,
                                      UcxRegion::Quiesce quiesce = {});

// Progress thread: the sealed descriptor of `region`. Throws Error(kTransport).
std::vector<std::byte> pack_region(ucp_context_h context, const UcxRegion& region);

struct ExportedRegion {
  std::uint64_t address = 0;
  std::uint64_t length = 0;
  std::vector<std::byte> packed_key;  // for ucp_ep_rkey_unpack
};
// A peer's descriptor, unsealed; throws Error(kTransport) for a bad seal or no key.
ExportedRegion unpack_region(std::span<const std::byte> descriptor);

}  // namespace modelcast::transport
