// Producer: see include/modelcast/producer.h.
//
// Threads and what they own:
//  - the caller's thread (the trainer) runs register/prepare/publish: it copies tensors into a
//    reserved slot and hands the slot to the service thread through `events_`.
//  - the service thread owns the ZeroMQ sockets (ROUTER for join/fetch/ack, PUB for
//    announcements), the consumer records and the fetches in flight; it announces new
//    snapshots, starts transfers and expires leases.
//  - the digest thread hashes each new snapshot while it is already being sent; an internal
//    lease keeps the slot from reuse until it is done, and the digests follow the manifest.
//  - the transport's progress thread runs transfer completions, which only push events.
// `mutex_` guards what the caller and the service thread share: the slot pool, the manifests of
// published slots and the stats. Slot memory is written only by the caller while the slot is
// reserved (no lease can reach it) and only read once published.
#include "modelcast/producer.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <unistd.h>
#include <variant>

#include <zmq.hpp>

#include "core/digest.h"
#include "core/host_identity.h"
#include "core/host_buffer.h"
#include "core/log.h"
#include "core/manifest.h"
#include "core/protocol.h"
#include "core/security/curve.h"
#include "core/security/manifest_signature.h"
#include "core/slot_pool.h"
#include "core/snapshot_copy.h"
#include "core/wakeup.h"
#include "core/zmq_util.h"
#include "modelcast/error.h"
#include "transports/ucx/ucx_transport.h"

namespace modelcast {
namespace {

using Clock = std::chrono::steady_clock;

std::int64_t realtime_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::uint64_t random_incarnation() {
  std::random_device device;
  std::uint64_t value = (std::uint64_t{device()} << 32) ^ device();
  return value == 0 ? 1 : value;
}

struct Slot {
  HostBuffer memory;
  std::unique_ptr<transport::MemoryRegion> region;
  Manifest manifest;                 // valid once published; digests once digests_ready
  Clock::time_point published_at{};  // steady time of the publish() call
  bool digests_ready = true;
  std::uint64_t digest_lease = 0;    // pins the slot while the digest thread reads it
  std::vector<std::byte> signature;  // of the manifest, once digests_ready, when signing
};

// Leases have an expiry; the digest thread's pin needs none within any run's lifetime.
constexpr auto kPinDuration = std::chrono::hours(24 * 365);
const std::string kDigestHolder = "(digest thread)";

// Consumers check the same floor (see consumer.cpp): smaller chunks cost them a receive each.
constexpr std::size_t kMinChunkBytes = 64u << 10;

const protocol::DecodeLimits kRequestLimits = [] {
  protocol::DecodeLimits limits;
  limits.max_message_bytes = 256u << 10;
  return limits;
}();

// Events for the service thread.
// publish() has a slot and a version number and is about to copy: announce it now, so the
// notification does not wait for the copy. Fetches for it wait until SnapshotTaken.
struct SnapshotStarted {
  std::uint64_t version;
  std::int64_t step;
  std::int64_t publish_time_ns;
};
struct SnapshotTaken {
  std::size_t slot;
  Manifest manifest;  // digests not yet filled in
  Clock::time_point called_at;
};
struct SendDone {
  std::string consumer;  // routing id
  std::uint64_t fetch_id;
  bool ok;
  std::string error;
};
struct PeerFailed {
  transport::PeerId peer;
  std::string error;
};
struct DigestsReady {
  std::size_t slot;
  std::uint64_t version;
  std::vector<std::uint64_t> digests;
};
struct Stop {};
using Event = std::variant<SnapshotStarted, SnapshotTaken, SendDone, PeerFailed, DigestsReady, Stop>;

struct DigestJob {
  std::size_t slot;
  std::uint64_t version;
};

struct Fetch {
  std::uint64_t lease_id = 0;
  std::uint64_t version = 0;
  bool awaiting_digests = false;  // answered before the digests existed
  std::size_t bytes = 0;
  std::vector<transport::TransferId> transfers;
  std::size_t pending = 0;
  bool failed = false;
};

// A consumer is its connection (the ROUTER's routing id, unique per live connection), never its
// name: names are chosen by the peer and two consumers may share one.
struct ConsumerRecord {
  std::string name;        // for logs and Delivery reports only
  std::string routing_id;
  std::uint64_t session = 0;
  std::string key;         // CurveZMQ key of an authenticated connection, else empty
  transport::PeerId peer = 0;
  Clock::time_point last_seen{};
  std::map<std::uint64_t, Fetch> fetches;  // by fetch id
};

}  // namespace

class Producer::Impl {
 public:
  explicit Impl(ProducerOptions options)
      : options_(std::move(options)),
        log_(log::get("producer")),
        incarnation_(random_incarnation()),
        pool_(options_.snapshot_slots),
        next_version_(options_.first_version),
        transport_(transport::make_ucx_transport()),
        router_(zmq_context_, zmq::socket_type::router),
        publisher_(zmq_context_, zmq::socket_type::pub) {
    if (options_.model_name.empty()) throw Error(ErrorCode::kInvalidArgument, "model_name is empty");
    if (options_.first_version == 0) throw Error(ErrorCode::kInvalidArgument, "first_version must be >= 1");
    if (options_.transfer_chunk_bytes < kMinChunkBytes) {
      throw Error(ErrorCode::kInvalidArgument, "transfer_chunk_bytes must be >= " + std::to_string(kMinChunkBytes) +
                                                   ", got " + std::to_string(options_.transfer_chunk_bytes));
    }
    if (options_.max_consumers == 0) throw Error(ErrorCode::kInvalidArgument, "max_consumers is 0");
    zmq_util::announce_bind_endpoint(options_.control_endpoint);  // rejects a bad scheme before binding
    set_up_security();
    router_.set(zmq::sockopt::linger, 0);
    router_.set(zmq::sockopt::router_mandatory, false);
    // Requests are small (a join carries a UCX address of a few KiB): a peer sending more is
    // disconnected by ZeroMQ before anything is decoded.
    router_.set(zmq::sockopt::maxmsgsize, static_cast<std::int64_t>(kRequestLimits.max_message_bytes));
    publisher_.set(zmq::sockopt::linger, 0);
    zmq_util::check_ipc_endpoint_free(options_.control_endpoint);
    zmq_util::check_ipc_endpoint_free(options_.control_endpoint + ".pub");
    try {
      router_.bind(zmq_util::bind_spelling(options_.control_endpoint));
      control_endpoint_ = zmq_util::bound_endpoint(router_);
      publisher_.bind(zmq_util::announce_bind_endpoint(control_endpoint_));
      announce_endpoint_ = zmq_util::bound_endpoint(publisher_);
    } catch (const zmq::error_t& e) {
      throw Error(ErrorCode::kTransport, "cannot bind '" + options_.control_endpoint + "': " + e.what());
    }
    slots_.resize(options_.snapshot_slots);
    log_->info("model '{}' serving on {} (announcements on {}), incarnation {:016x}", options_.model_name,
               control_endpoint_, announce_endpoint_, incarnation_);
    service_ = std::thread([this] { service_loop(); });
    digester_ = std::thread([this] { digest_loop(); });
  }

