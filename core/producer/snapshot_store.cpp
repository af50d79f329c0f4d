#include "core/producer/snapshot_store.h"

#include <algorithm>

#include "core/security/manifest_signature.h"

namespace modelcast::producer {
namespace {

// Digest pins need no expiry within any run's lifetime.
constexpr auto kPinDuration = std::chrono::hours(24 * 365);
const std::string kDigestHolder = "(digest thread)";

}  // namespace

SnapshotStore::SnapshotStore(std::size_t slot_count) : pool_(slot_count), slots_(slot_count) {}

// Mapping, touching and registering the slots takes seconds for a large model: done before
// taking the lock, so that the service thread (joins, heartbeats) never waits on it.
void SnapshotStore::allocate(std::uint64_t bytes, const transport::TransportSet& transports,
                             const std::vector<void*>& device_slots, int device) {
  std::vector<Slot> made(slots_.size());
  for (std::size_t i = 0; i < made.size(); ++i) {
    Slot& slot = made[i];
    slot.memory = HostBuffer(std::max<std::uint64_t>(bytes, 1));
    for (std::size_t t = 0; t < transports.size(); ++t) {
      auto capabilities = transports.at(t).capabilities();
      if (!device_slots.empty() && capabilities.one_sided && capabilities.moves(MemoryKind::kCuda, MemoryKind::kCuda)) {
        slot.regions.push_back(
            transports.at(t).register_memory(device_slots.at(i), bytes, transport::MemoryLocation::cuda(device)));
      } else {
        slot.regions.push_back(transports.at(t).register_memory(slot.memory.data(), slot.memory.size(),
                                                                transport::MemoryLocation::host()));
      }
    }
  }
  std::lock_guard lock(mutex_);
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    slots_[i].regions = std::move(made[i].regions);  // a retry after a failure keeps nothing of the last
    slots_[i].memory = std::move(made[i].memory);
  }
  slot_bytes_ = bytes;
}

std::uint64_t SnapshotStore::slot_bytes() const {
  std::lock_guard lock(mutex_);
  return slot_bytes_;
}

SnapshotStore::Reserved SnapshotStore::reserved_at(std::size_t slot) const {
  Reserved reserved;
  reserved.slot = slot;
  const Slot& s = slots_[slot];
  if (s.digests_ready && s.host == HostState::kReady && s.manifest.version != 0) {
    reserved.held_blocks = s.manifest.block_digests;
  }
  if (!block_history_.empty()) reserved.newest_blocks = block_history_.rbegin()->second;
  return reserved;
}

std::optional<SnapshotStore::Reserved> SnapshotStore::try_reserve() {
  std::unique_lock lock(mutex_);
  if (auto slot = pool_.reserve_for_write(Clock::now())) return reserved_at(*slot);
  return std::nullopt;
}

// A reader's lease lasts as long as its transfer progresses, which can be longer than the
// trainer may wait: after lease_timeout the writer revokes the leases on the slot it needs
// (the consumer fetches a newer version instead). Sends from an ended lease hold the slot
// until they end, which the service brings about by closing the consumer's connection: UCX
// ends a closed endpoint's sends within a progress round or two, except a rendezvous send over
// shared memory, which ends only once its receiver takes it (a consumer that refuses a version
// takes and drops its chunks: FetchClient::discard). Those still there after kDrainGrace never
// end (UCX 1.13 and a dead peer on the same host, which reads nothing more):
// the writer then takes the slot all the same and says so, as the trainer must not wait on a
// transport for ever.
SnapshotStore::Reserved SnapshotStore::reserve(Clock::duration lease_timeout) {
  std::unique_lock lock(mutex_);
  const auto revoke_at = Clock::now() + lease_timeout;
  const auto grace = std::min<Clock::duration>(lease_timeout, kDrainGrace);
  Reserved reserved;
  for (;;) {
    auto now = Clock::now();
    if (auto slot = pool_.reserve_for_write(now)) {
      Reserved taken = reserved_at(*slot);
      taken.sends_abandoned = reserved.sends_abandoned;
      return taken;
    }
    if (now >= revoke_at && pool_.revoke_for_write() > 0) continue;
    if (auto abandoned = pool_.abandon_drain(now, grace); abandoned > 0) {
      reserved.sends_abandoned += abandoned;
      continue;
    }
    auto wake = std::max(revoke_at, now + std::chrono::milliseconds(1));
    if (auto expiry = pool_.next_expiry(); expiry && *expiry < wake) wake = *expiry;
    if (auto abandon = pool_.next_abandon(); abandon && *abandon < wake) wake = *abandon;
    ++writers_waiting_;
    slot_freed_.wait_until(lock, wake);
    --writers_waiting_;
  }
}

