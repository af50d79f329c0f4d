// The producer's snapshot slots: memory registered once, which version each slot holds, who is
// reading it (leases), and each published version's manifest and signature.
//
// Threads: the trainer's thread reserves a slot and copies into it; the service thread
// publishes, leases and releases; the digest thread reads pinned slots. `mutex_` guards all
// bookkeeping. Slot memory is written only while reserved, when no lease can reach it, and is
// only read once published.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/host_buffer.h"
#include "core/model/manifest.h"
#include "core/producer/slot_pool.h"
#include "transports/transport_set.h"

namespace modelcast::security {
class ManifestSigner;
}

namespace modelcast::producer {

class SnapshotStore {
 public:
  using Clock = std::chrono::steady_clock;

  // A version leased for a fetch: what the reply carries and where the bytes are.
  struct Leased {
    SlotPool::Lease lease;
    Manifest manifest;                  // digests filled in unless digests_pending
    std::vector<std::byte> signature;   // empty when unsigned or digests_pending
    bool digests_pending = false;
    const transport::MemoryRegion* region = nullptr;  // registered with the transport asked for
  };

  // A version held for a reader that is not a consumer (the persist writer): the manifest as
  // published, and the slot's bytes, valid and unchanged until unpin().
  struct Pinned {
    std::uint64_t lease_id = 0;
    Manifest manifest;
    const std::byte* base = nullptr;
  };

  explicit SnapshotStore(std::size_t slot_count);

  // Allocates every slot for `bytes` and registers it with each transport of the set; once,
  // before the first reservation. With `device_slots` (a device producer's, one per slot, on
  // `device`), one-sided transports that read device memory register those instead of the
  // host slots. Throws Error(kResource) or Error(kTransport).
  void allocate(std::uint64_t bytes, const transport::TransportSet& transports,
                const std::vector<void*>& device_slots = {}, int device = 0);
  // The bytes allocate() gave each slot: a snapshot's size (0 before allocate).
  std::uint64_t slot_bytes() const;

  // Blocks until a slot may be written: every other slot may be held by readers, until an ack,
  // a lease lapses, or lease_timeout has passed and the readers of one slot lose their leases.
  // How long a writer waits for the sends of an ended lease (SlotPool::set_sending) once their
  // connection is closed, at most: see reserve().
  static constexpr std::chrono::seconds kDrainGrace{1};
  struct Reserved {
    std::size_t slot = 0;
    // Ended leases whose sends had still not ended when the writer stopped waiting for them.
    std::size_t sends_abandoned = 0;
    // The block digests of the host snapshot the slot's memory holds (empty when not known: a
    // slot never written, or one whose host bytes are not a whole version), and those of the
    // newest version hashed so far: what copy_changed_blocks_pays() weighs.
    std::vector<std::uint64_t> held_blocks;
    std::vector<std::uint64_t> newest_blocks;
  };
  Reserved reserve(Clock::duration lease_timeout);
  // A slot free now, without waiting, revoking or abandoning anything; nothing when none is.
  std::optional<Reserved> try_reserve();
  // Writers inside reserve() waiting for a slot now (for tests: a waiter can be seen asleep).
  std::size_t writers_waiting() const;
  std::byte* memory(std::size_t slot) { return slots_[slot].memory.data(); }