  ~Impl() {
    events_.push(Stop{});
    service_.join();
    {
      std::lock_guard lock(digest_mutex_);
      digest_stop_ = true;
    }
    digest_cv_.notify_all();
    digester_.join();
    // Slots' registrations go before the transport that made them; the transport goes while
    // events_ still exists, since its shutdown completes transfers whose callbacks push there.
    slots_.clear();
    transport_.reset();
  }

  // Keys, CurveZMQ and the ZAP handler; or the plaintext rule. Before any socket binds.
  void set_up_security() {
    if (!options_.key_file.empty()) {
      if (!options_.key.empty()) throw Error(ErrorCode::kInvalidArgument, "give key or key_file, not both");
      options_.key = load_key_pair(options_.key_file);
    }
    if (options_.key.empty()) {
      if (!zmq_util::is_local_endpoint(options_.control_endpoint) && !options_.allow_plaintext_remote) {
        throw Error(ErrorCode::kInvalidArgument,
                    "control endpoint '" + options_.control_endpoint +
                        "' is reachable from other hosts: give the producer a key (modelcast-keygen) or set "
                        "allow_plaintext_remote");
      }
      log_->warn("plaintext control plane on {}: any {} can join, and versions are unsigned", options_.control_endpoint,
                 zmq_util::is_local_endpoint(options_.control_endpoint) ? "local process" : "host that reaches it");
      return;
    }
    if (!options_.integrity) {
      throw Error(ErrorCode::kInvalidArgument, "a signing producer needs integrity on: the signature covers the digests");
    }
    if (options_.allowed_consumer_keys.empty() && !options_.allow_any_consumer) {
      throw Error(ErrorCode::kInvalidArgument,
                  "no consumer could join: list allowed_consumer_keys or set allow_any_consumer");
    }
    signer_ = std::make_unique<security::ManifestSigner>(options_.key);
    std::set<std::string> allowed(options_.allowed_consumer_keys.begin(), options_.allowed_consumer_keys.end());
    zap_ = std::make_unique<security::ZapHandler>(zmq_context_, allowed, options_.allow_any_consumer);
    security::make_curve_server(router_, signer_->secret());
    security::make_curve_server(publisher_, signer_->secret());
    log_->info("CurveZMQ control plane, versions signed by {}; {}", options_.key.public_key,
               options_.allow_any_consumer ? std::string("any consumer admitted")
                                           : std::to_string(allowed.size()) + " consumer keys admitted");
  }

