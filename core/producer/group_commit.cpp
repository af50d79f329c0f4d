#include "core/producer/group_commit.h"

#include <algorithm>

namespace modelcast::producer {

GroupCommit::~GroupCommit() {
  for (auto& [name, group] : groups_) drop_target(group);
}

std::string GroupCommit::refusal(const std::string& group, std::uint32_t size,
                                 const std::vector<std::string>& leaving) const {
  if (size == 0) return "group '" + group + "' has no size (group_size 0)";
  // It waited for ever for members the producer would never admit (group_size 4294967295).
  if (size > max_members_) {
    return "group '" + group + "' has group_size " + std::to_string(size) + ", but this producer admits at most " +
           std::to_string(max_members_) + " consumers (max_consumers, or what its open-file limit leaves room for): the "
           "group could never be whole";
  }
  // Members in `leaving` give up their places once the join is admitted (left): a group they
  // alone make up goes, and one of that name is formed afresh at the size this member says.
  auto staying = [&](const Group& g) {
    return static_cast<std::size_t>(std::count_if(g.members.begin(), g.members.end(), [&](const auto& member) {
      return std::find(leaving.begin(), leaving.end(), member) == leaving.end();
    }));
  };
  auto it = groups_.find(group);
  if (it == groups_.end() || staying(it->second) == 0) {
    std::size_t others = 0;
    for (const auto& [name, g] : groups_) others += name != group && staying(g) > 0 ? 1 : 0;
    if (others < max_groups_) return {};
    return "group '" + group + "' would be group " + std::to_string(others + 1) + ", and this producer's " +
           std::to_string(max_groups_ + held_otherwise_) + " snapshot slots hold " + std::to_string(max_groups_) +
           " (snapshot_slots - " + std::to_string(held_otherwise_) +
           ": each group pins one slot while it switches, publish() needs one free" +
           (held_otherwise_ > 2 ? " and the persist writer pins one while it writes" : "") +
           "; raise snapshot_slots for more)";
  }
  if (it->second.size != size) {
    return "group '" + group + "' has group_size " + std::to_string(it->second.size) +
           " (as its first member said), this consumer says " + std::to_string(size);
  }
  if (staying(it->second) >= size) {
    return "group '" + group + "' already has its " + std::to_string(size) + " members";
  }
  return {};
}

void GroupCommit::joined(const std::string& routing_id, const std::string& name, std::uint32_t size) {
  auto& group = groups_[name];
  group.size = size;
  group.members.insert(routing_id);
  member_[routing_id] = name;
  changed_.insert(name);
  choose_target(name, group);
}

void GroupCommit::left(const std::string& routing_id) {
  auto it = member_.find(routing_id);
  if (it == member_.end()) return;
  const std::string name = it->second;
  member_.erase(it);
  auto& group = groups_.at(name);
  group.members.erase(routing_id);
  group.prepared.erase(routing_id);
  group.asking_again.erase(routing_id);
  changed_.insert(name);
  // The last member gone: nothing to keep for it (a group formed again starts afresh).
  if (group.members.empty()) {
    drop_target(group);
    groups_.erase(name);
    changed_.erase(name);
  }
}

void GroupCommit::acked(const std::string& routing_id, std::uint64_t version, bool ok, bool again) {
  auto it = member_.find(routing_id);
  if (it == member_.end()) return;
  auto& group = groups_.at(it->second);
  if (version == 0 || version != group.target) return;  // a late ack of an earlier target
  if (!ok && again) {
    group.asking_again.insert(routing_id);
    return;
  }
  group.asking_again.erase(routing_id);
  if (!ok) {
    group.failed = group.target;
    drop_target(group);
    changed_.insert(it->second);
    // A newer version published while the group prepared this one is taken now: waiting for the
    // next publish held the group for good where training had stopped.
    choose_target(it->second, group);
    return;
  }
  group.prepared.insert(routing_id);
  if (group.members.size() < group.size || group.prepared.size() < group.members.size()) return;
  group.committed = group.target;
  drop_target(group);
  changed_.insert(it->second);
  choose_target(it->second, group);
}

void GroupCommit::published(std::uint64_t) {
  for (auto& [name, group] : groups_) {
    if (group.target != 0 && !group.asking_again.empty() && store_.newest_version() > group.target) {
      drop_target(group);
      changed_.insert(name);
    }
    choose_target(name, group);
  }
}

void GroupCommit::choose_target(const std::string& name, Group& group) {
  if (group.target != 0 || group.members.size() < group.size) return;
  const std::uint64_t newest = store_.newest_version();
  if (newest <= group.committed || newest <= group.failed) return;
  auto pinned = store_.pin(newest, "(group " + name + ")");
  if (!pinned) return;  // not held (any more): the next publish brings another
  group.target = newest;
  group.pin = pinned->lease_id;
  group.prepared.clear();
  changed_.insert(name);
}

void GroupCommit::drop_target(Group& group) {
  if (group.pin != 0) store_.unpin(group.pin);
  group.pin = 0;
  group.target = 0;
  group.asking_again.clear();
  group.prepared.clear();
}

const GroupCommit::Group* GroupCommit::group_of(const std::string& routing_id) const {
  auto it = member_.find(routing_id);
  return it == member_.end() ? nullptr : &groups_.at(it->second);
}

std::optional<std::pair<std::uint64_t, protocol::GroupState>> GroupCommit::announcement(
    const std::string& routing_id) const {
  const Group* group = group_of(routing_id);
  if (!group) return std::nullopt;
  protocol::GroupState state{group->committed, static_cast<std::uint32_t>(group->members.size()),
                             group->failed > group->committed ? group->failed : 0};
  return std::make_pair(group->target != 0 ? group->target : group->committed, state);
}

std::uint64_t GroupCommit::target_of(const std::string& routing_id) const {
  const Group* group = group_of(routing_id);
  if (!group) return 0;
  // With no target, what members are told to fetch is the committed version (a member that took
  // the place of one that left has yet to fetch it).
  return group->target != 0 ? group->target : group->committed;
}

std::uint64_t GroupCommit::committed_of(const std::string& routing_id) const {
  const Group* group = group_of(routing_id);
  return group ? group->committed : 0;
}

std::string GroupCommit::group_name_of(const std::string& routing_id) const {
  auto found = member_.find(routing_id);
  return found == member_.end() ? std::string() : found->second;
}

std::vector<std::string> GroupCommit::take_changed() {
  std::vector<std::string> out;
  for (const auto& name : changed_) {
    auto it = groups_.find(name);
    if (it == groups_.end()) continue;
    out.insert(out.end(), it->second.members.begin(), it->second.members.end());
  }
  changed_.clear();
  return out;
}

}  // namespace modelcast::producer