  // Gives a reserved slot back unpublished (its snapshot could not be completed).
  void cancel(std::size_t slot);
  // Where a version stands in its host slot. kReady: all of it is there (every host snapshot).
  // kPending: a device snapshot whose host copy is being made. kNotCopied: a device snapshot
  // whose host copy is made only once a two-sided fetch asks for it (begin_host_copy).
  // kFailed: the host copy failed; only one-sided readers of the device slot get the version.
  enum class HostState { kReady, kPending, kNotCopied, kFailed };
  // The reserved slot now holds manifest.version, the newest. With `pin`, the digest thread
  // holds it until set_digests. With `host` kPending, two-sided sends follow the host copy
  // (set_host_prefix, set_host_state); one-sided reads of the device slot never wait for it.
  void publish(std::size_t slot, Manifest manifest, Clock::time_point called_at, bool pin,
               HostState host = HostState::kReady);
  // A kNotCopied `version` becomes kPending with nothing copied yet, and its slot is returned:
  // the caller has the copy made. nullopt if the version is not held or not kNotCopied.
  std::optional<std::size_t> begin_host_copy(std::uint64_t version);
  // The host copy of a device snapshot is done, or failed (then only one-sided readers of the
  // device slot get the version).
  void set_host_state(std::size_t slot, bool ok);
  // The staging thread has copied the first `bytes` of a pending device snapshot to its host
  // slot (the prefix only grows; ignored once the copy is over).
  void set_host_prefix(std::size_t slot, std::uint64_t bytes);
  struct HostCopy {
    HostState state = HostState::kReady;
    std::uint64_t bytes = 0;  // the prefix of the version that is in the host slot
  };
  // Whether `version` (0: the newest) is in its host slot, and how much of it; kReady for a
  // version not held.
  HostState host_state(std::uint64_t version) const;
  HostCopy host_copy(std::uint64_t version) const;
  // Fills in a pinned slot's digests (and signature, when `signer`), and unpins it. Returns the
  // signature.
  std::vector<std::byte> set_digests(std::size_t slot, const std::vector<std::uint64_t>& digests,
                                     const std::vector<std::uint64_t>& block_digests,
                                     const security::ManifestSigner* signer);
  // The block digests of `version` (held or not, among the last kBlockHistory with blocks):
  // what a consumer holding it needs to be sent of a later version. nullopt if not known.
  std::optional<std::vector<std::uint64_t>> block_digests(std::uint64_t version) const;
  // Whether `version`'s digests (tensor and block) exist yet; false if it is not held.
  bool digests_ready(std::uint64_t version) const;
  static constexpr std::size_t kBlockHistory = 64;

  // `transport`: index into the set given to allocate(), whose registration `region` is.
  std::optional<Leased> lease(std::uint64_t version, const std::string& holder, Clock::time_point now,
                              Clock::duration duration, std::size_t transport);
  void release(std::uint64_t lease_id);
  // The lease's transfer made progress: it ends no sooner than now + duration. False once it
  // has ended (acked, lapsed or revoked).
  bool renew(std::uint64_t lease_id, Clock::time_point now, Clock::duration duration);
  // The lease's holder has sends from its slot in flight, or none any more (SlotPool::set_sending:
  // a lease that ended while sending holds its slot until then). Wakes a waiting writer.
  // False if the lease is unknown (ended, and not holding its slot for sends).
  bool set_sending(std::uint64_t lease_id, bool sending);
  std::size_t draining_slots() const;
  // SlotPool::holds.
  bool holds_lease(std::uint64_t lease_id) const;
  // Holds `version`'s slot with no expiry and outside reader_leases(); nullopt if the version
  // is no longer held. Any thread; unpin() from any thread once the bytes are no longer read.
  std::optional<Pinned> pin(std::uint64_t version, const std::string& holder);
  void unpin(std::uint64_t lease_id);
  std::vector<SlotPool::Lease> take_expired(Clock::time_point now);
  std::optional<Clock::time_point> next_expiry() const;

  std::uint64_t newest_version() const;
  // The newest version's step and publish time, for heartbeats (zeros before the first).
  std::pair<std::int64_t, std::int64_t> newest_step_and_time() const;
  // publish() call of `version` until `now`, if the version is still held.
  std::optional<Clock::duration> since_publish(std::uint64_t version, Clock::time_point now) const;
  std::size_t reader_leases() const;  // leases held by consumers (not digest pins)

  // Drops the registrations; before the transport that made them goes.
  void clear();

 private:
  // What a writer taking `slot` is told of it (mutex_ held).
  Reserved reserved_at(std::size_t slot) const;
  struct Slot {
    HostBuffer memory;
    std::vector<std::unique_ptr<transport::MemoryRegion>> regions;  // one per transport
    Manifest manifest;
    Clock::time_point published_at{};
    bool digests_ready = true;
    HostState host = HostState::kReady;
    std::uint64_t host_bytes = 0;  // with kPending: the prefix staged so far
    std::uint64_t digest_lease = 0;
    std::vector<std::byte> signature;
  };

  mutable std::mutex mutex_;
  std::condition_variable slot_freed_;
  SlotPool pool_;           // guarded by mutex_
  std::size_t pins_ = 0;    // leases taken by pin() and not yet unpinned; mutex_
  std::size_t writers_waiting_ = 0;  // mutex_
  std::uint64_t slot_bytes_ = 0;  // mutex_
  // Block digests of recent versions, kept after their slots are reused (a few KiB each), so a
  // consumer several versions behind still gets a delta; mutex_.
  std::map<std::uint64_t, std::vector<std::uint64_t>> block_history_;
  std::vector<Slot> slots_; // bookkeeping guarded by mutex_; memory as the file comment says
};

}  // namespace modelcast::producer
