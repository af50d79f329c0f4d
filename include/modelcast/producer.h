// Producer: linked into the trainer. Snapshots registered tensors and delivers them in the
// background to every subscribed Consumer.
#pragma once

#include "modelcast/export.h"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "modelcast/keys.h"
#include "modelcast/tensor.h"

namespace modelcast {

using Metadata = std::map<std::string, std::string>;

// A consumer has a version in memory, verified. Reported on the producer's service thread.
struct Delivery {
  std::uint64_t version = 0;
  std::string consumer;                       // the consumer's name
  std::chrono::nanoseconds since_publish{0};  // publish() call until the consumer's ack
  std::size_t bytes = 0;
  std::string relay;  // the consumer that sent the blocks (relay_fanout); empty: this producer
};

// Crash-safe checkpoints written off the trainer's hot path: every `every`th version, once its
// digests are taken, goes to <directory>/<model_name>/<version>/ as model.safetensors plus
// metadata.json (Triton's layout; a version appears only complete), and the newest `keep` stay.
// The writer thread reads the snapshot slot itself, so it needs snapshot_slots >= 3; a version
// that comes due while the previous write is still going is skipped, never waited for.
struct PersistOptions {
  // Empty: off. Created if missing; must be writable. One writer per model directory: while
  // another producer or a modelcastd writes <directory>/<model_name>, construction throws kState.
  std::string directory;
  std::uint64_t every = 1;  // >= 1: versions first_version, first_version + every, ...
  std::size_t keep = 3;     // >= 1: newest versions kept on disk
  // Optional; run on the writer thread after each complete version (`path` is its directory),
  // e.g. to upload it, and after each failed write (also logged and counted in ProducerStats).
  // The slot is already released; a version that comes due meanwhile waits, newer ones skip.
  // What they throw is logged and ignored. They must not destroy the Producer (its destructor
  // joins the thread they run on: the process is ended, saying so).
  std::function<void(std::uint64_t version, const std::string& path)> on_persisted;
  std::function<void(std::uint64_t version, const std::string& error)> on_persist_failed;
};

struct ProducerOptions {
  std::string model_name = "model";
  // ROUTER endpoint consumers connect to: tcp://HOST:PORT (PORT 0 picks a free one) or ipc://PATH.
  // HOST: an IPv4 address, an IPv6 one in brackets ([::1]), an interface name or *; not a name.
  // The only endpoint: requests, replies and announcements all go over it.
  std::string control_endpoint = "tcp://127.0.0.1:0";
  std::size_t snapshot_slots = 3;  // 2-64: one holds the newest version while another is written
  bool integrity = true;           // XXH3 digest per block, checked by consumers
  std::uint64_t first_version = 1; // 1 to 2^64 - 2; a restarted trainer may continue its numbering
  // A consumer's hold on a slot lapses after this long without progress (no chunk of its
  // transfer completing), so a dead or hung consumer cannot pin a slot for ever while a slow
  // one still finishes. publish() waits at most this long for a slot: it then revokes the
  // leases on the oldest version, whose consumers fetch a newer one. Must exceed the time one
  // transfer chunk takes on the slowest link. It and heartbeat_interval: 1 ms to 100 years.
  std::chrono::milliseconds lease_timeout{10000};
  // Consumers presume a producer gone after their producer_timeout (default 2 s) without a
  // word: an interval near or past theirs makes idle consumers join again and again.
  std::chrono::milliseconds heartbeat_interval{200};
  std::size_t transfer_chunk_bytes = 32u << 20;  // 64 KiB-1 GiB; raised for models over 2^17 chunks
  // Device tensors: a version is copied from its device slot to host memory (for two-sided
  // routes) in pieces of this many bytes, and chunks are sent as soon as the pieces under them
  // are in, so the device-to-host copy overlaps the network transfer. 64 KiB-1 GiB.
  std::size_t device_stage_bytes = 8u << 20;
  // Joins beyond this many consumers are refused: each costs a connection and a UCX endpoint.
  std::size_t max_consumers = 256;
  // Transports this producer may deliver over: "ucx" (shared memory, TCP, RDMA), "cuda_ipc"
  // (device memory on this host) and "loopback" (a memcpy to a consumer in this same process).
  // Empty: every default one available here ("ucx", and "cuda_ipc" where the process has a
  // device; "loopback" only when named). Each
  // consumer gets the first transport it offers that serves its memory and distance.
  std::vector<std::string> transports;
  // Consumers that relay (0: off, the producer sends every consumer every block it needs).
  // N > 0: a consumer's fetch goes, when it can, to another consumer that holds or is receiving
  // the version (one that serves peers, over the same transport, with fewer than N fetches to
  // serve); that consumer forwards each block once it has verified it, so versions flow down a
  // chain and the producer sends each block about once however many consumers there are. The
  // receiver checks every block against this producer's signed block digests, so a relay's
  // corrupt, wrong or missing blocks are caught (the digests are not cryptographic: a relay set
  // on forging content can match them, README "What keys do not cover"); a relay that sends bad
  // bytes or stops is passed over and the producer serves that consumer itself. Needs integrity (block digests) and two-sided routes. Off by
  // default: relaying puts traffic on the consumers' uplinks, which the operator should choose.
  std::size_t relay_fanout = 0;