  void register_tensor(const TensorRef& tensor) {
    std::lock_guard lock(mutex_);
    if (prepared_) {
      throw Error(ErrorCode::kState, "cannot register tensor '" + tensor.spec.name + "' after the first publish");
    }
    if (tensor.spec.memory != MemoryKind::kHost) {
      throw Error(ErrorCode::kInvalidArgument, "tensor '" + tensor.spec.name + "': device memory is not supported "
                                               "by this build; register host tensors");
    }
    if (tensor.data == nullptr && tensor.spec.size_bytes() != 0) {
      throw Error(ErrorCode::kInvalidArgument, "tensor '" + tensor.spec.name + "' has a null data pointer");
    }
    auto specs = registered_specs();
    specs.push_back(tensor.spec);
    plan_layout(specs, nullptr);  // validates name, dtype, shape and uniqueness; throws naming the tensor
    registered_.push_back(tensor);
  }

  void prepare() {
    std::lock_guard lock(mutex_);
    prepare_locked();
  }

  PublishTicket publish(std::int64_t step, const Metadata& metadata) {
    auto called_at = Clock::now();
    std::int64_t called_ns = realtime_ns();
    std::unique_lock lock(mutex_);
    prepare_locked();
    std::optional<std::size_t> slot;
    // Every slot but the newest is held by readers: wait for an ack or a lease to lapse.
    while (!(slot = pool_.reserve_for_write(Clock::now()))) {
      auto until = pool_.next_expiry().value_or(Clock::now() + options_.lease_timeout);
      slot_freed_.wait_until(lock, until);
    }
    Manifest manifest = layout_;
    manifest.version = next_version_++;
    manifest.step = step;
    manifest.publish_time_ns = called_ns;
    manifest.metadata = metadata;
    lock.unlock();
    events_.push(SnapshotStarted{manifest.version, step, called_ns});

    // The only work in the trainer's stall: one copy per tensor. Digests are taken later by the
    // digest thread from the slot, which nobody else touches until it is published.
    std::byte* base = slots_[*slot].memory.data();
    for (std::size_t i = 0; i < registered_.size(); ++i) {
      // An empty tensor may be registered with a null pointer, which memcpy must never see.
      if (manifest.tensors[i].size == 0) continue;
      snapshot_copy(base + manifest.tensors[i].offset, registered_[i].data, manifest.tensors[i].size,
                    manifest.total_bytes >= kStreamingSnapshotBytes);
    }
    auto stall = Clock::now() - called_at;

    PublishTicket ticket{manifest.version, step, stall, manifest.total_bytes};
    {
      std::lock_guard relock(mutex_);
      stats_.last_stall = stall;
      stats_.versions_published++;
    }
    events_.push(SnapshotTaken{*slot, std::move(manifest), called_at});
    return ticket;
  }

  bool wait_for_consumers(std::size_t count, std::chrono::milliseconds timeout) const {
    std::unique_lock lock(mutex_);
    return consumers_changed_.wait_for(lock, timeout, [&] { return stats_.consumers >= count; });
  }

  ProducerStats stats() const {
    std::lock_guard lock(mutex_);
    ProducerStats copy = stats_;
    auto pinned = std::count_if(slots_.begin(), slots_.end(), [](const Slot& slot) { return !slot.digests_ready; });
    copy.fetches_in_flight = pool_.active_leases() - static_cast<std::size_t>(pinned);
    copy.latest_version = pool_.newest_version();
    copy.transport = transport_->name();
    return copy;
  }

  std::string control_endpoint() const { return control_endpoint_; }

