// Producer: see include/modelcast/producer.h. A version's way out, one stage per file:
//   publish() (this file)          reserve a slot, copy the tensors: the trainer's whole stall
//   copy_changed_blocks            or, while little changes, hash them and copy what changed
//   SnapshotStore                  slots, leases, manifests and signatures
//   DigestWorker                   XXH3 per block while the version is already being sent
//   DeviceSnapshots                device tensors: copies into a device slot, then staged to the
//                                  host slot (pmix64 digest on the device) on a thread of its own
//   ProducerService                the service loop: the only place that sends messages
//   Membership                     who joined; joins decided, silent consumers found
//   FetchServer                    fetches decided, slots leased, chunk sends posted, acks
//   ControlPlane                   the ZeroMQ sockets and their security
//   Persister                      checkpoints on disk from a pinned slot, off the hot path
//
// Threads and what they own:
//  - the caller's thread (the trainer) registers tensors and runs publish(): it copies into a
//    reserved slot and hands the slot to the service thread as an event.
//  - the service thread (ProducerService::run) owns the control plane, membership and fetches.
//  - the digest thread hashes each new snapshot; the slot stays pinned until it is done. When
//    publish() hashes the tensors itself (copy_changed_blocks), the digest thread takes a share
//    of the blocks; publish() returns only once every block is done.
//  - with device tensors, the staging thread digests each version on the device and hands it to
//    the service thread (readable from the device slot from then on), then copies it to the
//    host slot and says so (two-sided sends wait for that; the slot stays pinned until then).
//  - the transport's progress thread runs transfer completions, which only push events.
//  - with options.persist, the persist writer thread writes pinned slots to disk (Persister).
// `mutex_` guards the registration; StatsBox and SnapshotStore guard their own state.
#include "modelcast/producer.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "common/clock.h"
#include "common/contained_callback.h"
#include "common/duration_option.h"
#include "common/library_thread.h"
#include "core/producer/open_file_limit.h"
#include "common/log.h"
#include "common/shown_text.h"
#include "core/layout/box.h"
#include "core/model/manifest.h"
#include "core/producer/control_plane.h"
#include "core/wire/manifest_codec.h"
#include "core/wire/connect_host.h"
#include "core/wire/protocol.h"
#include "core/wire/zmq_channel.h"
#include "device/device_runtime.h"
#include "core/producer/changed_blocks_copy.h"
#include "core/producer/device_snapshots.h"
#include "core/producer/digest_worker.h"
#include "core/producer/persister.h"
#include "core/producer/service.h"
#include "core/producer/snapshot_copy.h"
#include "core/producer/snapshot_store.h"
#include "core/transfer/chunk_plan.h"
#include "modelcast/error.h"
#include "transports/transport_set.h"

