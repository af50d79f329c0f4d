// The group side of the consumer's service (ConsumerOptions::group): what to fetch is the
// group's target, and a verified version becomes visible only when the producer says the whole
// group holds it. See core/producer/group_commit.h for the protocol, service.h for the threads.
#include "core/consumer/service.h"

#include "common/clock.h"

namespace modelcast::consumer {

void ConsumerService::on_group_announce(const protocol::Announce& announce) {
  // The producer's word on what to fetch (it may name an older version than the newest: the one
  // the group is switching to).
  newest_announced_ = announce.version;
  // The newest step published (`version` is the group's target): an assembler of ranks learns
  // from it which steps each rank publishes; heartbeats repeat it, which it ignores.
  // Before the first publish a heartbeat says step 0 with no publication time: no step at all.
  if (hooks_.on_announced && announce.publish_time_ns != 0) hooks_.on_announced(announce.incarnation, announce.step);
  const auto& group = *announce.group;
  group_committed_ = std::max(group_committed_, group.committed);
  std::shared_ptr<detail::InstalledVersion> committed;
  if (prepared_ && prepared_->manifest.version <= group_committed_) {
    log_.debug("group '{}' committed version {}", options_.group, group_committed_);
    committed = std::move(prepared_);
    prepared_.reset();
    if (prepared_host_) {
      landed_host_ = std::move(prepared_host_);
      landed_host_version_ = committed->manifest.version;
    }
  } else if (prepared_ && announce.version != prepared_->manifest.version) {
    // The group's target moved without a commit: the producer gave the version up (said below,
    // from group.given_up). Its buffer is free for the next target; the installed version's host
    // copy stays what a delta is based on and what this member relays.
    prepared_.reset();
    prepared_host_.reset();
  }
  // Every member says it, whether it held the version, still fetched it or had not begun (the
  // give-up can come before a member's fetch): all of them serve the version before on. The
  // member that rejected it said why already. Said at the end, once the stats no longer show the
  // version prepared (a reader told of the give-up found prepared_version still set).
  const bool say_gave_up =
      group.given_up > group_committed_ && group.given_up != group_gave_up_said_ && !rejected_.count(group.given_up);
  if (say_gave_up) group_gave_up_said_ = group.given_up;
  const bool waiting = group.members < options_.group_size;
  // Said before the stats say so: a reader that sees group_waiting finds why in last_error. A
  // group that was never whole is starting (its members join one by one, and every server
  // start would otherwise raise an alarm): named in last_error and logged, not an error; a
  // member gone from a whole group is one (on_error).
  if (waiting && !group_waiting_) {
    // Named by what readers see: the group's committed version starts at 0 with each producer
    // run, while readers still see the run before's (said as such) or nothing yet.
    auto serving = store_.current();
    const std::string stays =
        !serving ? std::string("it serves nothing yet")
                 : "it serves version " + std::to_string(serving->manifest.version) +
                       (serving->manifest.incarnation != link_.incarnation() ? " (of the producer's run before)" : "");
    Error why(ErrorCode::kState, "group '" + options_.group + "' has " + std::to_string(group.members) + " of its " +
                                     std::to_string(options_.group_size) + " members: " + stays +
                                     " until the others join");
    if (group_was_whole_) {
      report(why);
    } else {
      log_.info("{}", why.what());
      count([&](ConsumerStats& s) { s.last_error = why.what(); });
    }
    group_waiting_said_ = why.what();
  } else if (!waiting && group_waiting_) {
    log_.info("group '{}' has all its {} members{}", options_.group, options_.group_size,
              group_was_whole_ ? " again" : "");
  }
  group_waiting_ = waiting;
  group_was_whole_ = group_was_whole_ || !waiting;
  count([&](ConsumerStats& s) {
    s.group_version = group_committed_;
    s.prepared_version = prepared_ ? prepared_->manifest.version : 0;
    // In the same update as prepared_version: between two, a reader saw the committed version
    // neither prepared nor current (a group member's check of the others called it a split).
    if (committed) s.current_version = committed->manifest.version;
    s.group_waiting = waiting;
    // A group whole again no longer waits: its wait is not left as the member's last error
    // (any other error said since stays).
    if (!waiting && !group_waiting_said_.empty() && s.last_error == group_waiting_said_) s.last_error.clear();
    if (announce.publish_time_ns != 0) {
      s.last_notify_latency = since_realtime(announce.publish_time_ns);
    }
  });
  if (!waiting) group_waiting_said_.clear();
  // After the group's stats: a reader woken by the switch finds them already saying so.
  if (committed) {
    make_visible(committed);
    if (options_.on_update) options_.on_update(ModelView(committed));
  }
  if (say_gave_up) report_group_gave_up(group.given_up);
}

void ConsumerService::report_group_gave_up(std::uint64_t version) {
  auto serving = store_.current();
  report(Error(ErrorCode::kState,
               "group '" + options_.group + "' did not switch to version " + std::to_string(version) +
                   ": another member did not take it; " +
                   (serving ? "the group serves version " + std::to_string(serving->manifest.version) +
                                  " on and takes the next version published"
                            : std::string("the group serves nothing yet and takes the next version published"))));
}

}  // namespace modelcast::consumer