 private:
  std::vector<TensorSpec> registered_specs() const {
    std::vector<TensorSpec> specs;
    for (const auto& t : registered_) specs.push_back(t.spec);
    return specs;
  }

  void prepare_locked() {
    if (prepared_) return;
    if (registered_.empty()) throw Error(ErrorCode::kState, "publish with no tensors registered");
    layout_.model = options_.model_name;
    layout_.incarnation = incarnation_;
    layout_.integrity = options_.integrity;
    layout_.tensors = plan_layout(registered_specs(), &layout_.total_bytes);
    // The chunk index has kChunkBits bits of the tag: very large models get larger chunks.
    constexpr std::uint64_t kMaxChunks = std::uint64_t{1} << protocol::kChunkBits;
    chunk_bytes_ = std::max<std::uint64_t>(options_.transfer_chunk_bytes, (layout_.total_bytes + kMaxChunks - 1) / kMaxChunks);
    for (auto& slot : slots_) {
      slot.memory = HostBuffer(std::max<std::size_t>(layout_.total_bytes, 1));
      slot.region = transport_->register_memory(slot.memory.data(), slot.memory.size(), MemoryKind::kHost);
    }
    prepared_ = true;
    log_->info("prepared {} snapshot slots of {} bytes for {} tensors", slots_.size(), layout_.total_bytes,
               layout_.tensors.size());
  }

  // ---- service thread ------------------------------------------------------------------

  void service_loop() {
    auto next_heartbeat = Clock::now();
    for (;;) {
      auto now = Clock::now();
      if (now >= next_heartbeat) {
        announce();
        next_heartbeat = now + options_.heartbeat_interval;
      }
      auto wake = next_heartbeat;
      {
        std::lock_guard lock(mutex_);
        if (auto expiry = pool_.next_expiry()) wake = std::min(wake, *expiry);
      }
      auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(wake - Clock::now()).count();
      zmq::pollitem_t items[] = {{router_.handle(), 0, ZMQ_POLLIN, 0},
                                 {nullptr, events_.fd(), ZMQ_POLLIN, 0},
                                 {zap_ ? zap_->socket().handle() : nullptr, 0, ZMQ_POLLIN, 0}};
      zmq::poll(items, zap_ ? 3 : 2, std::chrono::milliseconds(std::max<long>(wait, 0) + 1));
      if (zap_ && (items[2].revents & ZMQ_POLLIN)) {
        for (const auto& key : zap_->answer_pending()) {
          log_->warn("refused a connection from key {} (CurveZMQ form): not on the allow-list", key);
          std::lock_guard lock(mutex_);
          stats_.refused_peers++;
        }
      }
      if (items[1].revents & ZMQ_POLLIN) {
        for (auto& event : events_.drain()) {
          if (std::holds_alternative<Stop>(event)) return;
          std::visit([this](auto& e) { on_event(e); }, event);
        }
      }
      if (items[0].revents & ZMQ_POLLIN) {
        while (auto parts = zmq_util::receive(router_)) on_request(*parts);
      }
      expire_leases();
      drop_silent_consumers();
    }
  }

  // Consumers ping at least every second; one silent this long has died or hung. (Across hosts
  // UCX usually reports it sooner; on one host this is how its record goes.)
  void drop_silent_consumers() {
    auto limit = std::max<Clock::duration>(options_.lease_timeout, std::chrono::seconds(5));
    auto now = Clock::now();
    for (auto it = consumers_.begin(); it != consumers_.end();) {
      auto next = std::next(it);
      if (now - it->second.last_seen > limit) {
        log_->warn("consumer '{}' silent for {} ms; dropping it", it->second.name,
                   std::chrono::duration_cast<std::chrono::milliseconds>(now - it->second.last_seen).count());
        drop_consumer(it);
      }
      it = next;
    }
  }

  // Heartbeat: the newest published version.
  void announce() {
    protocol::Announce message{incarnation_, 0, 0, 0};
    {
      std::lock_guard lock(mutex_);
      message.version = pool_.newest_version();
      if (auto slot = pool_.slot_of(message.version)) {
        message.step = slots_[*slot].manifest.step;
        message.publish_time_ns = slots_[*slot].manifest.publish_time_ns;
      }
    }
    zmq_util::send(publisher_, message, &options_.model_name);
  }