namespace modelcast {
namespace {

using Clock = std::chrono::steady_clock;

std::uint64_t random_incarnation() {
  std::random_device device;
  std::uint64_t value = (std::uint64_t{device()} << 32) ^ device();
  return value == 0 ? 1 : value;
}

// Each slot is a full copy of the model; more than this is a mistake, not a configuration.
constexpr std::size_t kMaxSnapshotSlots = 64;

// The options' own bounds, checked before anything is built from them (a slot count or a chunk
// size sizes allocations): Error(kInvalidArgument) naming the option and its value.
ProducerOptions checked(ProducerOptions options) {
  auto invalid = [](const std::string& message) { throw Error(ErrorCode::kInvalidArgument, message); };
  if (options.model_name.empty()) invalid("model_name is empty");
  if (auto why = name_problem(options.model_name)) invalid("model_name " + *why);
  // 2^64 - 1 is never published (the count cannot go past it), so it cannot be the first either.
  if (options.first_version == 0 || options.first_version == std::numeric_limits<std::uint64_t>::max())
    invalid("first_version must be 1 to 2^64 - 2, got " + std::to_string(options.first_version));
  if (options.snapshot_slots > kMaxSnapshotSlots) {
    invalid("snapshot_slots must be <= " + std::to_string(kMaxSnapshotSlots) + " (each is a copy of the model), got " +
            std::to_string(options.snapshot_slots));
  }
  for (auto [name, value] : {std::pair{"transfer_chunk_bytes", options.transfer_chunk_bytes},
                             std::pair{"device_stage_bytes", options.device_stage_bytes}}) {
    if (value < transfer::kMinChunkBytes || value > transfer::kMaxChunkBytes) {
      invalid(std::string(name) + " must be between " + std::to_string(transfer::kMinChunkBytes) + " and " +
              std::to_string(transfer::kMaxChunkBytes) + ", got " + std::to_string(value));
    }
  }
  check_duration_option("lease_timeout", options.lease_timeout);
  check_duration_option("heartbeat_interval", options.heartbeat_interval);
  if (options.max_consumers == 0) invalid("max_consumers is 0");
  if (options.rank_count == 0 || options.rank >= options.rank_count) {
    invalid("rank " + std::to_string(options.rank) + " of rank_count " + std::to_string(options.rank_count));
  }
  if (options.rank_count > protocol::kMaxRanks) {
    invalid("rank_count " + std::to_string(options.rank_count) + " is more than the " + std::to_string(protocol::kMaxRanks) +
            " ranks a consumer takes");
  }
  if (options.rank == 0 && options.rank_count > 1 && options.rank_endpoints.size() != options.rank_count) {
    invalid("rank 0 of " + std::to_string(options.rank_count) + " needs rank_endpoints, one per rank; got " +
            std::to_string(options.rank_endpoints.size()));
  }
  if (!options.run_id.empty()) {
    if (auto why = name_problem(options.run_id)) invalid("run_id " + shown_text(options.run_id) + " " + *why);
  }
  // With rank_count 1 extra entries were ignored without a word (a world size passed wrongly);
  // one entry, the rank's own (an all_gather of one), is fine.
  if (options.rank_count == 1 && options.rank_endpoints.size() > 1) {
    invalid("rank_endpoints has " + std::to_string(options.rank_endpoints.size()) +
            " entries, but rank_count is 1 (one per rank, in rank order)");
  }
  // Every consumer connects to these and would refuse a malformed one, each on its own and
  // late: refused here, where the trainer can still fix it. Rank 0's own entry is not read.
  for (std::size_t r = 1; r < options.rank_endpoints.size(); ++r) {
    const std::string& e = options.rank_endpoints[r];
    const std::string what = "rank_endpoints[" + std::to_string(r) + "]";
    if (e.size() > protocol::kShownPeerTextBytes || printable_text(e, e.size(), Backslash::kKept) != e)
      invalid(what + " " + shown_text(e) + " holds control or non-ASCII characters, or is over " +
              std::to_string(protocol::kShownPeerTextBytes) + " bytes");
    if (e.rfind("tcp://", 0) != 0 && e.rfind("ipc://", 0) != 0)
      invalid(what + " " + shown_text(e) + " must start with tcp:// or ipc:// (rank " + std::to_string(r) + "'s control endpoint)");
    wire::check_tcp_port(e, what, false);
    // Consumers connect there: a wildcard (tcp://*, 0.0.0.0, [::]: what a rank bound to all
    // interfaces reports as its control_endpoint()) is an address to bind, not one to reach.
    // Each consumer refused it on its own and stayed without a model; refused here, once, by the
    // rule consumers apply.
    if (auto problem = wire::connect_host_problem(e))
      invalid(what + ": " + *problem + "; give the address consumers reach rank " + std::to_string(r) +
              " at (a rank bound to all interfaces reports the wildcard: put its host's address in its place)");
    // Two ranks at one endpoint: consumers would take the same rank's pieces twice and miss the other's.
    for (std::size_t earlier = 0; earlier < r; ++earlier) {
      if (options.rank_endpoints[earlier] == e)
        invalid(what + " and rank_endpoints[" + std::to_string(earlier) + "] are both " + shown_text(e) +
                "; each rank has a control endpoint of its own");
    }
  }
  if (options.rank != 0 && !options.rank_endpoints.empty()) {
    invalid("rank_endpoints are rank 0's to tell consumers; rank " + std::to_string(options.rank) + " was given them");
  }
  if (options.relay_fanout > 0 && !options.integrity) {
    invalid("relay_fanout needs integrity: relayed blocks are checked against the signed block digests");
  }
  return options;
}

// The user's callbacks run on the service and writer threads: what they throw must not end the
// trainer.
ProducerOptions with_contained_callbacks(ProducerOptions options) {
  const auto log = log::get("producer");
  options.on_delivery = contained(std::move(options.on_delivery), "on_delivery", log);
  options.persist.on_persisted = contained(std::move(options.persist.on_persisted), "persist.on_persisted", log);
  options.persist.on_persist_failed =
      contained(std::move(options.persist.on_persist_failed), "persist.on_persist_failed", log);
  return options;
}

}  // namespace

class Producer::Impl {
 public:
  explicit Impl(ProducerOptions options)
      : options_(with_contained_callbacks(checked(std::move(options)))),
        log_(log::get("producer")),
        incarnation_(random_incarnation()),
        started_ns_(realtime_ns()),
        next_version_(options_.first_version),
        store_(options_.snapshot_slots) {
    producer::raise_open_file_limit(*log_);  // before UCX's setup, which needs descriptors of its own
    transports_ = std::make_unique<transport::TransportSet>(options_.transports, transport::Side::kProducer);
    if (!options_.persist.directory.empty()) {
      persister_ = std::make_unique<producer::Persister>(options_, incarnation_, store_, stats_, log_);
    }
    control_ = std::make_unique<producer::ControlPlane>(options_, *log_);
    service_ = std::make_unique<producer::ProducerService>(options_, incarnation_, store_, *transports_, *control_,
                                                           stats_, log_);
    digests_ = std::make_unique<producer::DigestWorker>(
        [events = &service_->events()](std::size_t slot, std::uint64_t version, std::vector<std::uint64_t> blocks) {
          events->push(producer::DigestsReady{slot, version, {}, std::move(blocks)});
        });
    service_->set_digest_submit([this](std::size_t slot, std::uint64_t version) {
      digests_->submit(slot, version, store_.memory(slot), layout_);
    });
    // Called on the service thread, only for a version publish() staged, so after prepare()
    // set device_ (publish -> staging thread -> event queue -> service thread).
    service_->set_host_copy([this](std::size_t slot, std::uint64_t version) { device_->copy_to_host(slot, version); });
    if (persister_) service_->set_persist([p = persister_.get()](std::uint64_t version) { p->consider(version); });
    log_->info("model '{}' serving on {}, incarnation {:016x}", options_.model_name, control_->endpoint(),
               incarnation_);
    thread_ = library_thread("producer service", [this] { service_->run(); });
  }