std::size_t SnapshotStore::writers_waiting() const {
  std::lock_guard lock(mutex_);
  return writers_waiting_;
}

bool SnapshotStore::renew(std::uint64_t lease_id, Clock::time_point now, Clock::duration duration) {
  std::lock_guard lock(mutex_);
  return pool_.renew_lease(lease_id, now, duration);
}

bool SnapshotStore::set_sending(std::uint64_t lease_id, bool sending) {
  std::lock_guard lock(mutex_);
  const bool known = pool_.set_sending(lease_id, sending);
  if (!sending) slot_freed_.notify_all();
  return known;
}

std::size_t SnapshotStore::draining_slots() const {
  std::lock_guard lock(mutex_);
  return pool_.draining();
}

bool SnapshotStore::holds_lease(std::uint64_t lease_id) const {
  std::lock_guard lock(mutex_);
  return pool_.holds(lease_id);
}

void SnapshotStore::cancel(std::size_t slot) {
  std::lock_guard lock(mutex_);
  pool_.cancel_reservation(slot);
  slot_freed_.notify_all();
}

void SnapshotStore::set_host_state(std::size_t slot, bool ok) {
  std::lock_guard lock(mutex_);
  Slot& s = slots_[slot];
  s.host = ok ? HostState::kReady : HostState::kFailed;
  if (ok) s.host_bytes = s.manifest.total_bytes;
}

void SnapshotStore::set_host_prefix(std::size_t slot, std::uint64_t bytes) {
  std::lock_guard lock(mutex_);
  Slot& s = slots_[slot];
  if (s.host == HostState::kPending) s.host_bytes = std::max(s.host_bytes, std::min(bytes, s.manifest.total_bytes));
}

SnapshotStore::HostState SnapshotStore::host_state(std::uint64_t version) const {
  return host_copy(version).state;
}

SnapshotStore::HostCopy SnapshotStore::host_copy(std::uint64_t version) const {
  std::lock_guard lock(mutex_);
  auto slot = pool_.slot_of(version == 0 ? pool_.newest_version() : version);
  if (!slot) return {HostState::kReady, 0};
  const Slot& s = slots_[*slot];
  return {s.host, s.host == HostState::kReady ? s.manifest.total_bytes : s.host == HostState::kPending ? s.host_bytes : 0};
}

std::optional<std::size_t> SnapshotStore::begin_host_copy(std::uint64_t version) {
  std::lock_guard lock(mutex_);
  auto slot = pool_.slot_of(version);
  if (!slot || slots_[*slot].host != HostState::kNotCopied) return std::nullopt;
  slots_[*slot].host = HostState::kPending;
  slots_[*slot].host_bytes = 0;
  return slot;
}

void SnapshotStore::publish(std::size_t slot, Manifest manifest, Clock::time_point called_at, bool pin,
                            HostState host) {
  std::lock_guard lock(mutex_);
  Slot& s = slots_[slot];
  s.host = host;
  s.host_bytes = s.host == HostState::kReady ? manifest.total_bytes : 0;
  std::uint64_t version = manifest.version;
  s.manifest = std::move(manifest);
  s.published_at = called_at;
  s.signature.clear();
  pool_.mark_published(slot, version);
  s.digests_ready = !pin;
  s.digest_lease =
      pin ? pool_.acquire_lease(version, kDigestHolder, Clock::now(), kPinDuration, SlotPool::Kind::kPin)->id : 0;
  // The version before is no longer the newest: with no reader its slot is free now.
  slot_freed_.notify_all();
}

