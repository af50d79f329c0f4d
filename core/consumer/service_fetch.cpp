// The fetch side of the consumer's service: ask for the newest version, take a buffer, finish
// (verify and install, or reject) and ack. See service.h for the threads.
#include "core/consumer/service.h"

#include <future>
#include <system_error>

#include "common/clock.h"
#include "device/pmix64.h"

namespace modelcast::consumer {
namespace {

std::vector<std::uint64_t> host_pmix64(const Manifest& manifest, const std::byte* base) {
  std::vector<std::uint64_t> digests;
  digests.reserve(manifest.tensors.size());
  for (const auto& t : manifest.tensors) digests.push_back(pmix64::digest_host(base + t.offset, t.size));
  return digests;
}

}  // namespace

// The host buffer that holds the installed version's verified bytes: the version's own for a
// host consumer, the one it landed from for a staged device consumer while still kept.
std::shared_ptr<detail::ReceiveBuffer> ConsumerService::installed_host_bytes(
    const std::shared_ptr<const detail::InstalledVersion>& current) const {
  if (!current) return nullptr;
  if (current->buffer) return current->buffer;
  // The prepared version first, known by itself: landed_host_ is known by its number only, which
  // a restarted producer's run may give the prepared version too.
  if (prepared_host_ && current.get() == prepared_.get()) return prepared_host_;
  if (landed_host_ && landed_host_version_ == current->manifest.version) return landed_host_;
  return nullptr;
}

// Caller buffers the caller may write (while its view of an older version holds one:
// ConsumerOptions::caller_buffers_untouched): only ours keep the bytes as verified, unless the
// caller says it leaves its buffers untouched.
bool ConsumerService::stays_intact(const detail::ReceiveBuffer& buffer) const {
  return buffer.owned.size() > 0 || options_.caller_buffers_untouched;
}

std::shared_ptr<detail::ReceiveBuffer> ConsumerService::host_copy_kept(std::shared_ptr<detail::ReceiveBuffer> buffer,
                                                                       const Manifest& manifest) const {
  if (!buffer || buffer->device_owned || !stays_intact(*buffer)) return nullptr;
  // As for a host version installed in its buffer: one holding only the blocks of some parts
  // does not hold the others in place, which a later fetch keeping other parts would take as
  // received (its wants changed within the run: a sharded consumer's plan).
  buffer->held_blocks = selection_.everything() ? manifest.block_digests : std::vector<std::uint64_t>{};
  return buffer;
}

void ConsumerService::keep_landed_host(std::shared_ptr<detail::ReceiveBuffer> buffer, const Manifest& manifest) {
  landed_host_ = host_copy_kept(std::move(buffer), manifest);
  landed_host_version_ = landed_host_ ? manifest.version : 0;
}

void ConsumerService::release_landed_host() {
  landed_host_.reset();
  landed_host_version_ = 0;
}

// The installed version offered as a delta base: one of this producer run, with block digests,
// whose bytes are in a host receive buffer: a host consumer's own, or the one a staged device
// consumer landed it from while still kept (the unchanged blocks are copied on the host, and
// the whole version then goes to the device as a full one does).
std::shared_ptr<const detail::InstalledVersion> ConsumerService::delta_base() const {
  auto current = store_.current();
  auto host = installed_host_bytes(current);
  if (!host || current->manifest.block_digests.empty() || current->manifest.incarnation != link_.incarnation() ||
      current->wants_generation != wants_generation_) {
    return nullptr;
  }
  if (current->buffer) return current;
  auto base = std::make_shared<detail::InstalledVersion>();
  base->manifest = current->manifest;
  base->buffer = std::move(host);
  return base;
}

// What we hold: a newer announced version of this incarnation, or any version of a new one.
bool ConsumerService::wants(std::uint64_t version) const {
  if (version == 0 || rejected_.count(version)) return false;
  if (prepared_ && version <= prepared_->manifest.version) return false;  // held, waiting for the group
  auto current = store_.current();
  if (!current || current->manifest.incarnation != link_.incarnation()) return true;
  return version > current->manifest.version;
}

void ConsumerService::maybe_fetch() {
  auto now = Clock::now();
  if (fetch_.reply_overdue(now, options_.producer_timeout)) {
    log_.warn("no answer to a fetch in {} ms; asking again", options_.producer_timeout.count());
    fetch_.forget();
  }
  if (!link_.is_joined() || fetch_.in_flight() || !wants(newest_announced_)) return;
  // Readers holding every buffer, or a refusal just now: wait for the next tick rather than
  // asking the producer again and again.
  if (now < retry_fetch_after_) return;
  // Relay sends still posted a second after their order ended were to a receiver on this host
  // that died or left mid-transfer (UCX never ends those): given up, as publish() gives up a
  // slot's, or two such receivers would hold every buffer for ever.
  if (!store_.buffer_available(caller_bytes_wanted_)) {
    if (auto given_up = relay_.give_up_stuck(now - kStuckRelaySends); !given_up.empty()) {
      log_.warn("gave up the sends of {} relay order(s) that never ended a second after the order did (a "
                "receiver on this host that died or left mid-transfer): their buffers are reused",
                given_up.size());
      for (const auto& buffer : given_up) store_.keep_for_sends(buffer);
    }
    set_aside_stuck_receives(now);
  }
  // The host copy kept for peers yields to the next version (a relay order that still sends
  // from it holds it on its own until its sends are over).
  if (landed_host_ && !store_.buffer_available(caller_bytes_wanted_)) release_landed_host();
  if (prepared_host_ && !store_.buffer_available(caller_bytes_wanted_)) prepared_host_.reset();
  // The shaped views' memory counts too: a reconnect empties the receive pool while views still
  // hold shaped memory, and a version fetched then was refused whole once it arrived, and never
  // asked for again.
  const bool shaped_memory_held = !feeds_assembler_ && !target_->has_room();
  if (!store_.buffer_available(caller_bytes_wanted_) || (landing_ && !landing_->available()) || shaped_memory_held) {
    // Relay orders (under way, or ended and within their second) end or are given up by
    // themselves, and free their buffers: the stall is the user's to hear of only once none is
    // left (views hold the rest). It blamed views while orders to stalled receivers held them.
    if (shaped_memory_held || !buffers_free_by_themselves()) {
      report_buffers_held(newest_announced_, shaped_memory_held);
    }
    return;
  }
  stuck_refusal_reported_ = false;
  if (buffers_held_reported_) {
    buffers_held_reported_ = false;
    log_.info("a buffer is free again: fetching version {}", newest_announced_);
    // Over: the wait is not left as the last error, which says a state only while it lasts (any
    // error said since stays).
    count([&](ConsumerStats& s) {
      if (s.last_error == buffers_held_said_) s.last_error.clear();
    });
    buffers_held_said_.clear();
  }
  {
    std::lock_guard lock(wants_mutex_);
    if (next_wants_) {
      fetch_wants_ = std::move(next_wants_);
      fetch_wants_run_ = next_wants_run_;
      next_wants_.reset();
      ++wants_generation_;
    }
  }
  // An assembler's regions of a run before the one this link joined (a trainer restarted at the
  // same endpoints keeps the consumer's assembler): boxes outside its smaller tensors refused every
  // version, and the assembler, which asks again only once every rank offered one, never did.
  // The options' wants until it asks again.
  if (fetch_wants_ && fetch_wants_run_ != 0 && fetch_wants_run_ != link_.incarnation()) {
    fetch_wants_.reset();
    ++wants_generation_;
  }
  asked_for_ = newest_announced_;
  delta_base_ = delta_base();
  auto request = fetch_.begin(link_.incarnation(), asked_for_, delta_base_ ? delta_base_->manifest.version : 0, now);
  if (fetch_wants_) {
    request.has_wants = true;
    request.wants = *fetch_wants_;
  }
  link_.send(request);
}

void ConsumerService::on_fetch_reply(const protocol::FetchReply& reply) {
  if (reply.fetch_id == 0 && !reply.ok && reply.refusal == protocol::Refusal::kNotJoined) {
    // Answers no fetch: the producer dropped this consumer, and will announce nothing more to it.
    if (!link_.is_joined()) return;
    log_.warn("{}", reply.error);
    abandon_fetch("the producer dropped this consumer", true);
    retry_fetch_after_ = Clock::now() + tick();
    return join();
  }
  if (fetch_.withdraws(reply)) {
    abandon_fetch("the producer withdrew it: " + reply.error, true);
    retry_fetch_after_ = Clock::now() + tick();
    return;
  }
  if (!fetch_.answers(reply)) return;  // a stale reply
  if (!reply.ok) {
    log_.debug("fetch refused: {}", reply.error);
    fetch_.forget();
    retry_fetch_after_ = Clock::now() + tick();
    if (reply.refusal == protocol::Refusal::kNotJoined || reply.refusal == protocol::Refusal::kStaleIncarnation) {
      join();
    }
    return;
  }
  const Manifest& manifest = reply.manifest;
  std::shared_ptr<detail::ReceiveBuffer> buffer;
  try {
    if (manifest.version != asked_for_) {
      throw Error(ErrorCode::kProtocol, "asked for version " + std::to_string(asked_for_) +
                                            ", the producer answered with version " + std::to_string(manifest.version));
    }
    // Installed, a version of another run never counts as this run's: it would be fetched again
    // at every tick.
    if (manifest.incarnation != link_.incarnation()) {
      throw Error(ErrorCode::kProtocol, "the answer for version " + std::to_string(manifest.version) +
                                            " is of another producer run than the one joined");
    }
    // One rank's pieces are checked (layout, wants) only as the whole the assembler makes of
    // them: with no assembler, pieces would be installed as the model, unchecked.
    if (manifest.rank_count > 1 && !feeds_assembler_) {
      throw Error(ErrorCode::kProtocol, "version " + std::to_string(manifest.version) + " is rank " +
                                            std::to_string(manifest.rank) + "'s pieces of a model " +
                                            std::to_string(manifest.rank_count) +
                                            " ranks publish, but the producer named no other ranks at the join");
    }
    check_reply(policy_, reply);
    // Refused before a byte is received: a version the wants do not fit, or that cannot be
    // converted as asked (rank pieces are converted once assembled).
    selection_ = TensorSelection::resolve(fetch_wants_ ? *fetch_wants_ : options_.wants, manifest);
    if (!feeds_assembler_) shaper_.check(manifest);
    if (reply.base_version != 0) check_delta_base(reply);
    // Blocks from a relay are checked as they land: their digests must come with the answer.
    // A one-sided route (region: the relay's export) reads the whole version and checks it
    // whole, on the tensor digests the answer carries.
    const bool relay_read = !reply.region.empty();
    if (!reply.relay.empty() &&
        (reply.digests_pending || !manifest.integrity ||
         (!relay_read && (manifest.block_bytes != reply.chunk_bytes ||
                          manifest.block_digests.size() != block_count(manifest))))) {
      throw Error(ErrorCode::kProtocol, "version " + std::to_string(manifest.version) + " comes from relay '" +
                                            reply.relay + "' without the block digests to check it by");
    }
    try {
      buffer = store_.take_buffer(manifest.total_bytes);
    } catch (const Error& e) {  // a device receive buffer, or a host one mmap could not have
      if (e.code() != ErrorCode::kResource) throw;
      discard_chunks(reply);
      return retry_later(manifest, reply.fetch_id, e);
    }
    // Device buffers are hashed on the device, with pmix64 only.
    if (buffer && buffer->device_owned && manifest.integrity && manifest.digest_kind != DigestKind::kPmix64) {
      throw Error(ErrorCode::kProtocol, "version " + std::to_string(manifest.version) + " arrives in device memory "
                                        "but carries " + std::string(digest_kind_name(manifest.digest_kind)) +
                                        " digests, which are taken on the host");
    }
    // A host buffer of a device consumer: each chunk goes on to the device as it lands.
    if (buffer && landing_ && !buffer->device_owned) {
      try {
        landing_->begin(manifest.total_bytes, *buffer);
      } catch (const Error& e) {
        if (e.code() != ErrorCode::kResource) throw;
        discard_chunks(reply);
        buffer.reset();
        return retry_later(manifest, reply.fetch_id, e);
      }
    }
  } catch (const std::bad_alloc&) {
    discard_chunks(reply);
    return retry_later(manifest, reply.fetch_id, Error(ErrorCode::kResource, "cannot allocate " +
                                                           std::to_string(manifest.total_bytes) + " bytes for version " +
                                                           std::to_string(manifest.version)));
  } catch (const Error& e) {
    discard_chunks(reply);
    return reject(manifest, reply.fetch_id, e);
  }
  if (!buffer) {
    std::string why = options_.caller_buffers.empty()
                          ? "every receive buffer is held by a reader; will fetch the newest when one frees"
                          : "no caller buffer of " + std::to_string(manifest.total_bytes) + " bytes is free";
    log_.debug("{}", why);
    // A caller buffer too small for it may be free: the next fetch waits for one that fits (it
    // was asked for, and refused, at every turn).
    if (!options_.caller_buffers.empty()) caller_bytes_wanted_ = manifest.total_bytes;
    if (!buffers_free_by_themselves()) report_buffers_held(manifest.version);
    discard_chunks(reply);
    send_ack(manifest, reply.fetch_id, false, why, protocol::RelayFault::kNone, /*again=*/true);
    fetch_.forget();
    retry_fetch_after_ = Clock::now() + tick();
    return;
  }
  caller_bytes_wanted_ = 0;
  finish(fetch_.accept(reply, std::move(buffer), Clock::now(), reply.base_version ? delta_base_ : nullptr,
                       selection_.blocks(manifest)));
}

// Posted before the ack, so that the producer's sends end about when it reads the refusal. The
// chunks are those the producer chose to send (FetchServer::start): the blocks of the tensors
// the wants keep, none when the wants do not fit the version (the refusal may be just that),
// and of a delta only the blocks that changed since the base this consumer offered.
void ConsumerService::discard_chunks(const protocol::FetchReply& reply) {
  transport::Transport* transport = store_.transport();
  if (!transport) return;
  const Manifest& manifest = reply.manifest;
  const auto& wants = fetch_wants_ ? *fetch_wants_ : options_.wants;
  std::vector<bool> wanted;
  if (!wants.empty() && manifest.block_bytes != 0) {
    try {
      wanted = TensorSelection::resolve(wants, manifest).blocks(manifest);
    } catch (const Error&) {
      return;  // the producer sent nothing
    }
  }
  const bool offered = delta_base_ && reply.base_version != 0 && delta_base_->manifest.version == reply.base_version;
  if (FetchClient::discard(reply, *transport, offered ? &delta_base_->manifest : nullptr, wanted)) {
    discarded_fetch_ = reply.fetch_id;
  }
}

// A delta is only as good as its base: the one this consumer offered, with the same blocks.
void ConsumerService::check_delta_base(const protocol::FetchReply& reply) const {
  const Manifest& manifest = reply.manifest;
  if (!delta_base_ || delta_base_->manifest.version != reply.base_version) {
    throw Error(ErrorCode::kProtocol, "version " + std::to_string(manifest.version) + " came as a delta against version " +
                                          std::to_string(reply.base_version) + ", which this consumer did not offer");
  }
  const Manifest& base = delta_base_->manifest;
  if (base.total_bytes != manifest.total_bytes || base.block_bytes != manifest.block_bytes ||
      base.block_digests.size() != manifest.block_digests.size()) {
    throw Error(ErrorCode::kProtocol, "version " + std::to_string(manifest.version) +
                                          " came as a delta against version " + std::to_string(base.version) +
                                          ", whose blocks are laid out differently");
  }
}

// The user's rule (views hold buffers) bites here: said once per stall, when it starts, rather
// than letting updates stop in silence. Relay orders that hold a buffer are not the user's to
// release and go by themselves, so a stall is not reported while one remains.
void ConsumerService::report_buffers_held(std::uint64_t version, bool shaped) {
  if (buffers_held_reported_) return;
  buffers_held_reported_ = true;
  // A caller buffer is also held by the version installed in it: one large enough is never free
  // where there is only one (said at the join).
  const std::string which = shaped                   ? "every buffer for shaped views is held by a view"
                            : caller_bytes_wanted_ > 0 ? "every caller buffer of its " +
                                                             std::to_string(caller_bytes_wanted_) +
                                                             " bytes or more holds the current version or a view"
                                                       : "every receive buffer is held by a view";
  const Error held(ErrorCode::kResource, "version " + std::to_string(version) + " waits: " + which +
                                             " still in use; updates resume when one is released "
                                             "(hold fewer views, or give the consumer more buffers)");
  buffers_held_said_ = held.what();
  report(held);
}

void ConsumerService::set_aside_stuck_receives(Clock::time_point now) {
  const auto refused = fetch_.set_aside_stuck(now, options_.transfer_timeout, [&](const auto& buffer) {
    if (!store_.set_aside(buffer)) return false;
    log_.warn("receives of an abandoned transfer made no progress for {} ms (a sender that died mid-send): "
              "their receive buffer is set aside and another used in its place",
              options_.transfer_timeout.count());
    return true;
  });
  // Said once while it lasts: asked again at every turn that wants a buffer.
  if (refused == 0 || stuck_refusal_reported_) {
    stuck_refusal_reported_ = refused > 0;
    return;
  }
  stuck_refusal_reported_ = true;
  report(Error(ErrorCode::kResource,
               "receives of an abandoned transfer made no progress for " + std::to_string(options_.transfer_timeout.count()) +
                   " ms (a sender that died mid-send) and hold a receive buffer that " +
                   (options_.caller_buffers.empty()
                        ? "cannot be replaced: as many are set aside already; updates resume when they end, or at "
                          "the next reconnection"
                        : "is the caller's and cannot be replaced; updates resume when they end")));
}

void ConsumerService::release_retired_receives() {
  auto retired = fetch_.take_retired([&](const transport::Transport* t) { return !offered_->holds(t); });
  stuck_refusal_reported_ = false;  // a stall of the transports before this join, over
  std::erase_if(releasing_, [](const auto& release) {
    return release.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  });
  if (retired.empty()) return;
  log_.debug("letting go of {} receive buffer(s) of transfers abandoned on transports made afresh since",
             retired.size());
  try {
    releasing_.push_back(std::async(std::launch::async, [retired = std::move(retired)]() mutable { retired.clear(); }));
  } catch (const std::system_error&) {
    // No thread to be had: the task, and with it what it held, went as this threw (released on
    // this thread, which waited as long as that took).
  }
}

void ConsumerService::count_arrival() {
  count([&](ConsumerStats& s) {
    s.arriving_version = fetch_.arriving_version();
    s.arriving_bytes = fetch_.received_bytes();
  });
}

void ConsumerService::on_chunk(const ChunkDone& chunk) {
  auto done = fetch_.on_chunk(chunk, Clock::now());
  if (!done && landing_ && landing_->landing()) landing_->advance(fetch_.received_bytes());
  finish(std::move(done));
}

// A finished fetch: verified and installed, or rejected; acked either way.
void ConsumerService::finish(std::optional<FinishedFetch> done) {
  count_arrival();
  if (!done) return;
  if (!done->failure.empty()) {
    if (landing_) landing_->abandon();
    log_.warn("transfer of version {} failed: {}", done->manifest.version, done->failure);
    // A relay's transfer that failed otherwise than by a bad block (its connection: the relay
    // died mid-version) is the relay's fault too: asked again, the producer chose the same relay
    // before it had heard that it left.
    const bool from_relay = !done->relay.empty();
    const auto relay_fault = done->relay_fault ? protocol::RelayFault::kBadBlock
                             : from_relay      ? protocol::RelayFault::kStalled
                                               : protocol::RelayFault::kNone;
    send_ack(done->manifest, done->fetch_id, false, done->failure, relay_fault, /*again=*/true);
    allocation_failures_ = 0;  // a transfer that had its memory breaks the row
    back_off(failures_in_a_row_, /*free_tries=*/1);
    count([&](ConsumerStats& s) {
      s.transfers_aborted++;
      if (from_relay) s.relay_faults++;
    });
    // Not a rejection of the version: the next fetch of it comes from the producer.
    if (done->relay_fault) report(Error(ErrorCode::kIntegrity, done->failure + "; fetching it from the producer"));
    else if (from_relay) report(Error(ErrorCode::kTransport, "relay '" + done->relay + "' failed: " + done->failure +
                                                                "; fetching it from the producer"));
    return;
  }
  std::shared_ptr<detail::DeviceBuffer> device_copy;
  auto installed = std::make_shared<detail::InstalledVersion>();
  try {
    const Manifest& m = done->manifest;
    bool pmix = m.integrity && m.digest_kind == DigestKind::kPmix64;
    if (done->buffer->device_owned) {
      if (pmix) done->received = landing_->digest(m, done->buffer->memory.data());
    } else if (landing_) {
      // Normally begun when the fetch was answered (and most of it copied already); a landing
      // that was dropped since starts again here.
      if (!landing_->landing()) landing_->begin(m.total_bytes, *done->buffer);
      DeviceLanding::Landed landed = landing_->complete(m, pmix);
      device_copy = std::move(landed.buffer);
      if (pmix) done->received = std::move(landed.digests);
    } else if (pmix && done->received.size() != m.tensors.size()) {
      done->received = host_pmix64(m, done->buffer->memory.data());  // not summed as it landed
    }
    auto current = store_.current();
    const bool by_block = checked_by_block(m);
    check_arrived(policy_, m, {std::move(done->received), by_block, std::move(done->blocks)},
                  done->signature, current ? &current->manifest : nullptr);
    // What was verified is what the producer sent; cutting and conversion follow, on the device
    // for a device consumer (on its copy, or on the device buffer a one-sided route read into).
    if (!feeds_assembler_) {
      const auto* base = device_copy ? static_cast<const std::byte*>(device_copy->base) : done->buffer->memory.data();
      shaper_.apply(m, selection_, base, *installed, *target_);
    }
  } catch (const Error& e) {
    // Memory this consumer cannot have now (the device landing's, the shaped views') is no
    // verdict on the version: rejected, it was never asked for again (in a group, every member
    // lost it) for one failed allocation.
    if (e.code() == ErrorCode::kResource) return retry_later(done->manifest, done->fetch_id, e);
    // Bytes read out of a relay's buffer, checked whole here, that fail their check are the
    // relay's doing (the digests came from the producer): no verdict on the version, which
    // comes from the producer next (if the producer's own bytes are bad, that fetch rejects it).
    // A relay that sends is checked block by block as the blocks land, in FetchClient.
    if (done->relay_read && e.code() == ErrorCode::kIntegrity) {
      done->failure = std::string(e.what()) + " (read from relay '" + done->relay + "')";
      done->relay_fault = true;
      return finish(std::move(done));
    }
    // Read out of the producer's own slot (CUDA IPC), nothing tells this consumer that the read's
    // lease lapsed (a read that started late, a consumer paused) and a publish took the slot:
    // its bytes are then another version's, and fail their check. Fetched again once, not
    // rejected: the version was sound. A second failure of the same version is a verdict.
    if (done->producer_read && e.code() == ErrorCode::kIntegrity &&
        producer_read_failed_version_ != done->manifest.version) {
      producer_read_failed_version_ = done->manifest.version;
      done->failure = std::string(e.what()) + " (read out of the producer's slot, which a newer version may " +
                      "have taken once the read's lease lapsed; fetched again)";
      count([&](ConsumerStats& s) { s.last_error = done->failure; });
      return finish(std::move(done));
    }
    return reject(done->manifest, done->fetch_id, e);
  } catch (const std::bad_alloc&) {
    return retry_later(done->manifest, done->fetch_id,
                       Error(ErrorCode::kResource, "cannot allocate memory to check, cut or convert version " +
                                                       std::to_string(done->manifest.version)));
  }
  installed->manifest = std::move(done->manifest);
  installed->wants_generation = wants_generation_;
  installed->blocks_held = selection_.blocks(installed->manifest);
  const std::uint64_t done_bytes = done->bytes_received;
  delta_base_.reset();
  // Views say where their bytes are: here, not where the producer had them.
  for (auto& t : installed->manifest.tensors) {
    t.spec.memory = options_.memory;
    t.spec.device = options_.memory == MemoryKind::kCuda ? options_.device : 0;
  }
  for (auto& t : installed->shaped) {
    t.spec.memory = options_.memory;
    t.spec.device = options_.memory == MemoryKind::kCuda ? options_.device : 0;
  }
  // Views of a device copy need only it; the host buffer stays (for peers and as a delta base)
  // until a fetch needs it: landed_host_ once the version is visible, prepared_host_ while its
  // group has not committed it.
  std::shared_ptr<detail::ReceiveBuffer> landed;
  if (device_copy) {
    installed->device = std::move(device_copy);
    landed = std::move(done->buffer);
  } else {
    release_landed_host();
    installed->buffer = std::move(done->buffer);
    // A buffer holding only the blocks of some parts is not reused in place: a later fetch may
    // keep other parts (its unchanged blocks then come from the base).
    if (stays_intact(*installed->buffer) && selection_.everything()) {
      installed->buffer->held_blocks = installed->manifest.block_digests;
    }
  }
  const Manifest& m = installed->manifest;
  count([&, wanted = selection_.wanted_bytes()](ConsumerStats& s) {
    s.bytes_received += done_bytes;
    s.wanted_bytes = wanted;
  });
  rejections_in_a_row_ = 0;
  allocation_failures_ = 0;
  failures_in_a_row_ = 0;
  // A group member holds a version its group has not committed yet: the ack tells the producer
  // it is ready, and the group's commit makes it visible (on_group_announce).
  if (!options_.group.empty() && m.version > group_committed_) {
    const std::uint64_t version = m.version;
    if (newest_announced_ != version) {
      // The group's target moved while this member fetched it: the producer gave it up (the
      // announcement that moved it said so), or this member joined again. The ack still ends the
      // fetch there, and the buffer is free for the next target.
      send_ack(installed->manifest, done->fetch_id, true, {});
      return;
    }
    prepared_host_ = host_copy_kept(std::move(landed), installed->manifest);
    prepared_ = std::move(installed);
    count([&](ConsumerStats& s) { s.prepared_version = version; });
    log_.debug("version {} verified; waiting for group '{}' to commit it", version, options_.group);
    send_ack(prepared_->manifest, done->fetch_id, true, {});
    return;
  }
  if (landed) keep_landed_host(std::move(landed), installed->manifest);
  make_visible(installed);
  // Acked before on_update: whoever the callback tells finds the producer told already.
  send_ack(installed->manifest, done->fetch_id, true, {});
  if (options_.on_update) options_.on_update(ModelView(installed));
}

void ConsumerService::make_visible(std::shared_ptr<detail::InstalledVersion> installed) {
  installed->update_latency = since_realtime(installed->manifest.publish_time_ns);
  const Manifest& m = installed->manifest;
  // Stats first: a reader woken by the install sees them already counted.
  count([&](ConsumerStats& s) {
    s.current_version = m.version;
    s.versions_installed++;
    s.last_update_latency = installed->update_latency;
  });
  store_.install(installed);
  log_.debug("installed version {} (step {})", m.version, m.step);
  if (hooks_.on_installed) hooks_.on_installed(installed);
  // The next version most likely has this one's size: its buffers are made while none arrives
  // (now that the version before is no longer the one readers see, and may be free).
  store_.allocate_ahead(m.total_bytes, policy_.limits.max_total_bytes);
  if (installed->shaped_memory) target_->allocate_ahead(installed->shaped_memory->size());
}

// Before the producer hears the leave, which makes it close its end: over TCP a receive already
// matched to a send, whose bytes are streaming in, then never ends, and releasing its buffer
// waited UcxOptions::release_timeout (5 s) and gave the worker up (seen whenever a consumer
// stopped mid-fetch on a loaded machine). While the producer still sends, such a receive ends
// within the time its bytes take; cancelled ones end at once.
void ConsumerService::finish_abandoned_receives() {
  const auto deadline = Clock::now() + options_.producer_timeout;
  // Not for those already taken never to end (set_aside_stuck_receives): they made no progress
  // for transfer_timeout.
  while (fetch_.draining_holds_buffers()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left <= std::chrono::milliseconds(0)) {
      log_.warn("closing with receives of an abandoned transfer still under way after {} ms",
                options_.producer_timeout.count());
      return;
    }
    zmq::pollitem_t item{nullptr, events_->fd(), ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::min(left, tick()));
    for (auto& event : events_->drain()) {
      if (auto* chunk = std::get_if<ChunkDone>(&event)) guarded([&] { on_chunk(*chunk); });
      if (auto* sent = std::get_if<RelaySent>(&event)) guarded([&] { on_relay_sent(*sent); });
    }
  }
}

