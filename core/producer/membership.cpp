#include "core/producer/membership.h"

#include "common/shown_text.h"
#include "core/model/manifest.h"
#include "core/model/tensor_selection.h"
#include "modelcast/error.h"

#include <algorithm>

namespace modelcast::producer {

namespace {

// What is wrong with a join's wants (TensorSelection::check), if anything.
std::optional<std::string> bad_wants(const std::vector<TensorWant>& wants) {
  try {
    TensorSelection::check(wants);
  } catch (const Error& e) {
    return std::string("wants: ") + e.what();
  }
  return std::nullopt;
}

}  // namespace

Membership::JoinDecision Membership::decide(const std::string& routing_id, const std::string& key,
                                            const protocol::JoinRequest& join) const {
  JoinDecision decision;
  auto same_consumer = [&](const ConsumerRecord& r) {
    return r.routing_id == routing_id || (join.session != 0 && r.session == join.session && r.key == key);
  };
  for (const auto& [id, record] : consumers_) {
    if (same_consumer(record)) decision.replaces.push_back(id);
  }
  // The names a join brings go into the producer's log lines and errors: one it could not show
  // as it is (a newline would forge a line) is refused, and shown escaped and cut short.
  auto bad_name = [](const std::string& name) { return name.empty() ? std::optional<std::string>() : name_problem(name); };
  if (join.model != model_) {
    decision.refusal = protocol::Refusal::kWrongModel;
    decision.error = "this producer serves model '" + model_ + "', not " + shown_text(join.model);
  } else if (join.consumer_name.empty()) {
    decision.refusal = protocol::Refusal::kBadRequest;
    decision.error = "consumer name is empty";
  } else if (auto why = bad_name(join.consumer_name)) {
    decision.refusal = protocol::Refusal::kBadRequest;
    decision.error = "consumer name " + shown_text(join.consumer_name) + " " + *why;
  } else if (auto group_why = bad_name(join.group)) {
    decision.refusal = protocol::Refusal::kBadRequest;
    decision.error = "group " + shown_text(join.group) + " " + *group_why;
  } else if (auto bad = bad_wants(join.wants)) {
    decision.refusal = protocol::Refusal::kBadRequest;
    decision.error = *bad;
  } else if (decision.replaces.empty() && consumers_.size() >= max_) {
    decision.refusal = protocol::Refusal::kFull;
    decision.error = "the producer serves " + std::to_string(max_) + " consumers already (" + limit_said_ + ")";
  }
  if (decision.refusal != protocol::Refusal::kNone) decision.replaces.clear();
  return decision;
}

void Membership::add(ConsumerRecord record) {
  auto id = record.routing_id;
  consumers_.insert_or_assign(id, std::move(record));
}

std::optional<ConsumerRecord> Membership::remove(const std::string& routing_id) {
  auto it = consumers_.find(routing_id);
  if (it == consumers_.end()) return std::nullopt;
  auto record = std::move(it->second);
  consumers_.erase(it);
  return record;
}

ConsumerRecord* Membership::find(const std::string& routing_id) {
  auto it = consumers_.find(routing_id);
  return it == consumers_.end() ? nullptr : &it->second;
}

std::optional<std::string> Membership::find_peer(std::size_t transport, transport::PeerId peer) const {
  for (const auto& [id, record] : consumers_) {
    if (record.transport == transport && record.peer == peer) return id;
  }
  return std::nullopt;
}

std::vector<std::string> Membership::silent(Clock::time_point now, Clock::duration limit) const {
  std::vector<std::string> out;
  for (const auto& [id, record] : consumers_) {
    if (now - record.last_seen > limit) out.push_back(id);
  }
  return out;
}

std::vector<std::string> Membership::routing_ids() const {
  std::vector<std::string> ids;
  for (const auto& [id, record] : consumers_) ids.push_back(id);
  return ids;
}

std::set<int> Membership::connection_fds() const {
  std::set<int> fds;
  for (const auto& [id, record] : consumers_) fds.insert(record.connection_fd);
  return fds;
}

std::vector<std::string> Membership::spoke_over(int fd) const {
  std::vector<std::string> ids;
  if (fd < 0) return ids;
  for (const auto& [id, record] : consumers_) {
    if (record.connection_fd == fd && record.spoke_since_join) ids.push_back(id);
  }
  return ids;
}

}  // namespace modelcast::producer