  ~Impl() {
    // From on_delivery, on the service thread, which cannot join itself: said, not left to
    // std::thread::join's "Resource deadlock avoided".
    if (std::this_thread::get_id() == thread_.get_id()) {
      std::fprintf(stderr, "modelcast: a Producer was destroyed from its own service thread: on_delivery must not "
                           "destroy its Producer\n");
      std::abort();
    }
    stats_.cancel_waits();  // first: a wait on the service thread (a callback's) would hold its join
    service_->events().push(producer::Stop{});
    thread_.join();
    // The service thread, its only user, has ended: closed now, its last word (Announce::stopping)
    // goes out and consumers see the connection close at once, not after the teardown below
    // (seconds, with transfers in flight), during which their next join would meet a bound
    // endpoint that no longer answers (with keys, a handshake that fails).
    control_.reset();
    digests_.reset();
    if (device_) device_->stop();  // no staging after this; its device slots stay until below
    persister_.reset();  // unpins its slot: before the slots go
    // Registrations go before the transport that made them; the transport goes while the
    // service (its event queue, its fetches) still exists, since its shutdown completes
    // transfers whose callbacks push there.
    store_.clear();
    transports_.reset();
    device_.reset();  // device slots last: registrations and sends that used them are gone
  }

  // ---- the trainer's thread ------------------------------------------------------------

  void register_tensor(const TensorRef& tensor) {
    std::lock_guard lock(mutex_);
    register_locked(tensor);
  }

  // All or none: a refused tensor leaves none of the list registered.
  void register_tensors(std::span<const TensorRef> tensors) {
    std::lock_guard lock(mutex_);
    const std::size_t registered = registered_.size();
    const std::uint64_t planned = planned_bytes_;
    const std::size_t manifest_bytes = manifest_tensor_bytes_;
    try {
      for (const auto& t : tensors) register_locked(t);
    } catch (...) {
      for (std::size_t i = registered; i < registered_.size(); ++i) names_.erase(registered_[i].spec.name);
      registered_.resize(registered);
      planned_bytes_ = planned;
      manifest_tensor_bytes_ = manifest_bytes;
      throw;
    }
  }