std::optional<std::pair<Manifest, std::uint64_t>> ConsumerService::abandon_fetch(const std::string& why, bool counted) {
  if (!fetch_.in_flight()) return std::nullopt;
  if (landing_) landing_->abandon();  // before the host buffer can go back to the store
  auto abandoned = fetch_.abort();
  count_arrival();
  // Before an answer (no manifest yet), the version asked for.
  const std::uint64_t version = abandoned ? abandoned->first.version : asked_for_;
  const std::string said = "discarded the transfer" +
                           (version != 0 ? " of version " + std::to_string(version) : std::string()) + ": " + why;
  log_.warn("{}", said);
  // In last_error too: a consumer whose every transfer ends so showed nothing wrong but a count.
  if (counted) {
    count([&](ConsumerStats& s) {
      s.transfers_aborted++;
      s.last_error = said;
    });
  }
  return abandoned;
}

// Counts one more in `in_a_row` (at most 16, so the shift stays defined) and, past its first
// `free_tries`, holds the next fetch back: from one tick, doubling, to kMaxRejectBackoff.
void ConsumerService::back_off(unsigned& in_a_row, unsigned free_tries) {
  in_a_row = std::min(in_a_row + 1, 16u);
  if (in_a_row <= free_tries) return;
  retry_fetch_after_ =
      Clock::now() + std::min<Clock::duration>(tick() * (1u << (in_a_row - 1 - free_tries)), kMaxRejectBackoff);
}