  void on_event(SnapshotStarted& e) {
    zmq_util::send(publisher_, protocol::Announce{incarnation_, e.version, e.step, e.publish_time_ns},
                   &options_.model_name);
    upcoming_version_ = e.version;
  }

  void on_event(SnapshotTaken& e) {
    // Already announced (SnapshotStarted). Fetches may start before the digests exist: the slot
    // is pinned until the digest thread is done, and the digests follow.
    std::uint64_t version = e.manifest.version;
    bool integrity = e.manifest.integrity;
    {
      std::lock_guard lock(mutex_);
      Slot& slot = slots_[e.slot];
      slot.manifest = std::move(e.manifest);
      slot.published_at = e.called_at;
      pool_.mark_published(e.slot, version);
      slot.digests_ready = !integrity;
      slot.signature.clear();
      slot.digest_lease = 0;
      if (integrity) slot.digest_lease = pool_.acquire_lease(version, kDigestHolder, Clock::now(), kPinDuration)->id;
    }
    if (integrity) {
      {
        std::lock_guard lock(digest_mutex_);
        digest_jobs_.push_back({e.slot, version});
      }
      digest_cv_.notify_one();
    }
    log_->debug("version {} published in slot {}", version, e.slot);
    if (upcoming_version_ == version) upcoming_version_ = 0;
    auto parked = std::move(parked_fetches_);
    parked_fetches_.clear();
    for (auto& [routing_id, request] : parked) on_fetch(routing_id, request);
  }

  void on_event(DigestsReady& e) {
    std::vector<std::byte> signature;
    {
      std::lock_guard lock(mutex_);
      Slot& slot = slots_[e.slot];
      for (std::size_t i = 0; i < e.digests.size(); ++i) slot.manifest.tensors[i].digest = e.digests[i];
      if (signer_) slot.signature = signer_->sign(slot.manifest);
      signature = slot.signature;
      slot.digests_ready = true;
      pool_.release_lease(slot.digest_lease);
      slot.digest_lease = 0;
      slot_freed_.notify_all();
    }
    for (auto& [name, consumer] : consumers_) {
      for (auto& [fetch_id, fetch] : consumer.fetches) {
        if (fetch.version != e.version || !fetch.awaiting_digests) continue;
        fetch.awaiting_digests = false;
        zmq_util::send(router_, protocol::Digests{fetch_id, e.version, e.digests, signature}, &consumer.routing_id);
      }
    }
  }

  // Digest thread: hashes pinned slots (nobody writes them) and hands the digests back.
  void digest_loop() {
    for (;;) {
      DigestJob job;
      {
        std::unique_lock lock(digest_mutex_);
        digest_cv_.wait(lock, [&] { return digest_stop_ || !digest_jobs_.empty(); });
        if (digest_stop_) return;
        job = digest_jobs_.front();
        digest_jobs_.pop_front();
      }
      const std::byte* base = slots_[job.slot].memory.data();
      std::vector<std::uint64_t> digests;
      digests.reserve(layout_.tensors.size());
      for (const auto& t : layout_.tensors) digests.push_back(digest_bytes(base + t.offset, t.size));
      events_.push(DigestsReady{job.slot, job.version, std::move(digests)});
    }
  }

  void on_event(SendDone& e) {
    auto it = consumers_.find(e.consumer);
    if (it == consumers_.end()) return;
    auto fetch = it->second.fetches.find(e.fetch_id);
    if (fetch == it->second.fetches.end()) return;
    if (!e.ok && !fetch->second.failed) {
      fetch->second.failed = true;
      log_->warn("sending version {} to '{}' failed: {}", fetch->second.version, e.consumer, e.error);
      std::lock_guard lock(mutex_);
      stats_.failed_deliveries++;
    }
    if (fetch->second.pending > 0) fetch->second.pending--;
  }

  void on_event(Stop&) {}  // handled by service_loop before dispatch

  void on_event(PeerFailed& e) {
    for (auto it = consumers_.begin(); it != consumers_.end(); ++it) {
      if (it->second.peer == e.peer) {
        log_->warn("consumer '{}' lost ({}); releasing its leases", it->second.name, e.error);
        drop_consumer(it);
        return;
      }
    }
  }

  void drop_consumer(std::map<std::string, ConsumerRecord>::iterator it) {
    for (auto& [id, fetch] : it->second.fetches) end_fetch(fetch);
    transport_->disconnect(it->second.peer);
    consumers_.erase(it);
    std::lock_guard lock(mutex_);
    stats_.consumers = consumers_.size();
  }