  // Security. With a key pair (`key`, or `key_file` from modelcast-keygen) the control plane is
  // CurveZMQ (authenticated, encrypted) and every version is signed; consumers pin the public
  // key. Without one the control plane is plaintext and versions are unsigned: allowed on
  // loopback and ipc:// endpoints, elsewhere only with allow_plaintext_remote; a plaintext
  // ipc:// endpoint only in a directory no other user can write (Error(kInvalidArgument) names
  // the directory otherwise), so that no stranger can replace its socket file.
  KeyPair key;
  std::string key_file;
  // Consumers admitted (Ed25519 public keys, Z85). Empty: none, unless allow_any_consumer.
  std::vector<std::string> allowed_consumer_keys;
  bool allow_any_consumer = false;  // any consumer that completes the handshake; still encrypted
  bool allow_plaintext_remote = false;
  // A model trained sharded: this producer is rank `rank` of `rank_count`, each registering its
  // pieces of the tensors (TensorRef::global_shape, global_offset) and publishing its own
  // snapshot with publish(step), with no barrier between ranks; a consumer installs a step once
  // it holds the pieces it wants of that step from every rank, each published after every other
  // piece's producer started (a restarted trainer's steps repeat the run before's). A rank's
  // steps must rise (publish() refuses one not above its last). Consumers are told rank 0's
  // endpoint: rank 0 needs `rank_endpoints`, every rank's control endpoint in rank order (its
  // own entry is not read; the others must be distinct tcp:// or ipc:// endpoints a consumer can
  // connect to, not a wildcard host), and tells them the others; a consumer pointed at another
  // rank is refused, naming rank 0. So start ranks 1.. first (port 0 is fine), gather their
  // control_endpoint() (an all_gather), then rank 0. With rank_count 1 a piece must be its whole
  // tensor: no other rank publishes the rest.
  std::uint32_t rank = 0;
  std::uint32_t rank_count = 1;  // at most 256, the ranks a consumer takes
  std::vector<std::string> rank_endpoints;
  // With rank_count > 1: which run of the trainer this is, the same on every rank of a run and
  // new at each restart (the launcher's job id and restart count, e.g. SLURM_JOB_ID and
  // SLURM_RESTART_COUNT, or TORCHELASTIC_RUN_ID and TORCHELASTIC_RESTART_COUNT). Consumers put
  // only pieces of one run id together, and let go of a run's pieces once a rank of a run that
  // started later publishes: without it they go by the ranks' start times alone, which cannot
  // tell an old run's rank still publishing after a new run's rank started. Empty (default):
  // not sent. At most 4096 bytes of UTF-8, no control characters.
  std::string run_id;
  // Optional; runs on the service thread after each delivery a consumer confirmed. Keep it short:
  // the service waits for it. What it throws is logged and ignored; a wait there that is not
  // answered at once throws Error(kState) (it may wait for the thread it runs on). It must not destroy the
  // Producer (its destructor joins the thread it runs on: the process is ended, saying so).
  std::function<void(const Delivery&)> on_delivery;
  PersistOptions persist;  // checkpoints on disk, off the hot path; off unless directory is set
};

// How publish() orders its copies of device tensors against the trainer's GPU work (ignored for
// host tensors). Handles are the CUDA runtime's (cudaStream_t, cudaEvent_t), passed as pointers.
//  - stream: the copies start after the work queued on it so far, and the work queued on it after
//    publish() returns waits for them on the GPU: publish() does not wait for the copies.
//  - event (recorded by the trainer): the copies start after it; publish() waits for them.
//  - neither: the copies follow the legacy default stream; publish() waits for them.
struct DeviceOrder {
  void* stream = nullptr;
  void* event = nullptr;
};

// What publish() returns once the snapshot is taken; delivery continues in the background.
struct PublishTicket {
  std::uint64_t version = 0;
  std::int64_t step = 0;
  std::chrono::nanoseconds stall{0};  // time the caller was blocked in publish()
  std::size_t bytes = 0;              // snapshot size: the tensors plus 256-byte alignment padding
};

struct ProducerStats {
  // The newest version offered to consumers (0 before the first publish). The service thread
  // takes a snapshot moments after publish() returns, so this may lag versions_published briefly.
  std::uint64_t latest_version = 0;
  std::uint64_t versions_published = 0;
  std::uint64_t deliveries = 0;      // verified acks from consumers
  // Fetches that failed, each counted once: send failures, rejections, fetches withdrawn or whose
  // lease ended mid-send, and fetches of consumers that went.
  std::uint64_t failed_deliveries = 0;
  std::uint64_t leases_expired = 0;
  std::uint64_t bad_messages = 0;    // malformed or unknown-version requests dropped
  std::uint64_t refused_peers = 0;   // handshakes refused: keys not on the allow-list
  // Joins refused, each told why in its reply (another model, a bad name, a full producer, no
  // usable transport); the log shows at most one every 10 s.
  std::uint64_t refused_joins = 0;
  std::uint64_t bytes_sent = 0;      // by this producer (relayed blocks not included)
  // relay_fanout: deliveries whose blocks another consumer sent, the bytes they carried, and
  // relayed fetches that failed on their relay (a block that did not match, or no progress).
  std::uint64_t relayed_deliveries = 0;
  std::uint64_t bytes_relayed = 0;
  std::uint64_t relay_faults = 0;
  std::size_t consumers = 0;         // consumers that joined and are not known dead
  std::size_t fetches_in_flight = 0; // transfers started and not yet acked or expired
  // Transport connections made to consumers: one a join, except that a consumer joining again
  // from the address it joined from, with no fetch under way, keeps the connection it had.
  std::uint64_t connections_opened = 0;
  // Connections closed because a fetch ended (its lease lapsed or was needed, it was refused or
  // withdrawn) with sends from its slot still in flight: closing is what ends them (over TCP once
  // they end, or after UcxOptions::busy_close_grace). Such a consumer joins again.
  std::uint64_t connections_cut = 0;
  // Ended fetches whose sends had not reported their end a second after publish() needed their
  // slot, which it then took (logged): to a consumer on this host that died, or over TCP one whose
  // connection waits for its sends (connections_cut).
  std::uint64_t sends_abandoned = 0;
  std::uint64_t failed_snapshots = 0;  // device versions that could not be staged (never served)
  // Device versions copied to host memory: at publish while a consumer receives over a
  // two-sided transport or versions are persisted, else when such a fetch first asks. While
  // every consumer reads the device slot (CUDA IPC), none.
  std::uint64_t host_copies = 0;
  // Bytes publish() copied into snapshot slots. While little of a host model changes between
  // versions, publish() hashes the tensors and copies only the blocks the slot does not hold
  // already (then less than versions_published times the model); otherwise it copies all.
  std::uint64_t snapshot_bytes_copied = 0;
  std::chrono::nanoseconds last_stall{0};
  std::string transport;             // the transports it delivers over, e.g. "ucx" or "ucx,loopback"
  // options.persist: versions written completely, writes that failed (logged, the same failure
  // at most once per 10 s; training and delivery go on), and versions that came due while the writer was still busy.
  std::uint64_t persisted_versions = 0;
  std::uint64_t persist_failures = 0;
  std::uint64_t persist_skipped = 0;
  // Why the latest write failed, or could not remove older versions past persist.keep; empty
  // while the latest went through.
  std::string persist_last_error;
};

class MODELCAST_API Producer {
 public:
  // Binds the control endpoint and starts the service and transport threads. Throws
  // Error(kInvalidArgument) for bad options (a key with integrity off among them: the signature
  // covers the digests), Error(kTransport) if binding fails, Error(kState) for a transport this
  // process cannot run ("cuda_ipc" without a device runtime).
  explicit Producer(ProducerOptions options);
  // Stops background threads; transfers in flight are abandoned (consumers discard them). No
  // other thread may be inside a call on this producer (publish() copies into its slots).
  ~Producer();
  Producer(const Producer&) = delete;
  Producer& operator=(const Producer&) = delete;