  void register_locked(const TensorRef& tensor) {
    const TensorSpec& spec = tensor.spec;
    if (prepared_) {
      throw Error(ErrorCode::kState, "cannot register tensor '" + spec.name + "' after prepare() or the first publish");
    }
    if (tensor.data == nullptr && spec.size_bytes() != 0) {
      throw Error(ErrorCode::kInvalidArgument, "tensor '" + spec.name + "' has a null data pointer");
    }
    // One tensor at a time (a model has thousands): its own checks, then the running name set
    // and size, rather than re-planning every tensor registered so far.
    std::uint64_t size = 0;
    plan_layout({spec}, &size);  // validates name, dtype and shape; throws naming the tensor
    if (names_.count(spec.name)) {
      throw Error(ErrorCode::kInvalidArgument, "duplicate tensor name '" + spec.name + "'");
    }
    std::uint64_t total = 0;
    if (__builtin_add_overflow(planned_bytes_, size, &total)) {
      throw Error(ErrorCode::kInvalidArgument, "tensor '" + spec.name + "' takes the model past 2^64 bytes");
    }
    // What every consumer would refuse in the manifest, refused here, at the call that went past it.
    const ManifestLimits limits;
    if (registered_.size() + 1 > limits.max_tensors) {
      throw Error(ErrorCode::kInvalidArgument, "tensor '" + spec.name + "' would be tensor " +
                                                   std::to_string(registered_.size() + 1) + "; consumers take at most " +
                                                   std::to_string(limits.max_tensors) + " tensors");
    }
    if (total > limits.max_total_bytes) {
      throw Error(ErrorCode::kInvalidArgument, "tensor '" + spec.name + "' takes the snapshot to " + std::to_string(total) +
                                                   " bytes (the tensors and their 256-byte alignment); consumers take at most " +
                                                   std::to_string(limits.max_total_bytes));
    }
    // Each limit above may hold while their sum does not: the manifest travels in one message,
    // and a consumer takes none past DecodeLimits::max_message_bytes (65,536 tensors with
    // 1,100-byte names were registered and published, and every consumer joined again for ever).
    // Counted with its layout fields at their widest, and what else a manifest may carry
    // (kManifestBeyondTensors) set aside.
    TensorEntry packed;
    packed.spec = spec;
    packed.global_shape = tensor.global_shape;
    packed.global_offset = tensor.global_offset;
    packed.offset = packed.size = packed.digest = std::numeric_limits<std::uint64_t>::max();
    const std::size_t manifest_bytes = manifest_tensor_bytes_ + wire::packed_tensor_bytes(packed);
    if (const std::size_t most = protocol::DecodeLimits{}.max_message_bytes - kManifestBeyondTensors;
        manifest_bytes > most) {
      throw Error(ErrorCode::kInvalidArgument,
                  "tensor '" + spec.name + "' takes the model's manifest past the " + std::to_string(most) +
                      " bytes its tensors may fill (a consumer takes one of at most " +
                      std::to_string(protocol::DecodeLimits{}.max_message_bytes) +
                      " bytes, metadata and digests included): register fewer tensors, or give them shorter names");
    }
    check_memory(tensor);
    if (!tensor.global_shape.empty() || !tensor.global_offset.empty()) {
      TensorEntry placed;
      placed.spec = spec;
      placed.global_shape = tensor.global_shape;
      placed.global_offset = tensor.global_offset;
      check_placement(placed, ErrorCode::kInvalidArgument);
      // The only rank publishes every piece there is: the rest of the tensor would be nowhere,
      // and a consumer wanting it would get nothing of it, without a word.
      if (options_.rank_count == 1 && (tensor.global_shape != spec.shape ||
                                       std::any_of(tensor.global_offset.begin(), tensor.global_offset.end(),
                                                   [](std::int64_t o) { return o != 0; }))) {
        throw Error(ErrorCode::kInvalidArgument,
                    "tensor '" + spec.name + "' is a piece of shape " + layout::shape_to_string(spec.shape) + " at " +
                        layout::shape_to_string(tensor.global_offset) + " of " + layout::shape_to_string(tensor.global_shape) +
                        ", but this producer is its model's only rank (rank_count 1): no rank would publish the rest");
      }
    }
    names_.insert(spec.name);
    planned_bytes_ = total;
    manifest_tensor_bytes_ = manifest_bytes;
    registered_.push_back(tensor);
    // The only rank's "piece" is the whole tensor (checked above), and is published as one: sent
    // as a piece, consumers cut wants against it as against one rank of several, and dropped an
    // empty tensor, and an empty shard, as a piece this rank does not hold.
    if (options_.rank_count == 1) {
      registered_.back().global_shape.clear();
      registered_.back().global_offset.clear();
    }
  }

  void prepare() {
    std::lock_guard lock(mutex_);
    prepare_locked();
  }

