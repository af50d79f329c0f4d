// Groups of consumers that switch versions together: the tensor-parallel ranks of one server,
// which compute garbage if rank 0 serves version 7 while rank 1 serves version 6.
//
// A two-phase commit with the producer as coordinator. Once every member of a group has joined,
// the group gets a target: the newest version, pinned in its slot until the group is done with it
// (one slot per group at most, so publish() keeps the others). Members are told the target in
// their announcements, fetch and verify it, keep serving the version before, and ack. When every
// member has acked the target, the group commits it: the next announcement to each member says
// so, and each switches. Then the next target is the newest version, if newer: a group never
// chases versions published while it prepares one.
//
// Faults: a member that leaves (dropped, silent, its connection closed) makes the group wait, on
// the version it last committed, until a member takes its place; the target stays pinned, so the
// members that prepared it need not fetch it again. A member that rejects the target (a digest
// that does not match, say) ends that target: the group stays where it is and takes the newest
// version if newer than the rejected one, else the next version published; one whose transfer of it failed (no verdict on the version: a relay that
// died under it) fetches it again, the target kept until a newer version is published. A group
// whose target a member gave up for such a fault held its version until the trainer published
// again, for good where it had stopped. Announcements carry the number of members, so members can say the group
// waits, and the target given up until a newer one commits, so every member can say that too
// (one whose fetch had not begun included).
//
// Service thread only: it reads and pins the store's slots, and returns who to tell; it sends
// nothing itself.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/producer/snapshot_store.h"
#include "core/wire/protocol.h"

namespace modelcast::producer {

class GroupCommit {
 public:
  // How many groups may exist at once: each pins at most one slot, and publish() needs a slot
  // that is neither the newest nor pinned, nor (with `persist_pins`) the one the persist writer
  // reads for as long as a disk write takes. With snapshot_slots slots that is snapshot_slots - 2
  // groups, or - 3 with persistence; one more, and a group waiting for a member stalled the trainer.
  // max_members: the consumers the producer admits at all (a larger group could never be whole).
  GroupCommit(SnapshotStore& store, std::size_t snapshot_slots, bool persist_pins, std::size_t max_members)
      : store_(store),
        held_otherwise_(persist_pins ? 3 : 2),
        max_groups_(snapshot_slots > held_otherwise_ ? snapshot_slots - held_otherwise_ : 0),
        max_members_(max_members) {}
  ~GroupCommit();
  GroupCommit(const GroupCommit&) = delete;
  GroupCommit& operator=(const GroupCommit&) = delete;

  // Why `group` of `size` members cannot take another member (empty: it can): a size other than
  // the group's or beyond max_members, a group already full (but for the members in `leaving`,
  // whose places the new one takes), or a new group beyond max_groups.
  std::string refusal(const std::string& group, std::uint32_t size, const std::vector<std::string>& leaving = {}) const;
  // Membership: `joined` after refusal() said yes; `left` for any consumer (a non-member is
  // ignored).
  void joined(const std::string& routing_id, const std::string& group, std::uint32_t size);
  void left(const std::string& routing_id);
  // A member's ack of a fetch of `version`: it holds it verified (ok), rejected it, or (`again`)
  // did not receive it and asks for it again (its transfer failed, a relay died under it, no
  // buffer was free): the target stays, so that the group still gets it when nothing newer comes.
  void acked(const std::string& routing_id, std::uint64_t version, bool ok, bool again = false);
  // A new version is published (in the store, with a slot to pin). A target a member asks for
  // again gives way to it: the group then prepares the newest.
  void published(std::uint64_t version);

  // What an announcement tells a member: the version to fetch (the target, or the committed
  // version when there is none) and the group's state. nullopt for a consumer in no group.
  std::optional<std::pair<std::uint64_t, protocol::GroupState>> announcement(const std::string& routing_id) const;
  // The version a member may fetch besides the newest: its group's target or, with none, its
  // committed version (0: neither, or no group).
  std::uint64_t target_of(const std::string& routing_id) const;
  // Members of the groups whose target, commit or membership changed since the last call: they
  // are to be told now rather than at the next heartbeat.
  std::vector<std::string> take_changed();
  // For logs: the committed version of the member's group (0 for none), and its name ("" for none).
  std::uint64_t committed_of(const std::string& routing_id) const;
  std::string group_name_of(const std::string& routing_id) const;

 private:
  struct Group {
    std::uint32_t size = 0;
    std::set<std::string> members;   // routing ids
    std::set<std::string> prepared;  // members that acked the target
    std::uint64_t committed = 0;
    std::uint64_t target = 0;
    std::uint64_t pin = 0;           // the target's pin (lease id), 0: none
    std::uint64_t failed = 0;        // a target a member rejected: not taken again
    std::set<std::string> asking_again;  // members whose fetch of the target failed (acked `again`)
  };
  void choose_target(const std::string& name, Group& group);
  void drop_target(Group& group);
  const Group* group_of(const std::string& routing_id) const;

  SnapshotStore& store_;
  const std::size_t held_otherwise_;  // slots groups cannot have: the newest, publish()'s, the persist writer's
  const std::size_t max_groups_;
  const std::size_t max_members_;
  std::map<std::string, Group> groups_;        // by name
  std::map<std::string, std::string> member_;  // routing id -> group name
  std::set<std::string> changed_;              // group names
};

}  // namespace modelcast::producer
