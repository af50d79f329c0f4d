// Consumer: lives in the inference process. Receives versions in the background and
// swaps to each one atomically; readers hold ModelViews.
#pragma once

#include "modelcast/export.h"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "modelcast/error.h"
#include "modelcast/keys.h"
#include "modelcast/model_view.h"
#include "modelcast/tensor.h"

namespace modelcast {

// A tensor served in another precision than the producer's. Each version is verified as the
// producer sent it and converted after, before it is installed. Rounding and fp8 scales:
// core/layout/convert.h (widening is bit-exact; narrowing rounds to nearest even, once).
struct TensorConversion {
  std::string tensor;          // a tensor's name, or "*": every f32, f16 and bf16 tensor not named
  DType to = DType::kBF16;     // f32, f16, bf16 or f8e4m3
  // f8e4m3 only: elements per scale (0: one scale for the whole tensor, amax / 448).
  std::size_t fp8_block = 0;
};

// A rectangular part of a row-major tensor: per dimension the index of its first element in the
// whole tensor and its extent.
struct TensorBox {
  std::vector<std::int64_t> offset;
  std::vector<std::int64_t> extent;
};

// What a consumer keeps of a tensor (ConsumerOptions::wants): all of it, a tensor-parallel
// shard, boxes, or nothing. Only the blocks that hold wanted bytes are fetched (and verified
// against the producer's signed block digests); views then hold just the parts asked for, each
// with its place in the whole tensor (TensorView::box_offset, whole_shape).
struct TensorWant {
  enum class Kind : std::uint8_t { kWhole = 0, kShard = 1, kBoxes = 2, kNothing = 3 };
  std::string tensor;  // a tensor's name, or "*": every tensor no other want names
  Kind kind = Kind::kWhole;
  // kShard: part `index` of `count` along dimension `dim`, as torch.chunk and DTensor's
  // Shard(dim) split it (parts of ceil(size / count) elements, the last ones smaller or empty).
  // Under "*", a tensor with no dimension `dim` (a bias of a row-parallel layer, a scalar) is
  // kept whole, as tensor parallelism replicates it; a named one is an error.
  std::size_t dim = 0;
  std::size_t index = 0;
  std::size_t count = 1;
  // kBoxes: disjoint, non-empty boxes of one rank inside the tensor, each a TensorView of its
  // own, in this order (other boxes are refused when the Consumer is built).
  std::vector<TensorBox> boxes;