  PublishTicket publish(std::int64_t step, const Metadata& metadata, const DeviceOrder& order) {
    // One thread at a time, as the header says, enforced: two at once took the same version
    // number and moved the newest version backwards (Python threads did, without a word).
    if (publishing_.exchange(true)) {
      throw Error(ErrorCode::kState, "publish() called while another publish() of this producer runs (on another "
                                     "thread, or from a callback while the trainer's waits): call it from one thread "
                                     "at a time");
    }
    struct Done {
      std::atomic<bool>& flag;
      ~Done() { flag.store(false); }
    } done{publishing_};
    auto called_at = Clock::now();
    std::int64_t called_ns = realtime_ns();
    // Before the layout is fixed and a slot taken: what every consumer would refuse is refused
    // here, naming it, and a refused publish leaves registration open.
    check_metadata(metadata);
    // A consumer puts a version together from every rank's pieces of one step: a rank that
    // published a step twice, or went back, would have its newer pieces put with another rank's
    // older ones of the same step.
    if (options_.rank_count > 1 && last_step_ && step <= *last_step_) {
      throw Error(ErrorCode::kInvalidArgument,
                  "publish(step " + std::to_string(step) + "): rank " + std::to_string(options_.rank) + " of " +
                      std::to_string(options_.rank_count) + " published step " + std::to_string(*last_step_) +
                      " already; with rank_count > 1 each publish needs a greater step (consumers put a version "
                      "together from every rank's pieces of one step)");
    }
    if (next_version_ == std::numeric_limits<std::uint64_t>::max()) {
      throw Error(ErrorCode::kState, "version numbers are used up (the next would pass 2^64 - 1; first_version was " +
                                         std::to_string(options_.first_version) + ")");
    }
    {
      std::lock_guard lock(mutex_);
      prepare_locked();
    }
    // From a callback (on_delivery runs on the service thread): a slot comes free only when that
    // thread goes on (it publishes the versions taken and ends leases), so a wait for one waited
    // for ever, and every consumer lost the producer's heartbeats meanwhile.
    auto reserved = in_callback() ? take_free_slot_in_callback() : store_.reserve(options_.lease_timeout);
    const std::size_t slot = reserved.slot;
    if (reserved.sends_abandoned > 0) {
      log_->warn("publish() took slot {} although sends of {} ended fetch(es) from it had not reported their end "
                 "once their connections were to close (UCX 1.13 ends a send over shared memory only when its "
                 "receiver takes it, and closes a busy TCP connection only once its sends end or 30 s have passed: a "
                 "consumer on this host that died, a slow one, or one that refused the version without taking its "
                 "chunks); the trainer waits for that at most {} ms",
                 slot, reserved.sends_abandoned,
                 std::chrono::duration_cast<std::chrono::milliseconds>(producer::SnapshotStore::kDrainGrace).count());
      stats_.update([&](ProducerStats& s) { s.sends_abandoned += reserved.sends_abandoned; });
    }
    Manifest manifest = layout_;
    manifest.version = next_version_++;
    manifest.step = step;
    manifest.publish_time_ns = called_ns;
    manifest.metadata = metadata;
    service_->events().push(producer::SnapshotStarted{manifest.version, step, called_ns});

    std::byte* base = store_.memory(slot);
    if (device_) {
      // Device tensors: the copies into the device slot are the stall; the digest and the copy
      // to the host slot happen on the staging thread, which then hands the version on.
      try {
        device_->copy(slot, manifest, registered_, order);
      } catch (const std::exception& e) {
        // Announced already: the service gives the slot back and answers fetches parked for it.
        service_->events().push(producer::SnapshotFailed{slot, manifest.version, e.what()});
        throw;
      }
      auto stall = Clock::now() - called_at;
      PublishTicket ticket = account(manifest, step, stall, tensor_bytes_);
      device_->stage(slot, std::move(manifest), base, called_at,
                     service_->host_copies_wanted() ? producer::DeviceSnapshots::HostCopy::kNow
                                                    : producer::DeviceSnapshots::HostCopy::kOnRequest);
      last_step_ = step;
      return ticket;
    }
    const std::uint64_t version = manifest.version;
    try {
      auto ticket = snapshot_host(slot, std::move(manifest), reserved, called_at, step);
      last_step_ = step;
      return ticket;
    } catch (const std::exception& e) {
      // As a failed device copy: announced already, so the service gives the slot back and
      // answers fetches parked for it (a slot left reserved was never written again, and with two
      // slots the next publish() waited for it for ever).
      service_->events().push(producer::SnapshotFailed{slot, version, e.what()});
      throw;
    }
  }

  producer::SnapshotStore::Reserved take_free_slot_in_callback() {
    if (auto free = store_.try_reserve()) return std::move(*free);
    refuse_blocking_wait_in_callback("publish() with every snapshot slot in use");
  }