  void end_fetch(Fetch& fetch) {
    for (auto id : fetch.transfers) transport_->cancel(id);
    std::lock_guard lock(mutex_);
    pool_.release_lease(fetch.lease_id);
    slot_freed_.notify_all();
  }

  void expire_leases() {
    std::vector<SlotPool::Lease> expired;
    {
      std::lock_guard lock(mutex_);
      expired = pool_.take_expired(Clock::now());
      stats_.leases_expired += expired.size();
      if (!expired.empty()) slot_freed_.notify_all();
    }
    for (const auto& lease : expired) {
      auto it = consumers_.find(lease.holder);
      if (it == consumers_.end()) continue;
      log_->warn("lease of '{}' on version {} expired; its transfer is abandoned", it->second.name, lease.version);
      for (auto f = it->second.fetches.begin(); f != it->second.fetches.end();) {
        if (f->second.lease_id == lease.id) {
          for (auto id : f->second.transfers) transport_->cancel(id);
          f = it->second.fetches.erase(f);
        } else {
          ++f;
        }
      }
    }
  }

  void on_request(std::vector<zmq::message_t>& parts) {
    if (parts.size() != 2) {
      bad_message("request with " + std::to_string(parts.size()) + " frames (expected 2)");
      return;
    }
    std::string routing_id = parts[0].to_string();
    protocol::Message message;
    try {
      message = protocol::decode({static_cast<const std::byte*>(parts[1].data()), parts[1].size()}, kRequestLimits);
    } catch (const Error& e) {
      bad_message(e.what());
      return;
    }
    // Whatever a request makes go wrong costs that request only: the trainer keeps training.
    try {
      if (auto* consumer = find_by_routing_id(routing_id)) consumer->last_seen = Clock::now();
      if (auto* join = std::get_if<protocol::JoinRequest>(&message)) {
        on_join(routing_id, security::peer_key(parts[1]).value_or(""), *join);
      } else if (std::holds_alternative<protocol::Ping>(message)) {
        // last_seen is all a ping updates
      } else if (auto* fetch = std::get_if<protocol::FetchRequest>(&message)) {
        on_fetch(routing_id, *fetch);
      } else if (auto* ack = std::get_if<protocol::Ack>(&message)) {
        on_ack(routing_id, *ack);
      } else {
        bad_message("unexpected message type on the request channel");
      }
    } catch (const std::exception& e) {
      bad_message(std::string("request failed: ") + e.what());
    }
  }

  void bad_message(const std::string& what) {
    log_->warn("dropped a bad control message: {}", what);
    std::lock_guard lock(mutex_);
    stats_.bad_messages++;
  }

  ConsumerRecord* find_by_routing_id(const std::string& routing_id) {
    auto it = consumers_.find(routing_id);
    return it == consumers_.end() ? nullptr : &it->second;
  }

  void on_join(const std::string& routing_id, const std::string& key, const protocol::JoinRequest& join) {
    protocol::JoinReply reply;
    reply.incarnation = incarnation_;
    reply.announce_endpoint = announce_endpoint_;
    reply.transport = transport_->name();
    // The same connection joining again, or the same consumer object on a new connection
    // (its session is random and travels only inside its own connection), replaces its record.
    auto same_consumer = [&](const ConsumerRecord& r) {
      return r.routing_id == routing_id || (join.session != 0 && r.session == join.session && r.key == key);
    };
    if (join.model != options_.model_name) {
      reply.refusal = protocol::Refusal::kWrongModel;
      reply.error = "this producer serves model '" + options_.model_name + "', not '" + join.model + "'";
    } else if (join.consumer_name.empty()) {
      reply.refusal = protocol::Refusal::kBadRequest;
      reply.error = "consumer name is empty";
    } else if (std::none_of(consumers_.begin(), consumers_.end(), [&](const auto& c) { return same_consumer(c.second); }) &&
               consumers_.size() >= options_.max_consumers) {
      reply.refusal = protocol::Refusal::kFull;
      reply.error = "the producer serves " + std::to_string(options_.max_consumers) + " consumers already";
    } else {
      for (auto it = consumers_.begin(); it != consumers_.end();) {
        auto next = std::next(it);
        if (same_consumer(it->second)) drop_consumer(it);
        it = next;
      }
      try {
        ConsumerRecord record;
        record.name = join.consumer_name;
        record.routing_id = routing_id;
        record.session = join.session;
        record.key = key;
        record.last_seen = Clock::now();
        // On one machine UCX reaches shared memory only without peer-failure detection; a
        // consumer that dies there is noticed through its lease instead.
        bool same_host = !join.host_id.empty() && join.host_id == host_id_;
        bool detect_failure = !(same_host && ucx_shared_memory_allowed());
        record.peer = transport_->connect(join.transport_address, detect_failure,
                                          [this](transport::PeerId peer, const std::string& error) {
                                            events_.push(PeerFailed{peer, error});
                                          });
        consumers_.emplace(routing_id, std::move(record));
        reply.ok = true;
        log_->info("consumer '{}' joined", join.consumer_name);
      } catch (const Error& e) {
        reply.refusal = protocol::Refusal::kBadRequest;
        reply.error = std::string("cannot reach the consumer's transport address: ") + e.what();
      }
    }
    {
      std::lock_guard lock(mutex_);
      reply.latest_version = pool_.newest_version();
      stats_.consumers = consumers_.size();
    }
    consumers_changed_.notify_all();
    if (!reply.ok) log_->warn("refused a join: {}", reply.error);
    zmq_util::send(router_, reply, &routing_id);
  }