  static TensorWant whole(std::string tensor) { return {std::move(tensor), Kind::kWhole, 0, 0, 1, {}}; }
  static TensorWant nothing(std::string tensor) { return {std::move(tensor), Kind::kNothing, 0, 0, 1, {}}; }
  static TensorWant shard(std::string tensor, std::size_t dim, std::size_t index, std::size_t count) {
    return {std::move(tensor), Kind::kShard, dim, index, count, {}};
  }
  static TensorWant of(std::string tensor, std::vector<TensorBox> boxes) {
    return {std::move(tensor), Kind::kBoxes, 0, 0, 1, std::move(boxes)};
  }
};

struct ConsumerOptions {
  std::string producer_endpoint;   // the producer's control endpoint (tcp://... or ipc://...)
  std::string model_name = "model";
  std::string consumer_name;       // default: "<hostname>:<pid>"
  // If non-empty, every version must have exactly these tensors (name, dtype, shape, in any
  // order); another layout is rejected with Error(kLayoutMismatch) and the last good version stays.
  // With producer ranks: the whole tensors their pieces make, before wants cut them.
  std::vector<TensorSpec> expected_layout;
  // Receive buffers allocated by modelcast (2 to 1024: one served while the next arrives; one more
  // lets readers hold an older view without stalling updates). The next version's buffer is
  // made ahead, in the background: at the join once the producer has prepared, and after each
  // install (so two are allocated soon after the first version, never more than this count).
  // Receive buffers are registered with one connection's transport: after a reconnect the count
  // starts afresh, and receive buffers that views of earlier versions still hold come on top
  // until released. (Memory for shaped views, which wants or conversions make, is not registered:
  // its count holds across reconnects, and a version waits for a free one.)
  // With producer ranks, each rank's pieces get at least 3 (two held for assembly, one receiving),
  // and assembled versions live in up to this count of the Consumer's own.
  std::size_t buffers = 3;
  // Caller-owned receive buffers instead (each large enough for the model, >= 2 of them, not
  // overlapping, each starting at a multiple of 16 bytes, valid for the Consumer's lifetime). modelcast never writes into one a live view uses.
  // Views of parts or conversions not kept in place, and of a model several producer ranks
  // publish, live in memory of the Consumer's own; with ranks, these buffers receive the pieces
  // of the rank producer_endpoint names (>= 3 of them then), the other ranks' go elsewhere.
  std::vector<std::span<std::byte>> caller_buffers;
  // The caller never writes its caller_buffers (modelcast alone does, as the sidecar daemon's
  // shared-memory buffers are written): a version's bytes then stay as they were verified, so
  // they may be relayed to peers (serve_peers) and a delta leaves unchanged blocks in place.
  // False: the caller may write a buffer only while it holds a view of a version in it that is
  // no longer the newest (acquire() gives a newer one): modelcast neither writes nor reads that
  // buffer until the view goes (other readers of that version see the writes). A buffer no view
  // holds may be receiving a version, or hold one not yet acquired: writing it then corrupts what
  // readers get, unseen. Neither relaying nor leaving blocks in place is done.
  bool caller_buffers_untouched = false;
  // Where views' tensors live: host memory, or a device (MemoryKind::kCuda and its ordinal).
  // A device consumer receives through host buffers, copies each version to the device and
  // checks it there before it becomes visible; its TensorViews hold device pointers, with the
  // same all-or-nothing guarantee as host views. Not with caller_buffers. Releasing the last
  // copy of a device view lets the buffer be reused for a later version: the GPU work that
  // reads it must have finished by then (synchronise its stream first), since modelcast cannot
  // see work queued on the caller's streams.
  MemoryKind memory = MemoryKind::kHost;
  int device = 0;
  // The delivery path to insist on: "" (the producer chooses), "host_ucx", "cuda_ipc",
  // "staged" or "ucx_cuda". A path the two memories and the distance cannot use gets the join
  // refused, saying why (Error(kState) through on_error and last_error).
  std::string path;
  // Transports this consumer offers, in order of preference: "ucx", "cuda_ipc", "loopback"
  // (only with a producer in this same process). Empty: every default one available here
  // ("ucx", and "cuda_ipc" where the process has a device; "loopback" only when named).
  std::vector<std::string> transports;
  // No announcement or heartbeat for this long: the producer is presumed gone (or to have
  // forgotten this consumer: it announces only to consumers it knows); a transfer in flight is
  // discarded and the consumer joins again when the producer answers. A closed connection is
  // noticed at once. Keep it several times the producer's heartbeat_interval (default 200 ms):
  // one near or under it makes an idle consumer join again and again.
  std::chrono::milliseconds producer_timeout{2000};
  // A transfer the producer answered that makes no progress (no chunk arriving) for this long
  // is given up and the newest version asked for again; a slow transfer that keeps progressing
  // is never given up. The receives of a transfer given up that still make no progress this
  // long after (their sender died mid-send) are taken never to end: their receive buffer is set
  // aside and another allocated (at most `buffers` set aside at a time). It and
  // producer_timeout: 1 ms to 100 years.
  std::chrono::milliseconds transfer_timeout{30000};
  // Serve blocks of the versions this consumer holds (and is receiving) to other consumers when
  // a producer with relay_fanout asks it to, over the transport it receives on. Each block is
  // sent once verified here, and checked again where it lands. Only consumers with modelcast's
  // own buffers (or caller buffers the caller leaves untouched) serve: other caller buffers the
  // caller may write (caller_buffers_untouched says when). A device consumer serves from the host
  // buffer a staged route lands in, the installed version's until the next version needs that
  // buffer; one whose route reads straight into device memory (CUDA IPC) lets device consumers
  // on its host read its installed version out of its device buffer, which stays out of reuse
  // until the producer says the reader is done.
  bool serve_peers = true;
  // Largest model this consumer accepts, counted as the snapshot it receives: the tensors and
  // their 256-byte alignment padding (PublishTicket::bytes; 0: half the machine's memory, or the
  // largest caller buffer); a manifest declaring more is rejected before anything is allocated.
  std::uint64_t max_model_bytes = 0;
  // The producer's public key (Z85, from its ".pub" file): the control plane is then CurveZMQ
  // with that producer only, and a version is installed only if its signature verifies with
  // this key (Error(kAuthentication) otherwise; the last good version stays). Empty: plaintext
  // and unsigned versions accepted, on loopback and ipc:// endpoints only unless
  // allow_plaintext_remote; a plaintext ipc:// endpoint only in a directory no other user can
  // write (Error(kInvalidArgument) names the directory otherwise).
  std::string producer_public_key;
  // This consumer's own key pair, for a producer that admits listed keys only. Empty: a fresh
  // key pair per Consumer (enough for a producer that admits any consumer).
  KeyPair key;
  std::string key_file;
  bool allow_plaintext_remote = false;
  // What views hold of each tensor (see TensorWant); empty: every tensor whole. A version that
  // lacks a named tensor, or whose shape a want does not fit (a box outside the tensor, a shard
  // along a dimension it lacks), is rejected naming the tensor and the box, before any byte is
  // received, and the last good version stays. A device consumer cuts its parts on the device.
  // A consumer that keeps only parts of the model serves no peers. Versions the
  // producer hashes per tensor (device producers) are received whole and then cut to the wants.
  std::vector<TensorWant> wants;
  // Tensors that views hold in another dtype (see TensorConversion); a device consumer converts
  // on the device, to the same bits as a host consumer. A version with a named tensor that is
  // absent or not f32, f16 or bf16 is rejected naming it, and the last good version stays.
  std::vector<TensorConversion> conversions;
  // A group of consumers that switch versions together: the tensor-parallel ranks of one
  // server, each a Consumer (usually in its own process) with the same `group` name and
  // `group_size`. The producer picks one version for the group; each member fetches and
  // verifies it but keeps serving the version before; only when every member holds it does the
  // producer tell them all to switch (two-phase commit). A member that leaves or dies leaves
  // the others on the last version they all had, and they say so (on_error,
  // stats().group_waiting); one that rejects the version makes the producer give it up, and every
  // other member says so (on_error), serves the version before on and takes the next version
  // published. Before the group was first whole, waiting for members is start-up: last_error
  // and group_waiting say so, on_error does not. Needs buffers >= 3 (serving,
  // prepared, receiving); a producer refuses a group_size above its max_consumers. Empty: no group.
  std::string group;
  std::uint32_t group_size = 0;
  // Run on a thread of the consumer's (one per producer rank) after a version is installed, or
  // when one is rejected; never two at once. Keep them short: the next update waits for them.
  // They may call acquire() and stats(); a wait there (wait_for_version, wait_for_consumers, on
  // any object) that is not answered at once throws Error(kState): it may wait for the thread it
  // runs on. What they throw is logged and ignored. They must not
  // destroy the Consumer (its destructor joins the thread they run on).
  std::function<void(const ModelView&)> on_update;
  // Every error given to on_error is also logged (component "consumer", naming the model; the
  // same text at most once per 10 s), so it need not log them again.
  std::function<void(const Error&)> on_error;
};

struct ConsumerStats {
  // The producer's number of the version readers see; with producer ranks, rank 0's number of
  // the step's piece (the same on every consumer of the ranks).
  std::uint64_t current_version = 0;
  // Joined to the producer and not given up on it (no word for producer_timeout, or it
  // restarted): false until the first join and while joining again.
  bool producer_connected = false;
  // The producer said it stopped (its Producer was destroyed: the end of its run, or before a
  // restart) and none has answered at its endpoint since; with producer ranks, one of them.
  bool producer_stopped = false;
  std::uint64_t versions_installed = 0;
  std::uint64_t versions_rejected = 0;  // digest or layout failures
  std::uint64_t transfers_aborted = 0;  // producer lost mid-transfer, timeouts
  std::uint64_t bad_messages = 0;       // malformed/truncated/unknown-version, dropped (last_error says why)
  std::uint64_t reconnects = 0;
  std::uint64_t failed_handshakes = 0;  // CurveZMQ handshakes with the endpoint that failed
  std::uint64_t bytes_received = 0;  // over the transport: a delta counts only its changed blocks
  // The version arriving now (0: none) and the bytes of it landed so far, counted as the prefix
  // [0, arriving_bytes) that is complete: a large transfer's progress.
  std::uint64_t arriving_version = 0;
  std::uint64_t arriving_bytes = 0;
  // Of the last version installed, the bytes of the tensors and boxes its views hold, in the
  // producer's dtype (ConsumerOptions::wants: what a part costs against the whole model).
  std::uint64_t wanted_bytes = 0;
  std::uint64_t bytes_relayed = 0;   // sent to other consumers (serve_peers)
  // Fetches whose relay failed them (a block that did not match its digest, no progress, or its
  // connection failed); each was fetched again from the producer. last_error names the relay.
  std::uint64_t relay_faults = 0;
  std::string transport;  // the transport the producer chose at the last join ("" before one)
  std::string path;       // and the delivery path ("host_ucx", "cuda_ipc", "staged", ...)
  std::chrono::nanoseconds last_update_latency{0};  // publish() call until installed here
  std::chrono::nanoseconds last_notify_latency{0};  // publish() call until announced here
  // The last error, or a state worth knowing while it lasts: joins unanswered for five
  // producer_timeouts (no producer at the endpoint yet, or no longer: one that said it stopped
  // is named so), a group waiting for members.
  std::string last_error;
  // Group members (ConsumerOptions::group): the version the group last switched to (what
  // current_version becomes on every member), the version this member holds verified and
  // waits to switch to (0: none), and whether the group waits for members it lacks.
  std::uint64_t group_version = 0;
  std::uint64_t prepared_version = 0;
  bool group_waiting = false;
};

class MODELCAST_API Consumer {
 public:
  // Starts the service and transport threads and begins to join the producer; does not wait
  // for it (a producer that starts later is found). Throws Error(kInvalidArgument) for bad
  // options, Error(kState) for device memory in a process without a device.
  explicit Consumer(ConsumerOptions options);
  // Stops threads; views already handed out stay valid. A consumer whose device buffer peers
  // are reading (serve_peers over CUDA IPC) first waits for them, and one stopped mid-transfer
  // for the bytes already under way, each up to producer_timeout. Where the producer died
  // mid-transfer a receive UCX 1.13 matched ignores its cancel, and releasing the buffer it
  // lands in waits up to 5 s more before the transport gives its worker up (producer_timeout
  // 1 s: 6 s in all).
  ~Consumer();
  Consumer(const Consumer&) = delete;
  Consumer& operator=(const Consumer&) = delete;

  // The newest installed version, or an empty view before the first. Thread-safe, never blocks
  // on transfers.
  ModelView acquire() const;

  // Waits until a version >= `version` is installed; returns it, or an empty view on timeout
  // (milliseconds::max() and anything past 100 years wait for ever, in practice). Throws
  // Error(kInvalidArgument) on a negative timeout; from a callback of modelcast's (on_update,
  // on_error, on_delivery) it answers at once, and throws Error(kState) where it would block.
  ModelView wait_for_version(std::uint64_t version, std::chrono::milliseconds timeout) const;
  // Ends every wait_for_version under way, and every later one at once, with an empty view;
  // nothing else changes (versions still arrive, acquire() still works). For the thread that is
  // about to destroy a Consumer others wait on: they return, then it may go. Thread-safe.
  void cancel_waits();

  ConsumerStats stats() const;  // thread-safe snapshot

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace modelcast