  // The host snapshot into `slot`, its stall accounted; the version handed to the service.
  PublishTicket snapshot_host(std::size_t slot, Manifest manifest, const producer::SnapshotStore::Reserved& reserved,
                              Clock::time_point called_at, std::int64_t step) {
    std::byte* base = store_.memory(slot);
    const bool streaming = manifest.total_bytes >= kStreamingSnapshotBytes;
    // While little of the model changes, the stall is a hash of it and a copy of the blocks the
    // slot does not hold already, and the digests come out of it (changed_blocks_copy.h).
    // The newest digests known: this thread's own when it hashed the last version, which the
    // service thread may not have stored yet.
    const auto& newest = !last_hashed_.second.empty() && last_hashed_.first + 1 == manifest.version
                             ? last_hashed_.second
                             : reserved.newest_blocks;
    if (producer::copy_changed_blocks_pays(reserved.held_blocks, newest)) {
      auto copied = producer::copy_changed_blocks(base, manifest, sources_, reserved.held_blocks, streaming,
                                                  [this](std::function<void()> task) { digests_->help(std::move(task)); });
      auto stall = Clock::now() - called_at;
      PublishTicket ticket = account(manifest, step, stall, copied.bytes_copied);
      last_hashed_ = {manifest.version, copied.block_digests};
      service_->events().push(producer::SnapshotTaken{slot, std::move(manifest), called_at, true,
                                                      producer::SnapshotStore::HostState::kReady,
                                                      std::move(copied.block_digests)});
      return ticket;
    }
    // Otherwise the only work in the trainer's stall: one copy per tensor. Digests are taken
    // later by the digest thread from the slot, which nobody else touches until it is published.
    // Hashing behind the copy on the other core was tried: it made the digests ready at the end
    // of the copy, but the two compete for memory bandwidth, and the stall doubled on the 2-core
    // machine measured (bench/RESULTS.md), for no gain in the delta's update time.
    for (std::size_t i = 0; i < registered_.size(); ++i) {
      // An empty tensor may be registered with a null pointer, which memcpy must never see.
      if (manifest.tensors[i].size == 0) continue;
      snapshot_copy(base + manifest.tensors[i].offset, registered_[i].data, manifest.tensors[i].size, streaming);
    }
    auto stall = Clock::now() - called_at;
    PublishTicket ticket = account(manifest, step, stall, tensor_bytes_);
    last_hashed_ = {};
    service_->events().push(producer::SnapshotTaken{slot, std::move(manifest), called_at, false,
                                                    producer::SnapshotStore::HostState::kReady, {}});
    return ticket;
  }

  bool wait_for_consumers(std::size_t count, std::chrono::milliseconds timeout) const {
    // As the consumer's wait_for_version and the C ABI: a negative timeout is a caller's mistake
    // (a deadline already past, computed wrong), not a wait that timed out.
    if (timeout.count() < 0) {
      throw Error(ErrorCode::kInvalidArgument,
                  "wait_for_consumers: timeout " + std::to_string(timeout.count()) + " ms is negative");
    }
    if (in_callback()) {
      if (stats_.wait_for_consumers(count, std::chrono::milliseconds(0))) return true;
      // Cancelled waits end at once, here as on any thread.
      if (timeout.count() > 0 && !stats_.waits_cancelled()) refuse_blocking_wait_in_callback("wait_for_consumers");
      return false;
    }
    return stats_.wait_for_consumers(count, timeout);
  }
  void cancel_waits() { stats_.cancel_waits(); }

  ProducerStats stats() const {
    ProducerStats copy =
        stats_.snapshot_with([&](ProducerStats& s) {
          s.fetches_in_flight = store_.reader_leases() + service_->relayed_in_flight();
        });
    copy.latest_version = store_.newest_version();
    copy.transport = transports_->names();
    return copy;
  }

  std::string control_endpoint() const { return control_->endpoint(); }

 private:
  PublishTicket account(const Manifest& manifest, std::int64_t step, Clock::duration stall, std::uint64_t copied) {
    stats_.update([&](ProducerStats& s) {
      s.last_stall = stall;
      s.versions_published++;
      s.snapshot_bytes_copied += copied;
    });
    return PublishTicket{manifest.version, step, stall, manifest.total_bytes};
  }

  // Device tensors must be where their spec says, and all of a producer's tensors in one place.
  static void check_metadata(const Metadata& metadata) {
    if (auto why = metadata_problem(metadata)) throw Error(ErrorCode::kInvalidArgument, "publish() metadata " + *why);
  }