  void on_fetch(const std::string& routing_id, const protocol::FetchRequest& request) {
    // Announced but still being copied: answer once it is published (the copy cannot fail).
    if (upcoming_version_ != 0 && request.incarnation == incarnation_ &&
        (request.version == upcoming_version_ || request.version == 0)) {
      parked_fetches_[routing_id] = request;  // one per connection: a flood parks nothing more
      return;
    }
    protocol::FetchReply reply;
    reply.fetch_id = request.fetch_id;
    ConsumerRecord* consumer = find_by_routing_id(routing_id);
    auto refuse = [&](protocol::Refusal refusal, std::string why) {
      reply.refusal = refusal;
      reply.error = std::move(why);
    };
    if (!consumer) {
      refuse(protocol::Refusal::kNotJoined, "not joined");
    } else if (request.incarnation != incarnation_) {
      refuse(protocol::Refusal::kStaleIncarnation, "stale producer incarnation; join again");
    } else if (!consumer->fetches.empty()) {
      // One lease per consumer: a client re-fetching in a loop pins at most one slot, and
      // only until its lease lapses, so publish() never waits on it for longer than that.
      refuse(protocol::Refusal::kBusy, "a fetch of this consumer is still in flight");
    }
    std::optional<SlotPool::Lease> lease;
    std::size_t slot = 0;
    if (reply.error.empty()) {
      std::lock_guard lock(mutex_);
      if (request.version != 0 && request.version != pool_.newest_version()) {
        // Only the newest version is served: older slots are what publish() writes next.
        refuse(protocol::Refusal::kNotHeld, "version " + std::to_string(request.version) +
                                                " is superseded; the newest is " +
                                                std::to_string(pool_.newest_version()));
      } else if (!(lease = pool_.acquire_lease(request.version, routing_id, Clock::now(), options_.lease_timeout))) {
        refuse(request.version == 0 ? protocol::Refusal::kNothingPublished : protocol::Refusal::kNotHeld,
               request.version == 0 ? "nothing published yet"
                                    : "version " + std::to_string(request.version) + " is no longer held");
      } else {
        slot = lease->slot;
        reply.manifest = slots_[slot].manifest;
        reply.digests_pending = !slots_[slot].digests_ready;
        if (!reply.digests_pending) reply.signature = slots_[slot].signature;
      }
    }
    if (!reply.error.empty()) {
      zmq_util::send(router_, reply, &routing_id);
      return;
    }
    reply.ok = true;
    reply.chunk_bytes = chunk_bytes_;
    zmq_util::send(router_, reply, &routing_id);

    Fetch fetch;
    fetch.lease_id = lease->id;
    fetch.version = lease->version;
    fetch.awaiting_digests = reply.digests_pending;
    fetch.bytes = reply.manifest.total_bytes;
    std::size_t total = reply.manifest.total_bytes;
    std::size_t chunks = (total + reply.chunk_bytes - 1) / reply.chunk_bytes;
    fetch.pending = chunks;
    std::string name = consumer->routing_id;
    for (std::size_t i = 0; i < chunks; ++i) {
      std::size_t offset = i * reply.chunk_bytes;
      std::size_t length = std::min<std::size_t>(reply.chunk_bytes, total - offset);
      std::uint64_t fetch_id = request.fetch_id;
      fetch.transfers.push_back(transport_->post_send(
          consumer->peer, *slots_[slot].region, offset, length, protocol::chunk_tag(fetch_id, i),
          [this, name, fetch_id](const transport::TransferResult& r) {
            events_.push(SendDone{name, fetch_id, r.ok, r.error});
          }));
    }
    consumer->fetches.emplace(request.fetch_id, std::move(fetch));
  }

