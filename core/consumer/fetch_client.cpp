#include "core/consumer/fetch_client.h"

#include <algorithm>
#include <cstring>

#include "common/digest.h"
#include "modelcast/error.h"

namespace modelcast::consumer {

protocol::FetchRequest FetchClient::begin(std::uint64_t incarnation, std::uint64_t version, std::uint64_t base,
                                          Clock::time_point now) {
  fetch_.emplace();
  fetch_->fetch_id = next_fetch_id_++;
  fetch_->requested_at = now;
  return {incarnation, version, fetch_->fetch_id, base};
}

bool FetchClient::answers(const protocol::FetchReply& reply) const {
  return fetch_ && !fetch_->replied && reply.fetch_id == fetch_->fetch_id;
}

bool FetchClient::withdraws(const protocol::FetchReply& reply) const {
  return fetch_ && fetch_->replied && !reply.ok && reply.fetch_id == fetch_->fetch_id;
}

std::uint64_t FetchClient::received_bytes() const {
  if (!fetch_ || !fetch_->replied || !fetch_->failure.empty()) return 0;
  return fetch_->plan.prefix_end(fetch_->done_prefix);
}

std::uint64_t FetchClient::arriving_version() const { return fetch_ && fetch_->replied ? fetch_->manifest.version : 0; }

bool FetchClient::reply_overdue(Clock::time_point now, Clock::duration timeout) const {
  return fetch_ && !fetch_->replied && now - fetch_->requested_at > timeout;
}

bool FetchClient::transfer_stalled(Clock::time_point now, Clock::duration timeout) const {
  return fetch_ && fetch_->replied && now - fetch_->progressed_at > timeout;
}

const std::string& FetchClient::relay() const {
  static const std::string none;
  return fetch_ && fetch_->replied ? fetch_->relay : none;
}

std::optional<std::pair<std::shared_ptr<detail::ReceiveBuffer>, const Manifest*>> FetchClient::receiving(
    std::uint64_t version) const {
  if (!fetch_ || !fetch_->replied || fetch_->manifest.version != version || !fetch_->failure.empty()) {
    return std::nullopt;
  }
  return std::make_pair(fetch_->buffer, &fetch_->manifest);
}

BlockState FetchClient::block_state(const detail::ReceiveBuffer& buffer, std::uint32_t block) {
  if (!fetch_ || !fetch_->replied || fetch_->buffer.get() != &buffer || !fetch_->failure.empty()) {
    return BlockState::kNever;
  }
  if (block >= fetch_->chunk_done.size()) return BlockState::kNever;
  if (!fetch_->chunk_done[block]) return BlockState::kNotYet;
  if (fetch_->verified[block]) return BlockState::kReady;
  // Hashed when it landed; the producer's digests, still to come, decide. Once they are in, a
  // landed block that is not verified failed its check (and so will this fetch).
  return fetch_->digests_pending ? BlockState::kNotYet : BlockState::kNever;
}

std::optional<FinishedFetch> FetchClient::accept(const protocol::FetchReply& reply,
                                                 std::shared_ptr<detail::ReceiveBuffer> buffer, Clock::time_point now,
                                                 std::shared_ptr<const detail::InstalledVersion> base,
                                                 const std::vector<bool>& wanted_blocks) {
  fetch_->replied = true;
  fetch_->progressed_at = now;
  fetch_->manifest = reply.manifest;
  fetch_->buffer = std::move(buffer);
  fetch_->plan = {reply.manifest.total_bytes, reply.chunk_bytes};
  fetch_->pending = fetch_->plan.count();
  fetch_->chunk_done.assign(fetch_->plan.count(), false);
  fetch_->digests_pending = reply.manifest.integrity && reply.digests_pending;
  fetch_->by_block = checked_by_block(reply.manifest);
  fetch_->signature = reply.signature;
  fetch_->base = std::move(base);
  fetch_->relay = reply.relay;
  fetch_->verified.assign(fetch_->plan.count(), false);
  // Summed as each chunk lands, so that the check costs almost nothing once the last one is in.
  // Only for a version received whole (those digests have no blocks, so no delta or relay).
  if (tensor_digests_on_host_ && reply.manifest.integrity && reply.manifest.digest_kind == DigestKind::kPmix64 &&
      !fetch_->base && !fetch_->buffer->device_owned) {
    std::vector<pmix64::Range> tensors;
    tensors.reserve(reply.manifest.tensors.size());
    for (const auto& t : reply.manifest.tensors) tensors.push_back({t.offset, t.size});
    fetch_->tensor_digests.emplace(std::move(tensors));
  }
  auto& buffer_ref = *fetch_->buffer;
  // From here the buffer's old bytes are no longer intact.
  const std::vector<std::uint64_t> held = std::move(buffer_ref.held_blocks);
  buffer_ref.held_blocks.clear();
  // Which chunks to receive: those the sender sends (all, or a delta's changed blocks); the
  // others are the base's bytes, copied from the base unless this buffer still holds them from
  // the version it had before. A mask of another chunking than the reply's cannot be the
  // producer's: everything comes.
  const bool masked = wanted_blocks.size() == fetch_->plan.count();
  auto kept = [&](std::size_t i) { return !masked || wanted_blocks[i]; };
  const std::vector<bool> receive =
      chunks_sent(reply, fetch_->base ? &fetch_->base->manifest : nullptr, wanted_blocks);
  std::vector<std::size_t> from_base;  // copied below, once the receives are posted
  for (std::size_t i = 0; i < receive.size(); ++i) {
    if (kept(i)) continue;
    fetch_->chunk_done[i] = true;  // not part of what this consumer holds
    --fetch_->pending;
  }
  if (fetch_->base) {
    const auto& wanted = fetch_->manifest.block_digests;
    const bool reuse = held.size() == wanted.size();
    for (std::size_t i = 0; i < receive.size(); ++i) {
      if (receive[i] || !kept(i)) continue;
      if (!reuse || held[i] != wanted[i]) from_base.push_back(i);
      fetch_->chunk_done[i] = true;
      fetch_->verified[i] = true;  // the base's verified bytes, under an equal digest
      --fetch_->pending;
    }
  }
  // Host versions are checked block by block as the blocks land (on_chunk); a device producer's
  // per-tensor pmix64 digests are summed as the chunks land in a host consumer, and a device
  // consumer takes them on its device copy (service_fetch.cpp).
  auto& transport = *buffer_ref.transport;
  try {
    if (!reply.region.empty()) fetch_->remote = transport.import_region(0, reply.region);
    for (std::size_t i = 0; i < fetch_->plan.count(); ++i) {
      if (!receive[i]) continue;
      transport::Completion done = [done = on_chunk_, id = fetch_->fetch_id, i](const transport::TransferResult& r) {
        done({id, i, r.ok, r.error});
      };
      auto offset = fetch_->plan.offset(i), length = fetch_->plan.length(i);
      fetch_->transfers.push_back(
          fetch_->remote ? transport.post_read(*fetch_->remote, offset, *buffer_ref.region, offset, length, std::move(done))
                         : transport.post_recv(*buffer_ref.region, offset, length,
                                               protocol::chunk_tag(fetch_->fetch_id, i), std::move(done)));
    }
  } catch (const Error& e) {
    // What was posted still completes (and is counted off); nothing more will come. A relay's
    // export that cannot be imported, mapped or read is the relay's fault: the producer serves next.
    fetch_->failure = e.what();
    fetch_->pending = fetch_->transfers.size();
    if (!fetch_->relay.empty() && !reply.region.empty()) {
      fetch_->failure = "the export of relay '" + fetch_->relay + "' cannot be read: " + fetch_->failure;
      fetch_->relay_fault = true;
    }
  }
  // The local copies go while the changed blocks arrive (on the transport's thread), not before
  // the receives that let them: the producer's sends wait for those.
  if (fetch_->failure.empty()) {
    const std::byte* from = fetch_->base ? fetch_->base->buffer->memory.data() : nullptr;
    for (auto i : from_base) {
      const auto offset = fetch_->plan.offset(i);
      std::memcpy(buffer_ref.memory.data() + offset, from + offset, fetch_->plan.length(i));
    }
  }
  while (fetch_->done_prefix < fetch_->chunk_done.size() && fetch_->chunk_done[fetch_->done_prefix]) {
    fetch_->done_prefix++;
  }
  return maybe_finish();
}

std::vector<bool> FetchClient::chunks_sent(const protocol::FetchReply& reply, const Manifest* base,
                                           const std::vector<bool>& wanted_blocks) {
  const std::size_t count = transfer::ChunkPlan{reply.manifest.total_bytes, reply.chunk_bytes}.count();
  // A delta is cut along the blocks, one a chunk; against a base of other blocks (which
  // check_delta_base refuses) the producer would have sent the version whole.
  const bool delta = base && base->block_digests.size() == count && reply.manifest.block_digests.size() == count;
  std::vector<bool> sent(count, !delta);
  if (delta) {
    for (auto i : transfer::changed_blocks(base->block_digests, reply.manifest.block_digests)) sent[i] = true;
  }
  if (wanted_blocks.size() == count) {
    for (std::size_t i = 0; i < count; ++i) sent[i] = sent[i] && wanted_blocks[i];
  }
  return sent;
}

bool FetchClient::discard(const protocol::FetchReply& reply, transport::Transport& transport, const Manifest* base,
                          const std::vector<bool>& wanted_blocks) {
  if (!reply.region.empty()) return false;
  const transfer::ChunkPlan plan{reply.manifest.total_bytes, reply.chunk_bytes};
  // A plan of more chunks than producer_plan makes would post a receive for each, for nothing.
  try {
    transfer::check_plan(plan);
  } catch (const Error&) {
    return false;
  }
  if (plan.count() > transfer::kMaxBlocks) return false;
  const auto sent = chunks_sent(reply, base, wanted_blocks);
  for (std::size_t i = 0; i < sent.size(); ++i) {
    if (sent[i]) transport.discard(protocol::chunk_tag(reply.fetch_id, i));
  }
  return true;
}

std::optional<FinishedFetch> FetchClient::on_chunk(const ChunkDone& done, Clock::time_point now) {
  if (auto it = draining_.find(done.fetch_id); it != draining_.end()) {
    it->second.progressed_at = now;
    if (--it->second.pending == 0) draining_.erase(it);  // its buffer may be reused now
    return std::nullopt;
  }
  if (!fetch_ || !fetch_->replied || done.fetch_id != fetch_->fetch_id) return std::nullopt;
  if (!done.ok && fetch_->failure.empty()) fetch_->failure = done.error;
  if (done.ok && done.chunk < fetch_->chunk_done.size()) {
    fetch_->chunk_done[done.chunk] = true;
    fetch_->progressed_at = now;
    const auto length = fetch_->plan.length(done.chunk);
    fetch_->bytes_received += length;
    if (fetch_->tensor_digests) {
      fetch_->tensor_digests->add(fetch_->buffer->memory.data(), fetch_->plan.offset(done.chunk), length);
    }
    if (fetch_->by_block) {
      // Hashed as it lands, while its bytes may still be in cache, whatever its source; checked
      // now if the producer's digests are known, else when they come (on_digests). A relay
      // that sends a bad block is left at once.
      const auto digest = digest_bytes(fetch_->buffer->memory.data() + fetch_->plan.offset(done.chunk), length);
      fetch_->blocks.emplace_back(static_cast<std::uint32_t>(done.chunk), digest);
      const auto& wanted = fetch_->manifest.block_digests;
      const bool matches = !fetch_->digests_pending && done.chunk < wanted.size() && wanted[done.chunk] == digest;
      fetch_->verified[done.chunk] = matches;
      if (!matches && !fetch_->relay.empty() && fetch_->failure.empty()) {
        fetch_->failure = "block " + std::to_string(done.chunk) + " of version " +
                          std::to_string(fetch_->manifest.version) + " from relay '" + fetch_->relay +
                          "' does not match its signed digest";
        fetch_->relay_fault = true;
        for (auto id : fetch_->transfers) fetch_->buffer->transport->cancel(id);
      }
    }
    while (fetch_->done_prefix < fetch_->chunk_done.size() && fetch_->chunk_done[fetch_->done_prefix]) {
      fetch_->done_prefix++;
    }
  }
  --fetch_->pending;
  return maybe_finish();
}

std::optional<FinishedFetch> FetchClient::on_digests(const protocol::Digests& message) {
  if (!fetch_ || !fetch_->replied || message.fetch_id != fetch_->fetch_id || !fetch_->digests_pending) {
    return std::nullopt;
  }
  // A version with blocks is digested per block only; one without, per tensor only.
  if (fetch_->by_block ? !message.digests.empty() || message.block_digests.size() != block_count(fetch_->manifest)
                       : message.digests.size() != fetch_->manifest.tensors.size() || !message.block_digests.empty()) {
    throw Error(ErrorCode::kProtocol,
                "digests for " + std::to_string(message.digests.size()) + " tensors and " +
                    std::to_string(message.block_digests.size()) + " blocks; the manifest has " +
                    std::to_string(fetch_->manifest.tensors.size()) + " tensors and " +
                    std::to_string(fetch_->by_block ? block_count(fetch_->manifest) : 0) + " blocks");
  }
  for (std::size_t i = 0; i < message.digests.size(); ++i) fetch_->manifest.tensors[i].digest = message.digests[i];
  fetch_->manifest.block_digests = message.block_digests;
  fetch_->digests_pending = false;
  for (const auto& [block, digest] : fetch_->blocks) {
    fetch_->verified[block] = block < message.block_digests.size() && message.block_digests[block] == digest;
  }
  fetch_->signature = message.signature;
  return maybe_finish();
}

// Finishes once every chunk is in and, with integrity on, the producer's digests are known.
std::optional<FinishedFetch> FetchClient::maybe_finish() {
  if (fetch_->pending > 0) return std::nullopt;
  if (fetch_->failure.empty() && fetch_->digests_pending) return std::nullopt;
  InFlight fetch = std::move(*fetch_);
  fetch_.reset();
  // Every read is done: a relay's buffer is not mapped here any more once the relay is told.
  if (fetch.remote && !fetch.relay.empty()) fetch.buffer->transport->forget_import(*fetch.remote);
  std::vector<std::uint64_t> received;
  if (fetch.tensor_digests && fetch.failure.empty()) received = fetch.tensor_digests->finish(fetch.buffer->memory.data());
  const bool relay_read = fetch.remote != nullptr && !fetch.relay.empty();
  FinishedFetch done{fetch.fetch_id,
                     std::move(fetch.manifest),
                     std::move(fetch.buffer),
                     std::move(fetch.signature),
                     std::move(received),
                     std::move(fetch.failure),
                     fetch.base ? fetch.base->manifest.version : 0,
                     std::move(fetch.blocks),
                     fetch.bytes_received,
                     std::move(fetch.relay),
                     fetch.relay_fault,
                     relay_read,
                     fetch.remote != nullptr && fetch.relay.empty()};
  return done;
}

std::optional<std::pair<Manifest, std::uint64_t>> FetchClient::abort() {
  if (!fetch_) return std::nullopt;
  std::optional<std::pair<Manifest, std::uint64_t>> abandoned;
  if (fetch_->replied) {
    for (auto id : fetch_->transfers) fetch_->buffer->transport->cancel(id);
    abandoned.emplace(fetch_->manifest, fetch_->fetch_id);
    if (fetch_->pending > 0) {
      // The base version's buffer would stay pinned with this one: with receives that never end,
      // the two held the pool's last free buffers for good.
      fetch_->base.reset();
      fetch_->progressed_at = Clock::now();
      draining_.emplace(fetch_->fetch_id, std::move(*fetch_));
    }
  }
  fetch_.reset();
  return abandoned;
}

bool FetchClient::draining_holds_buffers() const {
  return std::any_of(draining_.begin(), draining_.end(), [](const auto& entry) { return !entry.second.set_aside; });
}

std::size_t FetchClient::set_aside_stuck(
    Clock::time_point now, Clock::duration timeout,
    const std::function<bool(const std::shared_ptr<detail::ReceiveBuffer>&)>& set_aside) {
  std::size_t refused = 0;
  for (auto& [id, fetch] : draining_) {
    if (fetch.set_aside || now - fetch.progressed_at < timeout) continue;
    if (set_aside(fetch.buffer)) {
      fetch.set_aside = true;
    } else {
      ++refused;
    }
  }
  return refused;
}

std::vector<FetchClient::AbandonedReceives> FetchClient::take_retired(
    const std::function<bool(const transport::Transport*)>& retired) {
  std::vector<AbandonedReceives> taken;
  for (auto it = draining_.begin(); it != draining_.end();) {
    auto& fetch = it->second;
    const bool callers_memory = fetch.buffer && !fetch.buffer->owned.data() && !fetch.buffer->device_owned;
    if (!fetch.buffer || callers_memory || !retired(fetch.buffer->transport.get())) {
      ++it;
      continue;
    }
    auto transport = fetch.buffer->transport;
    taken.push_back({std::move(transport), std::move(fetch.remote), std::move(fetch.buffer)});
    it = draining_.erase(it);
  }
  return taken;
}

}  // namespace modelcast::consumer