std::vector<std::byte> SnapshotStore::set_digests(std::size_t slot, const std::vector<std::uint64_t>& digests,
                                                  const std::vector<std::uint64_t>& block_digests,
                                                  const security::ManifestSigner* signer) {
  std::lock_guard lock(mutex_);
  Slot& s = slots_[slot];
  for (std::size_t i = 0; i < digests.size() && i < s.manifest.tensors.size(); ++i) {
    s.manifest.tensors[i].digest = digests[i];
  }
  s.manifest.block_digests = block_digests;
  if (!block_digests.empty()) {
    block_history_[s.manifest.version] = block_digests;
    while (block_history_.size() > kBlockHistory) block_history_.erase(block_history_.begin());
  }
  if (signer) s.signature = signer->sign(s.manifest);
  s.digests_ready = true;
  pool_.release_lease(s.digest_lease);
  s.digest_lease = 0;
  slot_freed_.notify_all();
  return s.signature;
}

std::optional<std::vector<std::uint64_t>> SnapshotStore::block_digests(std::uint64_t version) const {
  std::lock_guard lock(mutex_);
  auto it = block_history_.find(version);
  if (it == block_history_.end()) return std::nullopt;
  return it->second;
}

bool SnapshotStore::digests_ready(std::uint64_t version) const {
  std::lock_guard lock(mutex_);
  auto slot = pool_.slot_of(version == 0 ? pool_.newest_version() : version);
  return slot && slots_[*slot].digests_ready;
}

std::optional<SnapshotStore::Leased> SnapshotStore::lease(std::uint64_t version, const std::string& holder,
                                                          Clock::time_point now, Clock::duration duration,
                                                          std::size_t transport) {
  std::lock_guard lock(mutex_);
  auto lease = pool_.acquire_lease(version, holder, now, duration);
  if (!lease) return std::nullopt;
  const Slot& s = slots_[lease->slot];
  Leased out{*lease, s.manifest, {}, !s.digests_ready, s.regions.at(transport).get()};
  if (s.digests_ready) out.signature = s.signature;
  return out;
}

void SnapshotStore::release(std::uint64_t lease_id) {
  std::lock_guard lock(mutex_);
  pool_.release_lease(lease_id);
  slot_freed_.notify_all();
}

std::optional<SnapshotStore::Pinned> SnapshotStore::pin(std::uint64_t version, const std::string& holder) {
  std::lock_guard lock(mutex_);
  auto lease = pool_.acquire_lease(version, holder, Clock::now(), kPinDuration, SlotPool::Kind::kPin);
  if (!lease) return std::nullopt;
  ++pins_;
  const Slot& s = slots_[lease->slot];
  return Pinned{lease->id, s.manifest, s.memory.data()};
}

void SnapshotStore::unpin(std::uint64_t lease_id) {
  std::lock_guard lock(mutex_);
  if (pool_.release_lease(lease_id)) --pins_;
  slot_freed_.notify_all();
}

std::vector<SlotPool::Lease> SnapshotStore::take_expired(Clock::time_point now) {
  std::lock_guard lock(mutex_);
  auto expired = pool_.take_expired(now);
  if (!expired.empty()) slot_freed_.notify_all();
  return expired;
}

std::optional<SnapshotStore::Clock::time_point> SnapshotStore::next_expiry() const {
  std::lock_guard lock(mutex_);
  // Leases the writer already ended are due now: their fetches' sends must be cancelled.
  if (pool_.expired_waiting()) return Clock::now();
  return pool_.next_expiry();
}

std::uint64_t SnapshotStore::newest_version() const {
  std::lock_guard lock(mutex_);
  return pool_.newest_version();
}

std::pair<std::int64_t, std::int64_t> SnapshotStore::newest_step_and_time() const {
  std::lock_guard lock(mutex_);
  auto slot = pool_.slot_of(pool_.newest_version());
  if (!slot) return {0, 0};
  return {slots_[*slot].manifest.step, slots_[*slot].manifest.publish_time_ns};
}

std::optional<SnapshotStore::Clock::duration> SnapshotStore::since_publish(std::uint64_t version,
                                                                           Clock::time_point now) const {
  std::lock_guard lock(mutex_);
  auto slot = pool_.slot_of(version);
  if (!slot) return std::nullopt;
  return now - slots_[*slot].published_at;
}

std::size_t SnapshotStore::reader_leases() const {
  std::lock_guard lock(mutex_);
  auto pins = std::count_if(slots_.begin(), slots_.end(), [](const Slot& s) { return !s.digests_ready; });
  return pool_.active_leases() - static_cast<std::size_t>(pins) - pins_;
}

void SnapshotStore::clear() {
  std::lock_guard lock(mutex_);
  slots_.clear();
}

}  // namespace modelcast::producer