// Counted and reported before the ack: the ack is what the outside world sees first.
// What is remembered is the version we asked for: a producer that answers with a manifest of
// another version (rogue, or a relay that mixes models) would otherwise be asked again at once,
// for ever. Rejections in a row back off, doubling from one tick to kMaxRejectBackoff.
void ConsumerService::reject(const Manifest& manifest, std::uint64_t fetch_id, const Error& error) {
  allocation_failures_ = 0;  // a try that ended otherwise breaks the row (retry_later's own keeps it)
  rejected_.insert(asked_for_);
  while (rejected_.size() > kMaxRemembered) rejected_.erase(rejected_.begin());
  back_off(rejections_in_a_row_, /*free_tries=*/0);
  fetch_.forget();
  // One update, so a reader that sees the count sees why.
  count([&](ConsumerStats& s) {
    s.versions_rejected++;
    s.last_error = error.what();
  });
  report(error);
  send_ack(manifest, fetch_id, false, error.what());
}

// Memory this consumer could not have now (its receive buffer, its device landing): no verdict
// on the version, which is asked for again after a backoff. Rejected, it was never fetched again
// (and in a group, every member lost it), for one failed allocation.
void ConsumerService::retry_later(const Manifest& manifest, std::uint64_t fetch_id, const Error& error) {
  // Memory that never comes (a model too large for the device, a memlock limit on pinning) would
  // cost a whole transfer every few seconds for good: once kMaxAllocationTries tries in a row
  // (of any versions: a producer that keeps publishing asks for a new one each time) found
  // none, each version that finds none is rejected, until a try ends otherwise (an install,
  // another failure).
  allocation_failures_ = std::min(allocation_failures_ + 1, kMaxAllocationTries);
  if (allocation_failures_ >= kMaxAllocationTries) {
    if (landing_) landing_->abandon();
    reject(manifest, fetch_id,
           Error(error.code(), std::string(error.what()) + " (" + std::to_string(kMaxAllocationTries) +
                                   " or more tries in a row found no memory)"));
    allocation_failures_ = kMaxAllocationTries;  // reject() starts a new count for other rejections
    return;
  }
  if (landing_) landing_->abandon();
  fetch_.forget();
  back_off(failures_in_a_row_, /*free_tries=*/0);
  count([&](ConsumerStats& s) { s.last_error = error.what(); });
  report(Error(error.code(), std::string(error.what()) + "; version " + std::to_string(manifest.version) +
                                 " is fetched again"));
  send_ack(manifest, fetch_id, false, error.what(), protocol::RelayFault::kNone, /*again=*/true);
}

void ConsumerService::send_ack(const Manifest& manifest, std::uint64_t fetch_id, bool ok, const std::string& error,
                               protocol::RelayFault relay_fault, bool again) {
  link_.send(protocol::Ack{link_.incarnation(), manifest.version, fetch_id, ok, error, relay_fault, again,
                          !ok && fetch_id != 0 && fetch_id == discarded_fetch_});
}

}  // namespace modelcast::consumer