  void on_ack(const std::string& routing_id, const protocol::Ack& ack) {
    ConsumerRecord* consumer = find_by_routing_id(routing_id);
    if (!consumer || ack.incarnation != incarnation_) return;
    auto it = consumer->fetches.find(ack.fetch_id);
    if (it == consumer->fetches.end()) return;
    Fetch fetch = std::move(it->second);
    consumer->fetches.erase(it);
    Delivery delivery;
    {
      std::lock_guard lock(mutex_);
      pool_.release_lease(fetch.lease_id);
      slot_freed_.notify_all();
      if (ack.ok) {
        stats_.deliveries++;
        stats_.bytes_sent += fetch.bytes;
        if (auto slot = pool_.slot_of(fetch.version)) {
          delivery.since_publish = Clock::now() - slots_[*slot].published_at;
        }
      } else {
        stats_.failed_deliveries++;
      }
    }
    if (!ack.ok) {
      log_->warn("consumer '{}' rejected version {}: {}", consumer->name, ack.version, ack.error);
      for (auto id : fetch.transfers) transport_->cancel(id);
      return;
    }
    delivery.version = fetch.version;
    delivery.consumer = consumer->name;
    delivery.bytes = fetch.bytes;
    if (options_.on_delivery) options_.on_delivery(delivery);
  }

  ProducerOptions options_;
  std::shared_ptr<spdlog::logger> log_;
  const std::uint64_t incarnation_;
  const std::string host_id_ = host_id();

  mutable std::mutex mutex_;
  mutable std::condition_variable slot_freed_;
  mutable std::condition_variable consumers_changed_;
  SlotPool pool_;                      // guarded by mutex_
  ProducerStats stats_;                // guarded by mutex_
  bool prepared_ = false;              // guarded by mutex_
  std::vector<TensorRef> registered_;  // guarded by mutex_ until prepared, then immutable
  Manifest layout_;                    // immutable once prepared
  std::uint64_t chunk_bytes_ = 0;      // immutable once prepared
  std::uint64_t next_version_;         // publishing thread only
  std::vector<Slot> slots_;            // memory: see the file comment; manifest: mutex_

  std::unique_ptr<transport::Transport> transport_;
  EventQueue<Event> events_;

  // Service thread only:
  zmq::context_t zmq_context_;
  std::unique_ptr<security::ManifestSigner> signer_;  // null without a key; immutable after construction
  std::unique_ptr<security::ZapHandler> zap_;         // service thread; null without a key
  zmq::socket_t router_;
  zmq::socket_t publisher_;
  std::string control_endpoint_;
  std::string announce_endpoint_;
  std::map<std::string, ConsumerRecord> consumers_;  // by routing id
  std::uint64_t upcoming_version_ = 0;  // announced, snapshot copy not finished
  std::map<std::string, protocol::FetchRequest> parked_fetches_;  // by routing id
  std::thread service_;

  // Digest thread's queue.
  std::mutex digest_mutex_;
  std::condition_variable digest_cv_;
  std::deque<DigestJob> digest_jobs_;
  bool digest_stop_ = false;
  std::thread digester_;
};

Producer::Producer(ProducerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
Producer::~Producer() = default;
void Producer::register_tensor(const TensorRef& tensor) { impl_->register_tensor(tensor); }
void Producer::register_tensors(std::span<const TensorRef> tensors) {
  for (const auto& t : tensors) impl_->register_tensor(t);
}
void Producer::prepare() { impl_->prepare(); }
PublishTicket Producer::publish(std::int64_t step, const Metadata& metadata) { return impl_->publish(step, metadata); }
bool Producer::wait_for_consumers(std::size_t count, std::chrono::milliseconds timeout) const {
  return impl_->wait_for_consumers(count, timeout);
}
ProducerStats Producer::stats() const { return impl_->stats(); }
std::string Producer::control_endpoint() const { return impl_->control_endpoint(); }

}  // namespace modelcast
