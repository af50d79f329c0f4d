#include "core/producer/slot_pool.h"

#include <algorithm>
#include <functional>
#include <utility>

#include "modelcast/error.h"

namespace modelcast {

SlotPool::SlotPool(std::size_t slot_count) : slot_versions_(slot_count, 0), writing_(slot_count, false) {
  if (slot_count < 2) {
    throw Error(ErrorCode::kInvalidArgument,
                "snapshot_slots must be >= 2 (one holds the newest version while another is written), got " +
                    std::to_string(slot_count));
  }
}

void SlotPool::end_leases(std::vector<Lease>::iterator first) {
  for (auto it = first; it != leases_.end(); ++it) {
    if (it->sending) start_drain(*it);
  }
  expired_.insert(expired_.end(), first, leases_.end());
  leases_.erase(first, leases_.end());
}

void SlotPool::start_drain(Lease lease) {
  lease.expires = Clock::time_point::max();  // abandon_drain's clock, started when a writer needs the slot
  draining_.push_back(std::move(lease));
}

namespace {

bool any_on(const std::vector<SlotPool::Lease>& leases, std::size_t slot) {
  return std::any_of(leases.begin(), leases.end(), [&](const SlotPool::Lease& lease) { return lease.slot == slot; });
}

}  // namespace

std::optional<std::size_t> SlotPool::oldest_slot(const std::function<bool(std::size_t)>& eligible) const {
  std::optional<std::size_t> oldest;
  for (std::size_t slot = 0; slot < slot_versions_.size(); ++slot) {
    if (writing_[slot] || (newest_version_ != 0 && slot_versions_[slot] == newest_version_)) continue;
    if (!eligible(slot)) continue;
    // An empty slot first, then the oldest version: keeps recent versions fetchable longest.
    if (!oldest || slot_versions_[slot] < slot_versions_[*oldest]) oldest = slot;
  }
  return oldest;
}

std::optional<std::size_t> SlotPool::reserve_for_write(Clock::time_point now) {
  end_leases(std::partition(leases_.begin(), leases_.end(), [&](const Lease& lease) { return lease.expires > now; }));

  auto best = oldest_slot([&](std::size_t slot) { return !any_on(leases_, slot) && !any_on(draining_, slot); });
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
  // A draining slot frees itself when its sends end (their holder is being cut off); revoking
  // there would end nothing sooner. And while a slot held by draining sends alone is coming free
  // (an earlier revocation's), the writer waits for it (abandon_drain bounds that wait): revoking
  // again would cut off the readers of one slot after another where one slot is needed.
  if (oldest_slot([&](std::size_t slot) { return !any_on(leases_, slot) && any_on(draining_, slot); })) return 0;
  auto victim = oldest_slot([&](std::size_t slot) { return !pinned(slot) && !any_on(draining_, slot); });
  if (!victim) return 0;
  auto revoked = std::partition(leases_.begin(), leases_.end(), [&](const Lease& lease) { return lease.slot != *victim; });
  const auto count = static_cast<std::size_t>(std::distance(revoked, leases_.end()));
  end_leases(revoked);
  return count;
}

std::size_t SlotPool::abandon_drain(Clock::time_point now, Clock::duration grace) {
  auto candidate = [&](std::size_t slot) {
    const bool newest = newest_version_ != 0 && slot_versions_[slot] == newest_version_;
    return !writing_[slot] && !newest && !any_on(leases_, slot);
  };
  // A draining lease's `expires` is its abandon time, unset (max) until a writer first needs it.
  for (auto& drain : draining_) {
    if (drain.expires == Clock::time_point::max() && candidate(drain.slot)) drain.expires = now + grace;
  }
  auto victim = oldest_slot([&](std::size_t slot) {
    return !any_on(leases_, slot) && any_on(draining_, slot) &&
           std::all_of(draining_.begin(), draining_.end(),
                       [&](const Lease& drain) { return drain.slot != slot || drain.expires <= now; });
  });
  if (!victim) return 0;
  return static_cast<std::size_t>(std::erase_if(draining_, [&](const Lease& lease) { return lease.slot == *victim; }));
}

std::optional<SlotPool::Clock::time_point> SlotPool::next_abandon() const {
  std::optional<Clock::time_point> next;
  for (const auto& drain : draining_) {
    if (drain.expires != Clock::time_point::max() && (!next || drain.expires < *next)) next = drain.expires;
  }
  return next;
}

bool SlotPool::release_lease(std::uint64_t lease_id) {
  auto it = std::find_if(leases_.begin(), leases_.end(), [&](const Lease& l) { return l.id == lease_id; });
  if (it == leases_.end()) return false;
  if (it->sending) start_drain(*it);
  leases_.erase(it);
  return true;
}

bool SlotPool::set_sending(std::uint64_t lease_id, bool sending) {
  auto by_id = [&](const Lease& l) { return l.id == lease_id; };
  if (auto it = std::find_if(leases_.begin(), leases_.end(), by_id); it != leases_.end()) {
    it->sending = sending;
    return true;
  }
  auto it = std::find_if(draining_.begin(), draining_.end(), by_id);
  if (it == draining_.end()) return false;
  if (!sending) draining_.erase(it);
  return true;
}

bool SlotPool::holds(std::uint64_t lease_id) const {
  auto by_id = [&](const Lease& l) { return l.id == lease_id; };
  return std::any_of(leases_.begin(), leases_.end(), by_id) || std::any_of(draining_.begin(), draining_.end(), by_id);
}

std::vector<SlotPool::Lease> SlotPool::take_expired(Clock::time_point now) {
  end_leases(std::partition(leases_.begin(), leases_.end(), [&](const Lease& lease) { return lease.expires > now; }));
  return std::exchange(expired_, {});
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
