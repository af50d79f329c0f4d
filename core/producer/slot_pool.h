// Which snapshot slot holds which version, and who is still reading it.
//
// Pure bookkeeping with the clock passed in, so reuse and lease expiry are unit-testable.
// Not thread-safe: the Producer guards it with its state mutex.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace modelcast {

class SlotPool {
 public:
  using Clock = std::chrono::steady_clock;

  // A reader's lease lasts while its transfer makes progress (renew_lease) and may be revoked
  // by a writer that waited long enough; a pin (the digest thread, host staging) is neither
  // renewed nor revoked: its holder reads the slot itself and releases it when done.
  // A reader lease whose holder has sends from the slot in flight (set_sending) keeps the slot
  // from writers after it ends, however it ends (ack, departure, lapse, revocation), until
  // set_sending(false): a transport may go on reading the slot until each send reports its end,
  // and a writer in between would tear the version those sends deliver.
  enum class Kind { kReader, kPin };

  struct Lease {
    std::uint64_t id = 0;
    std::size_t slot = 0;
    std::uint64_t version = 0;
    std::string holder;
    Clock::time_point expires;
    Kind kind = Kind::kReader;
    bool sending = false;
  };

  explicit SlotPool(std::size_t slot_count);

  // Reserves a slot to write the next version into: never the one holding the newest version,
  // never one being written or under an unexpired lease. The version it held is forgotten at
  // once (no new lease can reach it). Expired leases are dropped first (see take_expired()).
  std::optional<std::size_t> reserve_for_write(Clock::time_point now);

  // The reserved slot now holds `version`, the newest, and can be leased.
  void mark_published(std::size_t slot, std::uint64_t version);
  // Gives a reserved slot back unpublished (the snapshot failed).
  void cancel_reservation(std::size_t slot);

  // Leases the slot that holds `version` (0 = newest) until now + duration, or nullopt if that
  // version is no longer held.
  std::optional<Lease> acquire_lease(std::uint64_t version, const std::string& holder,
                                     Clock::time_point now, Clock::duration duration, Kind kind = Kind::kReader);

  // The reader made progress: its lease now ends no sooner than now + duration. False if it
  // had already ended, expired or been revoked.
  bool renew_lease(std::uint64_t lease_id, Clock::time_point now, Clock::duration duration);

  // For a writer that has waited as long as it may: ends the reader leases on the slot it would
  // take (the oldest version that is neither the newest nor pinned) and reports them as expired
  // (take_expired). Returns how many it ended; 0 when pins hold every candidate slot or a slot
  // held only by ended leases' sends is coming free (see abandon_drain).
  std::size_t revoke_for_write();

  // Ends a lease early (the reader acked). False if it had already ended or expired.
  bool release_lease(std::uint64_t lease_id);

  // The reader has sends from the slot in flight (true) or none any more (false). A lease that
  // ended while sending holds its slot until this says false. False if the lease is unknown.
  bool set_sending(std::uint64_t lease_id, bool sending);
  // Whether the lease is live or, ended, still holds its slot for its sends (false once
  // abandon_drain forgot it: set_sending would find nothing).
  bool holds(std::uint64_t lease_id) const;
  // Slots held only by ended leases whose sends are still in flight.
  std::size_t draining() const { return draining_.size(); }
  // For a writer that cannot wait for sends for ever. Slots held by ended leases alone (not the
  // newest, leased, pinned or being written) get `grace` from the first call that sees them;
  // then the oldest such slot's holds are forgotten. Returns how many; 0 when none is due.
  std::size_t abandon_drain(Clock::time_point now, Clock::duration grace);
  // When the next abandon_drain could forget something (a writer's wake-up), if ever.
  std::optional<Clock::time_point> next_abandon() const;

  // Removes and returns leases whose time is up.
  std::vector<Lease> take_expired(Clock::time_point now);

  std::optional<Clock::time_point> next_expiry() const;
  // Leases a writer ended (lapsed or revoked) that take_expired has not yet returned.
  bool expired_waiting() const { return !expired_.empty(); }
  std::optional<std::size_t> slot_of(std::uint64_t version) const;
  std::uint64_t newest_version() const { return newest_version_; }
  std::size_t active_leases() const { return leases_.size(); }
  std::size_t slot_count() const { return slot_versions_.size(); }

 private:
  std::vector<std::uint64_t> slot_versions_;  // 0 = empty
  std::vector<bool> writing_;
  std::vector<Lease> leases_;
  std::uint64_t newest_version_ = 0;
  std::uint64_t next_lease_id_ = 1;
  std::vector<Lease> expired_;  // parked by find_writable until take_expired collects them
  std::vector<Lease> draining_;  // ended while sending: their slots wait for set_sending(false)
  // Moves the leases in [first, leases_.end()) out of leases_: to expired_ (all) and, when
  // still sending, to draining_ too.
  void end_leases(std::vector<Lease>::iterator first);
  // Among slots neither being written nor holding the newest version that `eligible` accepts,
  // the empty one or the one with the oldest version: what a writer takes, or takes from, next.
  std::optional<std::size_t> oldest_slot(const std::function<bool(std::size_t)>& eligible) const;
  void start_drain(Lease lease);
};

}  // namespace modelcast