  // Registers a tensor the caller owns (see TensorRef). Only before prepare() or the first
  // publish(): after them, Error(kState). Throws Error(kInvalidArgument) for an empty/duplicate
  // name, one with a control character or not UTF-8, "__metadata__" (the safetensors files of
  // persist and modelcastd keep metadata under it) or "*" (every tensor, to wants and
  // conversions), null data or bad shape, a tensor past what consumers take (65,536 tensors, a 1 TiB
  // snapshot with alignment padding), or device memory not on spec.device; Error(kState) for
  // device memory in a process without a device. A host tensor's pointer is not checked: that
  // would start a device runtime in every host-only trainer.
  void register_tensor(const TensorRef& tensor);
  // All or none: when one is refused (as register_tensor would), none of `tensors` stays registered.
  void register_tensors(std::span<const TensorRef> tensors);

  // Allocates and registers the snapshot slots now so the first publish() does not pay for
  // it. Optional: the first publish() calls it. Throws Error(kState) if nothing is registered.
  void prepare();

  // Copies every registered tensor into a free snapshot slot and returns; notification and
  // transfer run in the background. Blocks beyond the copy only if every slot is held by
  // readers (at most lease_timeout); from a callback of modelcast's (any object's: on_delivery, a
  // consumer's on_update) it never waits and revokes no lease: with no slot free it throws
  // Error(kState), as every wait there does. Call from one thread at a time: a call while
  // another runs throws Error(kState). Throws Error(kState) if
  // nothing is registered or version numbers are used up (2^64 - 1), Error(kInvalidArgument)
  // for a step not above the last with rank_count > 1, for metadata past what consumers take (1,024 entries, 1 MiB, keys that are names, values
  // UTF-8 without a NUL); on any error the previous versions stay served. The registered tensors
  // must not be written while it copies them (another thread's optimizer step): the version
  // would be torn, and where only some blocks changed, refused by consumers for a block whose
  // digest was taken before the write and its copy after.
  PublishTicket publish(std::int64_t step, const Metadata& metadata = {});
  // The same, with device tensors' copies ordered per `order`. All tensors of a producer live
  // in one place: host memory, or one device (register_tensor refuses a mix).
  PublishTicket publish(std::int64_t step, const Metadata& metadata, const DeviceOrder& order);

  // Blocks until at least `count` consumers have joined; false on timeout. Thread-safe; throws
  // Error(kInvalidArgument) for a negative timeout; from a callback of modelcast's it answers at
  // once, and throws Error(kState) where it would block.
  bool wait_for_consumers(std::size_t count, std::chrono::milliseconds timeout) const;
  // Ends every wait_for_consumers under way, and every later one at once, with false; nothing
  // else changes. For the thread that is about to destroy a Producer others wait on. Thread-safe.
  void cancel_waits();

  // Thread-safe snapshot of counters.
  ProducerStats stats() const;

  // The endpoint actually bound (with the chosen port when PORT was 0).
  std::string control_endpoint() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace modelcast
