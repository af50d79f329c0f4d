#include "core/producer/slot_pool.h"

#include <algorithm>

#include "modelcast/error.h"

namespace modelcast {

SlotPool::SlotPool(std::size_t slot_count) : slot_versions_(slot_count, 0), writing_(slot_count, false) {
  if (slot_count < 2) {
    throw Error(ErrorCode::kInvalidArgument,
                "snapshot_slots must be >= 2 (one holds the newest version while another is written), got " +
                    std::to_string(slot_count));
  }
}

std::optional<std::size_t> SlotPool::reserve_for_write(Clock::time_point now) {
  auto expired = std::partition(leases_.begin(), leases_.end(),
                                [&](const Lease& lease) { return lease.expires > now; });
  expired_.insert(expired_.end(), expired, leases_.end());
  leases_.erase(expired, leases_.end());

  std::optional<std::size_t> best;
  for (std::size_t slot = 0; slot < slot_versions_.size(); ++slot) {
    if (writing_[slot]) continue;
    if (newest_version_ != 0 && slot_versions_[slot] == newest_version_) continue;
    bool leased = std::any_of(leases_.begin(), leases_.end(),
                              [&](const Lease& lease) { return lease.slot == slot; });
    if (leased) continue;
    // Prefer an empty slot, then the oldest version: keeps recent versions fetchable longest.
    if (!best || slot_versions_[slot] < slot_versions_[*best]) best = slot;
  }
  if (best) {
    writing_[*best] = true;
    slot_versions_[*best] = 0;
  }
  return best;
}

void SlotPool::mark_published(std::size_t slot, std::uint64_t version) {
  if (!writing_.at(slot)) throw Error(ErrorCode::kState, "slot " + std::to_string(slot) + " was not reserved");
  writing_[slot] = false;
  slot_versions_[slot] = version;
  newest_version_ = version;
}

void SlotPool::cancel_reservation(std::size_t slot) { writing_.at(slot) = false; }

std::optional<SlotPool::Lease> SlotPool::acquire_lease(std::uint64_t version, const std::string& holder,
                                                       Clock::time_point now, Clock::duration duration, Kind kind) {
  if (version == 0) version = newest_version_;
  auto slot = slot_of(version);
  if (!slot) return std::nullopt;
  Lease lease{next_lease_id_++, *slot, version, holder, now + duration, kind};
  leases_.push_back(lease);
  return lease;
}

bool SlotPool::renew_lease(std::uint64_t lease_id, Clock::time_point now, Clock::duration duration) {
  auto it = std::find_if(leases_.begin(), leases_.end(), [&](const Lease& l) { return l.id == lease_id; });
  if (it == leases_.end() || it->kind != Kind::kReader) return false;
  it->expires = std::max(it->expires, now + duration);
  return true;
}

std::size_t SlotPool::revoke_for_write() {
  auto pinned = [&](std::size_t slot) {
    return std::any_of(leases_.begin(), leases_.end(),
                       [&](const Lease& lease) { return lease.slot == slot && lease.kind == Kind::kPin; });
  };
  std::optional<std::size_t> victim;
  for (std::size_t slot = 0; slot < slot_versions_.size(); ++slot) {
    if (writing_[slot] || pinned(slot)) continue;
    if (newest_version_ != 0 && slot_versions_[slot] == newest_version_) continue;
    if (!victim || slot_versions_[slot] < slot_versions_[*victim]) victim = slot;
  }
  if (!victim) return 0;
  auto revoked = std::partition(leases_.begin(), leases_.end(), [&](const Lease& lease) { return lease.slot != *victim; });
  const auto count = static_cast<std::size_t>(std::distance(revoked, leases_.end()));
  expired_.insert(expired_.end(), revoked, leases_.end());
  leases_.erase(revoked, leases_.end());
  return count;
}

bool SlotPool::release_lease(std::uint64_t lease_id) {
  auto it = std::find_if(leases_.begin(), leases_.end(), [&](const Lease& l) { return l.id == lease_id; });
  if (it == leases_.end()) return false;
  leases_.erase(it);
  return true;
}

std::vector<SlotPool::Lease> SlotPool::take_expired(Clock::time_point now) {
  auto expired = std::partition(leases_.begin(), leases_.end(),
                                [&](const Lease& lease) { return lease.expires > now; });
  std::vector<Lease> result = std::move(expired_);
  expired_.clear();
  result.insert(result.end(), expired, leases_.end());
  leases_.erase(expired, leases_.end());
  return result;
}

std::optional<SlotPool::Clock::time_point> SlotPool::next_expiry() const {
  std::optional<Clock::time_point> next;
  for (const auto& lease : leases_) {
    if (!next || lease.expires < *next) next = lease.expires;
  }
  return next;
}

std::optional<std::size_t> SlotPool::slot_of(std::uint64_t version) const {
  if (version == 0) return std::nullopt;
  for (std::size_t slot = 0; slot < slot_versions_.size(); ++slot) {
    if (slot_versions_[slot] == version) return slot;
  }
  return std::nullopt;
}

}  // namespace modelcast