  void check_memory(const TensorRef& tensor) {
    const TensorSpec& spec = tensor.spec;
    auto where = [](MemoryKind kind, int device) {
      return kind == MemoryKind::kHost ? std::string("host memory") : "cuda:" + std::to_string(device);
    };
    if (!registered_.empty()) {
      const TensorSpec& first = registered_.front().spec;
      bool same = first.memory == spec.memory && (spec.memory == MemoryKind::kHost || first.device == spec.device);
      if (!same) {
        throw Error(ErrorCode::kInvalidArgument, "tensor '" + spec.name + "' is in " + where(spec.memory, spec.device) +
                                                     " but '" + first.name + "' is in " +
                                                     where(first.memory, first.device) +
                                                     ": a producer's tensors must all live in one place");
      }
    }
    if (spec.memory != MemoryKind::kCuda) return;
    auto& runtime = device::require_device_runtime("tensor '" + spec.name + "' in device memory");
    if (spec.size_bytes() == 0) return;
    auto info = runtime.pointer_info(tensor.data);
    if (info.kind != MemoryKind::kCuda || info.device != spec.device) {
      throw Error(ErrorCode::kInvalidArgument, "tensor '" + spec.name + "' is registered as " +
                                                   where(spec.memory, spec.device) + " but its data pointer is in " +
                                                   where(info.kind, info.device));
    }
    // Taken, it made every publish fail on a copy past the allocation (a fault on a GPU), and
    // registration was closed by then: the producer could never publish again. Checked where the
    // runtime knows the allocation (its own; a foreign CUDA pointer's extent is not asked for).
    if (info.allocation_size > 0) {
      const auto offset = static_cast<std::size_t>(static_cast<const std::byte*>(tensor.data) -
                                                   static_cast<const std::byte*>(info.allocation_base));
      if (spec.size_bytes() > info.allocation_size - offset) {
        throw Error(ErrorCode::kInvalidArgument,
                    "tensor '" + spec.name + "' runs past the end of its device allocation: its " +
                        std::to_string(spec.size_bytes()) + " bytes start " + std::to_string(offset) +
                        " bytes into an allocation of " + std::to_string(info.allocation_size) + " bytes");
      }
    }
  }

  std::vector<TensorSpec> registered_specs() const {
    std::vector<TensorSpec> specs;
    for (const auto& t : registered_) specs.push_back(t.spec);
    return specs;
  }

  void prepare_locked() {
    if (prepared_) return;
    if (registered_.empty()) throw Error(ErrorCode::kState, "no tensors registered: nothing to prepare or publish");
    layout_.model = options_.model_name;
    layout_.incarnation = incarnation_;
    layout_.integrity = options_.integrity;
    layout_.tensors = plan_layout(registered_specs(), &layout_.total_bytes);
    for (std::size_t i = 0; i < registered_.size(); ++i) {
      layout_.tensors[i].global_shape = registered_[i].global_shape;
      layout_.tensors[i].global_offset = registered_[i].global_offset;
    }
    layout_.rank = options_.rank;
    layout_.rank_count = options_.rank_count;
    if (options_.rank_count > 1) {
      layout_.start_time_ns = started_ns_;
      layout_.run_id = options_.run_id;
    }
    const TensorSpec& first = registered_.front().spec;
    // Host snapshots are also hashed per block, a block being a transfer chunk: a consumer that
    // holds an earlier version then receives only the chunks that changed. Device snapshots are
    // hashed per tensor on the device and always travel whole. With relays, blocks are small
    // enough that a chain of relays adds little to one transfer.
    const std::uint64_t chunk_option =
        options_.relay_fanout > 0 ? transfer::relay_chunk_bytes(layout_.total_bytes, options_.transfer_chunk_bytes)
                                  : options_.transfer_chunk_bytes;
    layout_.block_bytes = options_.integrity && first.memory != MemoryKind::kCuda
                              ? transfer::producer_plan(layout_.total_bytes, chunk_option).chunk_bytes
                              : 0;
    std::unique_ptr<producer::DeviceSnapshots> device;  // kept only once everything below succeeded
    if (first.memory == MemoryKind::kCuda) {
      layout_.digest_kind = DigestKind::kPmix64;
      device = std::make_unique<producer::DeviceSnapshots>(
          device::require_device_runtime("device tensors"), first.device, options_.snapshot_slots,
          layout_.total_bytes,
          [events = &service_->events()](producer::DeviceSnapshots::Step step, std::size_t slot,
                                         const Manifest& manifest, Clock::time_point called_at,
                                         std::uint64_t host_bytes, const std::string& error) {
            using Step = producer::DeviceSnapshots::Step;
            using HostState = producer::SnapshotStore::HostState;
            if (step == Step::kHostPrefix) {
              events->push(producer::HostProgress{slot, manifest.version, host_bytes});
            } else if (step == Step::kOnHost) {
              events->push(producer::HostStaged{slot, manifest.version, error});
            } else if (error.empty()) {
              events->push(producer::SnapshotTaken{
                  slot, manifest, called_at, true, step == Step::kDigested ? HostState::kPending : HostState::kNotCopied,
                  {}});
            } else {
              events->push(producer::SnapshotFailed{slot, manifest.version, error});
            }
          },
          producer::DeviceSnapshots::Options{options_.device_stage_bytes});
    }
    if (device) {
      store_.allocate(layout_.total_bytes, *transports_, device->slots(), device->device());
      std::vector<std::pair<std::byte*, std::size_t>> host_slots;
      for (std::size_t i = 0; i < options_.snapshot_slots; ++i) {
        host_slots.emplace_back(store_.memory(i), std::max<std::uint64_t>(layout_.total_bytes, 1));
      }
      device->pin_host_slots(host_slots);  // on failure a retry allocates (and registers) afresh
      service_->events().push(producer::SlotsAllocated{transport::MemoryLocation::cuda(device->device())});
      device_ = std::move(device);
    } else {
      store_.allocate(layout_.total_bytes, *transports_);
    }
    sources_.clear();
    tensor_bytes_ = 0;
    for (std::size_t i = 0; i < registered_.size(); ++i) {
      sources_.push_back(static_cast<const std::byte*>(registered_[i].data));
      tensor_bytes_ += layout_.tensors[i].size;
    }
    prepared_ = true;
    log_->info("prepared {} snapshot slots of {} bytes for {} tensors", options_.snapshot_slots, layout_.total_bytes,
               layout_.tensors.size());
  }

