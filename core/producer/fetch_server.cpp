#include "core/producer/fetch_server.h"

#include "core/model/tensor_selection.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <utility>

#include "modelcast/error.h"

namespace modelcast::producer {

namespace {

// The answer that ends a fetch already answered (withdrawn, its relay gone, its lease ended):
// the consumer stops receiving it and asks again.
protocol::FetchReply stopped(std::uint64_t fetch_id, std::string why) {
  protocol::FetchReply refusal;
  refusal.fetch_id = fetch_id;
  refusal.refusal = protocol::Refusal::kNotHeld;
  refusal.error = std::move(why);
  return refusal;
}

}  // namespace

FetchServer::FetchServer(SnapshotStore& store, const transport::TransportSet& transports, std::uint64_t incarnation,
                         Clock::duration lease_timeout, SendCompletion on_send, std::size_t relay_fanout)
    : store_(store),
      transports_(transports),
      incarnation_(incarnation),
      lease_timeout_(lease_timeout),
      on_send_(std::move(on_send)),
      planner_(relay_fanout) {}

void FetchServer::joined(const ConsumerRecord& consumer) {
  // A relay sends what it holds over a two-sided transport; over a one-sided one (CUDA IPC) it
  // exports its buffer, which only device memory can be.
  const bool can_serve = transports_.at(consumer.transport).capabilities().two_sided ||
                         consumer.memory.kind == MemoryKind::kCuda;
  planner_.joined(consumer.routing_id, consumer.name, consumer.host_id, consumer.process, consumer.serves_peers && can_serve,
                  consumer.transport);
}

std::vector<std::pair<std::string, protocol::FetchRequest>> FetchServer::published(std::uint64_t version) {
  upcoming_.erase(version);
  std::vector<std::pair<std::string, protocol::FetchRequest>> out(parked_.begin(), parked_.end());
  parked_.clear();
  return out;
}

std::vector<std::pair<std::string, protocol::FetchRequest>> FetchServer::digests_ready(std::uint64_t version) {
  std::vector<std::pair<std::string, protocol::FetchRequest>> out;
  for (auto it = parked_for_digests_.begin(); it != parked_for_digests_.end();) {
    if (it->second.version == version || it->second.version == 0) {
      out.emplace_back(it->first, it->second);
      it = parked_for_digests_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

std::optional<protocol::FetchReply> FetchServer::start(const std::string& routing_id, const ConsumerRecord* consumer,
                                                       const protocol::FetchRequest& request, Clock::time_point now,
                                                       std::uint64_t group_target) {
  // Announced but still being copied: answer once it is published (the copy cannot fail).
  // One parked request per connection, so a flood parks nothing more.
  if (!upcoming_.empty() && request.incarnation == incarnation_ &&
      (upcoming_.count(request.version) || request.version == 0)) {
    parked_[routing_id] = request;
    return std::nullopt;
  }
  protocol::FetchReply reply;
  reply.fetch_id = request.fetch_id;
  auto refuse = [&](protocol::Refusal refusal, std::string why) {
    reply.refusal = refusal;
    reply.error = std::move(why);
    return reply;
  };
  if (!consumer) return refuse(protocol::Refusal::kNotJoined, "not joined");
  if (request.incarnation != incarnation_) {
    return refuse(protocol::Refusal::kStaleIncarnation, "stale producer incarnation; join again");
  }
  // One lease per consumer: a client re-fetching in a loop pins at most one slot, and only
  // until its lease lapses, so publish() never waits on it for longer than that.
  if (auto it = fetches_.find(routing_id); it != fetches_.end() && !it->second.empty()) {
    // A fetch read out of a relay's buffer holds no lease, and the consumer asks again only
    // once it has given that fetch up: unanswered because the relay never offered its buffer
    // (the relay is taken to have stalled, and the producer serves), or answered too late for
    // the consumer, which had stopped waiting (producer_timeout) and dropped the answer.
    auto earlier = it->second.begin();
    const Fetch& given_up = earlier->second;
    if (it->second.size() != 1 || (!given_up.awaiting_offer && !given_up.exported)) {
      return refuse(protocol::Refusal::kBusy, "a fetch of this consumer is still in flight");
    }
    if (given_up.awaiting_offer) {
      planner_.failed(given_up.relay, routing_id, given_up.version, now, true);
      unanswered_relays_.push_back({planner_.name(given_up.relay), routing_id, given_up.version});
    }
    // Told either way: a relay that was only slow pins its buffer when the order reaches it,
    // and the cancel, behind the order on the same connection, unpins it.
    end_relayed(given_up, true);
    it->second.erase(earlier);
  }
  // The sends of an ended fetch are told apart by its id until they end: a second fetch of the
  // same id had its sends counted with the first's, and its slot let go while they still read it.
  if (draining_.contains({routing_id, request.fetch_id})) {
    return refuse(protocol::Refusal::kBadRequest, "fetch id " + std::to_string(request.fetch_id) +
                                                      " is that of an ended fetch whose sends are still in flight");
  }
  // Only the newest version is served (older slots are what publish() writes next), and the
  // version the consumer's group is switching to, which the group holds pinned until then.
  auto newest = store_.newest_version();
  if (request.version != 0 && request.version != newest && request.version != group_target) {
    return refuse(protocol::Refusal::kNotHeld, "version " + std::to_string(request.version) +
                                                   " is superseded; the newest is " + std::to_string(newest));
  }
  const std::uint64_t serving = request.version != 0 ? request.version : newest;
  // A device version is readable from its device slot at once, but sent from its host copy:
  // a two-sided fetch is answered at once and its chunks go out as the copy reaches them, so
  // the device-to-host copy overlaps the transfer.
  const bool two_sided = transports_.at(consumer->transport).capabilities().two_sided;
  // A delta needs the base's block digests (kept for recent versions) and the new version's,
  // which the digest thread may still be computing: hashing is far quicker than sending what
  // did not change, so the request waits for them. One-sided routes read whole versions.
  std::optional<std::vector<std::uint64_t>> base_blocks;
  if (two_sided && request.base_version != 0 && request.base_version < serving) {
    base_blocks = store_.block_digests(request.base_version);
  }
  // A relayed fetch is checked block by block where it lands, so it too needs the block digests.
  std::optional<std::string> relay = planner_.choose(routing_id, serving, now, !two_sided);
  if ((base_blocks || relay) && !store_.digests_ready(serving)) {
    parked_for_digests_[routing_id] = request;
    return std::nullopt;
  }
  std::uint64_t host_bytes = std::numeric_limits<std::uint64_t>::max();
  if (two_sided) {
    auto copy = store_.host_copy(request.version);
    if (copy.state == SnapshotStore::HostState::kFailed) {
      return refuse(protocol::Refusal::kNotHeld, "version " + std::to_string(serving) +
                                                     " could not be copied to host memory; wait for the next one");
    }
    // kNotCopied: no consumer needed the host copy when the version was published (they all
    // read the device slot); this fetch starts it below, and its chunks follow it as above.
    if (copy.state == SnapshotStore::HostState::kPending) host_bytes = copy.bytes;
    if (copy.state == SnapshotStore::HostState::kNotCopied) host_bytes = 0;
  }
  auto leased = store_.lease(request.version, routing_id, now, lease_timeout_, consumer->transport);
  if (!leased) {
    return request.version == 0 ? refuse(protocol::Refusal::kNothingPublished, "nothing published yet")
                                : refuse(protocol::Refusal::kNotHeld, "version " + std::to_string(request.version) +
                                                                          " is no longer held");
  }
  std::optional<Clock::time_point> published_at;
  if (auto since = store_.since_publish(leased->lease.version, now)) published_at = now - *since;
  reply.ok = true;
  reply.manifest = std::move(leased->manifest);
  reply.signature = std::move(leased->signature);
  reply.digests_pending = leased->digests_pending;
  const Manifest& manifest = reply.manifest;
  auto plan = manifest.block_bytes != 0 ? transfer::ChunkPlan{manifest.total_bytes, manifest.block_bytes}
                                        : transfer::producer_plan(manifest.total_bytes, chunk_option_);
  reply.chunk_bytes = plan.chunk_bytes;
  std::vector<std::uint32_t> blocks;
  if (base_blocks && !manifest.block_digests.empty() && manifest.block_digests.size() == base_blocks->size()) {
    reply.base_version = request.base_version;
    blocks = transfer::changed_blocks(*base_blocks, manifest.block_digests);
  } else {
    blocks.resize(plan.count());
    for (std::size_t i = 0; i < blocks.size(); ++i) blocks[i] = static_cast<std::uint32_t>(i);
  }
  // A consumer that keeps parts of the model gets the blocks that hold them; one whose wants do
  // not fit this version gets none, and refuses the version on this reply.
  const auto& wants = request.has_wants ? request.wants : consumer->wants;
  bool in_part = false;  // the consumer will hold only some blocks: never a relay for this version
  if (!wants.empty() && manifest.block_bytes != 0) {
    std::vector<bool> wanted;
    try {
      if (request.has_wants) TensorSelection::check(wants);  // the join's were checked at the join
      wanted = TensorSelection::resolve(wants, manifest).blocks(manifest);
    } catch (const Error&) {
      wanted.assign(plan.count(), false);
    }
    if (wanted.size() == plan.count()) {
      std::erase_if(blocks, [&](std::uint32_t i) { return !wanted[i]; });
      in_part = std::find(wanted.begin(), wanted.end(), false) != wanted.end();
    }
  }
  std::uint64_t bytes = 0;
  for (auto i : blocks) bytes += plan.length(i);
  if (relay && two_sided && manifest.block_digests.size() == plan.count() && manifest.block_bytes == plan.chunk_bytes) {
    // The relay sends; the producer holds no lease (it serves again only if the relay fails,
    // and then only a version it still holds).
    store_.release(leased->lease.id);
    Fetch fetch;
    fetch.version = leased->lease.version;
    fetch.published_at = published_at;
    fetch.in_part = in_part;
    fetch.bytes = bytes;
    fetch.transport = consumer->transport;
    fetch.relay = *relay;
    fetch.order_id = next_order_++;
    protocol::RelayOrder order;
    order.incarnation = incarnation_;
    order.order_id = fetch.order_id;
    order.version = fetch.version;
    order.fetch_id = request.fetch_id;
    order.block_bytes = plan.chunk_bytes;
    order.blocks = std::move(blocks);
    order.peer_address = consumer->peer_address;
    // As between the producer and a consumer: the transport says whether the relay may watch
    // the receiver (equal host ids are one machine).
    const auto distance =
        planner_.host_id(*relay) == consumer->host_id ? transport::Reach::kHost : transport::Reach::kNetwork;
    order.detect_failure = transports_.at(consumer->transport).detects_failure_at(distance);
    outgoing_.emplace_back(*relay, std::move(order));
    planner_.assigned(*relay);
    if (!fetch.in_part) planner_.receiving(routing_id, fetch.version, now);
    reply.relay = planner_.name(*relay);
    fetches_[routing_id].emplace(request.fetch_id, std::move(fetch));
    return reply;
  }

  if (relay && !two_sided && manifest.integrity && !reply.digests_pending) {
    // A one-sided route reads the relay's buffer: the relay pins and exports it first, and the
    // consumer is answered once it has (relay_offered). It checks the whole version against
    // the tensor digests this reply carries, as it does the producer's slot.
    store_.release(leased->lease.id);
    Fetch fetch;
    fetch.version = leased->lease.version;
    fetch.published_at = published_at;
    fetch.in_part = in_part;
    fetch.bytes = plan.total_bytes;
    fetch.transport = consumer->transport;
    fetch.relay = *relay;
    fetch.order_id = next_order_++;
    fetch.awaiting_offer = true;
    reply.relay = planner_.name(*relay);
    fetch.reply = std::move(reply);
    protocol::RelayOrder order;
    order.incarnation = incarnation_;
    order.order_id = fetch.order_id;
    order.version = fetch.version;
    order.fetch_id = request.fetch_id;
    order.export_region = true;
    outgoing_.emplace_back(*relay, std::move(order));
    planner_.assigned(*relay);
    fetches_[routing_id].emplace(request.fetch_id, std::move(fetch));
    return std::nullopt;
  }
  Fetch fetch;
  fetch.lease_id = leased->lease.id;
  fetch.version = leased->lease.version;
  fetch.published_at = published_at;
  fetch.in_part = in_part;
  fetch.awaiting_digests = leased->digests_pending;
  fetch.bytes = two_sided ? bytes : plan.total_bytes;
  fetch.transport = consumer->transport;
  fetch.plan = plan;
  fetch.blocks = std::move(blocks);
  fetch.peer = consumer->peer;
  fetch.region = leased->region;
  auto& transport = transports_.at(consumer->transport);
  if (!two_sided) {
    // One-sided: the consumer reads the slot itself and acks; the lease holds the slot till then.
    reply.region = transport.export_region(*leased->region);
    fetches_[routing_id].emplace(request.fetch_id, std::move(fetch));
    return reply;
  }
  if (host_bytes == 0) {
    if (auto slot = store_.begin_host_copy(fetch.version)) host_copies_.emplace_back(*slot, fetch.version);
  }
  auto& fetches = fetches_[routing_id];
  auto& placed = fetches.emplace(request.fetch_id, std::move(fetch)).first->second;
  try {
    post_sends(routing_id, request.fetch_id, placed, host_bytes);
  } catch (const std::exception& e) {
    // Nothing of this fetch may outlive the refusal: no send, no lease, no record.
    auto withdrawn = withdraw(routing_id, request.fetch_id, placed, std::string("a chunk could not be sent: ") + e.what());
    fetches.erase(request.fetch_id);
    return withdrawn.refusal;
  }
  if (!placed.in_part) planner_.receiving(routing_id, placed.version, now);
  return reply;
}

void FetchServer::post_sends(const std::string& routing_id, std::uint64_t fetch_id, Fetch& fetch,
                             std::uint64_t host_bytes) {
  auto& transport = transports_.at(fetch.transport);
  const auto& plan = fetch.plan;
  while (fetch.next < fetch.blocks.size()) {
    const std::size_t i = fetch.blocks[fetch.next];
    if (plan.offset(i) + plan.length(i) > host_bytes) break;
    // Told before the first send can read the slot: a writer that ends the lease from now on
    // leaves the slot alone until the sends have ended. A lease already ended (lapsed or
    // revoked before the host copy got here) may no longer be sent from.
    if (!fetch.sending) {
      if (!store_.set_sending(fetch.lease_id, true)) {
        throw Error(ErrorCode::kState, "its lease ended before the chunks could be sent");
      }
      fetch.sending = true;
    }
    fetch.transfers.push_back(transport.post_send(
        fetch.peer, *fetch.region, plan.offset(i), plan.length(i), protocol::chunk_tag(fetch_id, i),
        [this, routing_id, fetch_id](const transport::TransferResult& r) { on_send_(routing_id, fetch_id, r); }));
    ++fetch.next;
  }
}

template <typename Visit>
void FetchServer::for_each_unsent(std::uint64_t version, Visit&& visit) {
  for (auto& [routing_id, fetches] : fetches_) {
    for (auto it = fetches.begin(); it != fetches.end();) {
      Fetch& fetch = it->second;
      const bool unsent = fetch.version == version && fetch.next < fetch.blocks.size() &&
                          transports_.at(fetch.transport).capabilities().two_sided;
      it = unsent && !visit(routing_id, it->first, fetch) ? fetches.erase(it) : std::next(it);
    }
  }
}

std::vector<FetchServer::Withdrawn> FetchServer::host_progress(std::uint64_t version) {
  std::vector<Withdrawn> out;
  const auto copy = store_.host_copy(version);
  if (copy.state == SnapshotStore::HostState::kFailed) return out;  // host_failed() ends them
  for_each_unsent(version, [&](const std::string& routing_id, std::uint64_t fetch_id, Fetch& fetch) {
    try {
      post_sends(routing_id, fetch_id, fetch, copy.bytes);
      return true;
    } catch (const std::exception& e) {
      out.push_back(withdraw(routing_id, fetch_id, fetch, std::string("a chunk could not be sent: ") + e.what()));
      return false;
    }
  });
  return out;
}

std::vector<std::pair<std::size_t, std::uint64_t>> FetchServer::take_host_copies() {
  return std::exchange(host_copies_, {});
}

std::vector<FetchServer::Withdrawn> FetchServer::host_failed(std::uint64_t version, const std::string& error) {
  std::vector<Withdrawn> out;
  for_each_unsent(version, [&](const std::string& routing_id, std::uint64_t fetch_id, Fetch& fetch) {
    out.push_back(withdraw(routing_id, fetch_id, fetch,
                           "version " + std::to_string(version) + " could not be copied to host memory: " + error));
    return false;
  });
  return out;
}

FetchServer::Withdrawn FetchServer::withdraw(const std::string& routing_id, std::uint64_t fetch_id, Fetch& fetch,
                                             const std::string& why) {
  cancel(fetch);
  // The refusal tells the consumer to stop receiving: sends already posted would never end.
  retire_and_cut_off(routing_id, fetch_id, fetch, "withdrawn: " + why, std::nullopt);
  store_.release(fetch.lease_id);
  Withdrawn withdrawn;
  withdrawn.routing_id = routing_id;
  withdrawn.refusal = stopped(fetch_id, why);
  withdrawn.counts_as_failed = !fetch.failed;
  return withdrawn;
}

std::size_t FetchServer::retire(const std::string& routing_id, std::uint64_t fetch_id, const Fetch& fetch) {
  const std::size_t sends = in_flight(fetch);
  if (fetch.sending && sends > 0) {
    // Sends to a consumer killed mid-transfer may never report their end (UCX closes an endpoint
    // on this host with a flush, which then never ends), and a writer forgets their hold on the
    // slot after its grace (SnapshotStore::reserve): an entry whose lease the store forgot waits
    // for nothing. Dropped here, so that entries stay as many as the slots held for sends.
    // Not one whose consumer is still to be cut off for it (it would stay joined, its sends for good).
    std::erase_if(draining_, [&](const auto& entry) {
      return !entry.second.cut_at && !store_.holds_lease(entry.second.lease_id);
    });
    draining_[{routing_id, fetch_id}] = Draining{fetch.lease_id, sends, std::nullopt};
  }
  return sends;
}

void FetchServer::retire_and_cut_off(const std::string& routing_id, std::uint64_t fetch_id, const Fetch& fetch,
                                     const std::string& why, std::optional<protocol::FetchReply> refusal) {
  if (auto sends = retire(routing_id, fetch_id, fetch); sends > 0) {
    cut_off_.push_back(CutOff{routing_id, sends, why, std::move(refusal)});
  }
}

bool FetchServer::on_send_done(const std::string& routing_id, std::uint64_t fetch_id, bool ok, Clock::time_point now) {
  Fetch* fetch = nullptr;
  if (auto consumer = fetches_.find(routing_id); consumer != fetches_.end()) {
    if (auto it = consumer->second.find(fetch_id); it != consumer->second.end()) fetch = &it->second;
  }
  if (!fetch) {
    // A send of a fetch that already ended: its slot is let go after the last of them.
    auto drain = draining_.find({routing_id, fetch_id});
    if (drain == draining_.end()) return false;
    if (--drain->second.sends == 0) {
      store_.set_sending(drain->second.lease_id, false);
      draining_.erase(drain);
    }
    return false;
  }
  Fetch& f = *fetch;
  f.ended++;
  if (f.sending && in_flight(f) == 0) {
    store_.set_sending(f.lease_id, false);
    f.sending = false;
  }
  if (ok) {
    f.sent++;
    // Once every send has completed nothing here shows progress any more, yet the last bytes may
    // still be on their way: a TCP send completes when the socket takes it, which on a slow
    // link can be seconds before they arrive. The lease then waits for the ack, or ends with
    // the consumer (silent 5 s), or with a writer that needs the slot (publish() takes it after
    // lease_timeout).
    const bool all_sent = f.next == f.blocks.size() && f.sent >= f.blocks.size();
    store_.renew(f.lease_id, now, all_sent ? kAwaitingAck : lease_timeout_);
  }
  if (ok || f.failed) return false;
  f.failed = true;
  return true;
}

FetchServer::AckOutcome FetchServer::on_ack(const std::string& routing_id, const protocol::Ack& ack,
                                            const std::string& consumer_name, Clock::time_point now) {
  AckOutcome outcome;
  if (ack.incarnation != incarnation_) return outcome;
  auto consumer = fetches_.find(routing_id);
  if (consumer == fetches_.end() || consumer->second.count(ack.fetch_id) == 0) {
    auto late = lapsed_.find(routing_id);
    if (late == lapsed_.end()) return outcome;
    auto fetch = late->second.find(ack.fetch_id);
    if (fetch == late->second.end()) return outcome;
    outcome.known = true;
    outcome.ok = ack.ok;
    outcome.after_lease = true;
    outcome.counts_as_failed = !ack.ok && !fetch->second.failed;
    if (ack.ok) {
      outcome.delivery.version = fetch->second.version;
      outcome.delivery.consumer = consumer_name;
      outcome.delivery.bytes = fetch->second.bytes;
      if (fetch->second.published_at) outcome.delivery.since_publish = now - *fetch->second.published_at;
    }
    late->second.erase(fetch);
    return outcome;
  }
  auto it = consumer->second.find(ack.fetch_id);
  Fetch fetch = std::move(it->second);
  consumer->second.erase(it);
  // Cut off as for any refusal: a fetch with chunks not posted yet (a device version still being
  // copied to the host; posting them for nothing is not done), and a consumer with a drain of
  // this kind under way already (one at a time: refusing in a loop held the sends of many).
  const bool drains_by_discard = !ack.ok && ack.discarded && fetch.next == fetch.blocks.size() &&
                                 !discard_drain_of(routing_id);
  if (ack.ok) {
    // Nothing is left to drain: the consumer has every byte it asked for, so no transport reads
    // the slot for it any more, whether or not the sends' completions have reached us (they lag
    // the data, by over a second while another peer on the same worker is stopped). Their
    // reports, if they come, find no fetch and are ignored.
    if (fetch.lease_id != 0 && fetch.sending) store_.set_sending(fetch.lease_id, false);
  } else if (drains_by_discard) {
    // Every chunk was posted, and the consumer takes each: the sends end by themselves.
    retire(routing_id, ack.fetch_id, fetch);
    if (auto drain = draining_.find({routing_id, ack.fetch_id}); drain != draining_.end()) {
      drain->second.cut_at = now + kDiscardDrain;
    }
  } else {
    retire_and_cut_off(routing_id, ack.fetch_id, fetch, "it refused the version", std::nullopt);
  }
  outcome.known = true;
  outcome.ok = ack.ok;
  outcome.counts_as_failed = !ack.ok && !fetch.failed;
  outcome.relay = fetch.relay.empty() ? std::string() : planner_.name(fetch.relay);
  if (ack.ok && !fetch.in_part) {
    planner_.delivered(routing_id, fetch.version);
  } else {
    planner_.lost(routing_id);  // holds nothing it could relay (or only parts)
  }
  if (!fetch.relay.empty()) {
    end_relayed(fetch, !ack.ok, ack.ok);
    if (!ack.ok && ack.relay_fault != protocol::RelayFault::kNone) {
      outcome.relay_fault = true;
      planner_.failed(fetch.relay, routing_id, fetch.version, now, ack.relay_fault == protocol::RelayFault::kStalled);
    }
  }
  if (ack.ok) {
    outcome.delivery.version = fetch.version;
    outcome.delivery.consumer = consumer_name;
    outcome.delivery.bytes = fetch.bytes;
    outcome.delivery.relay = outcome.relay;
    if (fetch.published_at) outcome.delivery.since_publish = now - *fetch.published_at;
  } else if (!drains_by_discard) {
    cancel(fetch);
  }
  if (fetch.lease_id != 0) store_.release(fetch.lease_id);
  return outcome;
}

void FetchServer::cut_stalled_drains(Clock::time_point now) {
  for (auto& [key, drain] : draining_) {
    if (!drain.cut_at || *drain.cut_at > now) continue;
    drain.cut_at.reset();
    cut_off_.push_back(CutOff{key.first, drain.sends,
                              "it refused the version saying it takes the chunks, yet " + std::to_string(drain.sends) +
                                  " send(s) had not ended " + std::to_string(kDiscardDrain.count()) + " s later",
                              std::nullopt});
  }
}

std::optional<FetchServer::Clock::time_point> FetchServer::next_stalled_drain() const {
  std::optional<Clock::time_point> next;
  for (const auto& [key, drain] : draining_) {
    if (drain.cut_at && (!next || *drain.cut_at < *next)) next = drain.cut_at;
  }
  return next;
}

bool FetchServer::discard_drain_of(const std::string& routing_id) const {
  for (auto it = draining_.lower_bound({routing_id, 0}); it != draining_.end() && it->first.first == routing_id; ++it) {
    if (it->second.cut_at) return true;
  }
  return false;
}

void FetchServer::end_relayed(const Fetch& fetch, bool tell_relay, bool delivered) {
  planner_.released(fetch.relay);
  // A relay that exported its buffer keeps it pinned until told, however the fetch ended.
  if (tell_relay || fetch.exported) {
    outgoing_.emplace_back(fetch.relay, protocol::RelayCancel{incarnation_, fetch.order_id, delivered});
  }
}

bool FetchServer::relay_offered(const std::string& relay, const protocol::RelayOffer& offer, Clock::time_point now) {
  if (offer.incarnation != incarnation_) return false;
  for (auto& [routing_id, fetches] : fetches_) {
    for (auto& [fetch_id, fetch] : fetches) {
      if (fetch.relay != relay || fetch.order_id != offer.order_id || !fetch.awaiting_offer) continue;
      fetch.awaiting_offer = false;
      fetch.exported = true;
      fetch.reply->region = offer.region;
      outgoing_.emplace_back(routing_id, std::move(*fetch.reply));
      fetch.reply.reset();
      if (!fetch.in_part) planner_.receiving(routing_id, fetch.version, now);
      return true;
    }
  }
  return false;
}

bool FetchServer::relay_failed(const std::string& relay, const protocol::RelayFailed& failed) {
  if (failed.incarnation != incarnation_) return false;
  for (auto& [routing_id, fetches] : fetches_) {
    for (auto it = fetches.begin(); it != fetches.end(); ++it) {
      if (it->second.relay != relay || it->second.order_id != failed.order_id) continue;
      planner_.released(relay);
      planner_.lost(relay);  // what it said it could not serve, it does not hold
      planner_.lost(routing_id);
      outgoing_.emplace_back(routing_id,
                             stopped(it->first, "relay '" + planner_.name(relay) + "' could not serve it: " + failed.error));
      fetches.erase(it);
      return true;
    }
  }
  return false;
}

std::vector<std::pair<std::string, std::uint64_t>> FetchServer::take_awaiting_digests(std::uint64_t version) {
  std::vector<std::pair<std::string, std::uint64_t>> out;
  for (auto& [routing_id, fetches] : fetches_) {
    for (auto& [fetch_id, fetch] : fetches) {
      if (fetch.version != version || !fetch.awaiting_digests) continue;
      fetch.awaiting_digests = false;
      out.emplace_back(routing_id, fetch_id);
    }
  }
  return out;
}

std::size_t FetchServer::relayed_in_flight() const {
  std::size_t count = 0;
  for (const auto& [routing_id, fetches] : fetches_) {
    for (const auto& [fetch_id, fetch] : fetches) count += fetch.relay.empty() ? 0 : 1;
  }
  return count;
}

bool FetchServer::serving(const std::string& routing_id) const {
  auto it = fetches_.find(routing_id);
  return (it != fetches_.end() && !it->second.empty()) || discard_drain_of(routing_id) ||
         std::any_of(cut_off_.begin(), cut_off_.end(), [&](const CutOff& cut) { return cut.routing_id == routing_id; });
}

std::size_t FetchServer::drop(const std::string& routing_id) {
  // Its connection is being closed: a consumer joining again on the same one (the same routing
  // id) is not cut off for the drains of the consumer before.
  for (auto it = draining_.lower_bound({routing_id, 0}); it != draining_.end() && it->first.first == routing_id; ++it) {
    it->second.cut_at.reset();
  }
  parked_.erase(routing_id);
  parked_for_digests_.erase(routing_id);
  lapsed_.erase(routing_id);
  std::size_t undelivered = 0;
  // Fetches this consumer was relaying: their consumers are told at once and ask again (each
  // refusal counts its failed delivery where it is sent).
  for (auto& [other, fetches] : fetches_) {
    for (auto it = fetches.begin(); it != fetches.end();) {
      if (it->second.relay != routing_id) {
        ++it;
        continue;
      }
      planner_.lost(other);
      outgoing_.emplace_back(other, stopped(it->first, "its relay '" + planner_.name(routing_id) + "' left"));
      it = fetches.erase(it);
    }
  }
  planner_.forget(routing_id);
  auto it = fetches_.find(routing_id);
  if (it == fetches_.end()) return undelivered;
  for (auto& [id, fetch] : it->second) {
    cancel(fetch);
    retire(routing_id, id, fetch);  // the caller closes the connection, which ends the sends
    if (!fetch.relay.empty()) end_relayed(fetch, true);
    if (fetch.lease_id != 0) store_.release(fetch.lease_id);
    if (!fetch.failed) undelivered++;
  }
  fetches_.erase(it);
  return undelivered;
}

FetchServer::Expiry FetchServer::expired(const SlotPool::Lease& lease) {
  Expiry expiry;
  auto it = fetches_.find(lease.holder);
  if (it == fetches_.end()) return expiry;
  std::erase_if(it->second, [&](auto& entry) {
    if (entry.second.lease_id != lease.id) return false;
    cancel(entry.second);
    if (in_flight(entry.second) > 0) {
      retire_and_cut_off(lease.holder, entry.first, entry.second, "its lease ended with sends in flight",
                         stopped(entry.first, "version " + std::to_string(entry.second.version) +
                                                  " stopped: its lease ended (no progress for the lease timeout, "
                                                  "or the slot was needed); join again"));
      expiry.cut_off = true;
      expiry.counts_as_failed = !entry.second.failed;
      return true;
    }
    auto& lapsed = lapsed_[lease.holder];
    lapsed[entry.first] = Lapsed{entry.second.version, entry.second.bytes, entry.second.failed, entry.second.published_at};
    if (lapsed.size() > kMaxLapsed) lapsed.erase(lapsed.begin());  // the oldest fetch id
    return true;
  });
  return expiry;
}

void FetchServer::cancel(const Fetch& fetch) {
  for (auto id : fetch.transfers) transports_.at(fetch.transport).cancel(id);
}

}  // namespace modelcast::producer