  ProducerOptions options_;
  std::shared_ptr<spdlog::logger> log_;
  const std::uint64_t incarnation_;
  const std::int64_t started_ns_;  // CLOCK_REALTIME at construction: this run's start, for rank_count > 1

  std::mutex mutex_;                   // guards the registration
  bool prepared_ = false;              // guarded by mutex_
  std::vector<TensorRef> registered_;  // guarded by mutex_ until prepared, then immutable
  std::set<std::string> names_;        // guarded by mutex_: registered names
  std::uint64_t planned_bytes_ = 0;    // guarded by mutex_: their aligned sizes, summed
  std::size_t manifest_tensor_bytes_ = 0;  // guarded by mutex_: their packed manifest entries, at most
  // What a manifest's message holds beyond its tensors, at most: metadata (1 MiB of keys and
  // values, 1,024 entries), block digests (DecodeLimits::max_array of them, 9 bytes each), the
  // model's name and fixed fields, and the reply around it; rounded up generously.
  static constexpr std::size_t kManifestBeyondTensors = std::size_t{4} << 20;
  Manifest layout_;                    // immutable once prepared
  std::atomic<bool> publishing_{false};  // a publish() runs: one at a time
  std::uint64_t next_version_;         // publishing thread only
  std::optional<std::int64_t> last_step_;  // publishing thread only: of the last publish() that returned
  // Publishing thread only: the tensors' data in the layout's order (set once prepared), and the
  // version publish() last hashed itself with its block digests ({0, {}} after a whole copy).
  std::vector<const std::byte*> sources_;
  std::uint64_t tensor_bytes_ = 0;  // the tensors' bytes, without the gaps between them
  std::pair<std::uint64_t, std::vector<std::uint64_t>> last_hashed_;
  producer::StatsBox stats_;

  producer::SnapshotStore store_;
  std::unique_ptr<transport::TransportSet> transports_;
  std::unique_ptr<producer::ControlPlane> control_;     // the service thread's once it runs; closed once it ends
  std::unique_ptr<producer::ProducerService> service_;
  std::unique_ptr<producer::DigestWorker> digests_;
  std::unique_ptr<producer::DeviceSnapshots> device_;  // device tensors only; set once prepared
  std::unique_ptr<producer::Persister> persister_;  // null without options.persist
  std::thread thread_;
};

Producer::Producer(ProducerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
Producer::~Producer() = default;
void Producer::register_tensor(const TensorRef& tensor) { impl_->register_tensor(tensor); }
void Producer::register_tensors(std::span<const TensorRef> tensors) {
  impl_->register_tensors(tensors);
}
void Producer::prepare() { impl_->prepare(); }
PublishTicket Producer::publish(std::int64_t step, const Metadata& metadata) {
  return impl_->publish(step, metadata, DeviceOrder{});
}
PublishTicket Producer::publish(std::int64_t step, const Metadata& metadata, const DeviceOrder& order) {
  return impl_->publish(step, metadata, order);
}
bool Producer::wait_for_consumers(std::size_t count, std::chrono::milliseconds timeout) const {
  return impl_->wait_for_consumers(count, timeout);
}
void Producer::cancel_waits() { impl_->cancel_waits(); }
ProducerStats Producer::stats() const { return impl_->stats(); }
std::string Producer::control_endpoint() const { return impl_->control_endpoint(); }

}  // namespace modelcast
