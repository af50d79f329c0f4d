// One fetch at a time: asks for a version, posts a receive per chunk into a free buffer once
// the producer answers, hashes each block of a host version as it lands, collects digests that
// follow the data, and hands the finished fetch back. A delta (the answer names a base version
// the consumer offered) receives only the chunks whose block digest changed and copies the
// others from the base's buffer. A relayed fetch (the answer names another consumer as the
// sender) comes with its digests and gives up at the first block that does not match, so the
// service can fetch it from the producer at once. It also tells a relay of this consumer's which
// blocks of the fetch are in and verified. It sends nothing itself: begin() returns the request
// for the service loop to send. Service thread only; chunk completions arrive from the
// transport's thread through the loop's event queue.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/digest.h"
#include "device/pmix64_accumulator.h"
#include "core/model/installed_version.h"
#include "core/consumer/relay_server.h"
#include "core/transfer/chunk_plan.h"
#include "core/wire/protocol.h"

namespace modelcast::consumer {

struct ChunkDone {
  std::uint64_t fetch_id;
  std::size_t chunk;
  bool ok;
  std::string error;
};

// A fetch whose chunks (and, with integrity, digests) are all in, or that failed.
struct FinishedFetch {
  std::uint64_t fetch_id = 0;
  Manifest manifest;                        // with the producer's digests
  std::shared_ptr<detail::ReceiveBuffer> buffer;
  std::vector<std::byte> signature;
  std::vector<std::uint64_t> received;      // pmix64 digests of what arrived, when taken as it landed
  std::string failure;                      // a transfer error; empty when every chunk arrived
  std::uint64_t base_version = 0;           // a delta against this version; 0: received whole
  // The received blocks with the digests of what arrived (a delta's others are the base's).
  std::vector<std::pair<std::uint32_t, std::uint64_t>> blocks;
  std::uint64_t bytes_received = 0;         // over the transport (a delta's changed blocks)
  std::string relay;                        // the consumer that sent the blocks; empty: the producer
  bool relay_fault = false;                 // that relay sent a block that failed its digest
  bool relay_read = false;                  // read out of that relay's exported buffer (one-sided)
  bool producer_read = false;               // read out of the producer's exported slot (one-sided)
};

class FetchClient {
 public:
  using Clock = std::chrono::steady_clock;
  // Runs on the transport's thread: push it to the service loop, which calls on_chunk.
  using ChunkCompletion = std::function<void(const ChunkDone&)>;

  // `tensor_digests_on_host`: a host consumer, which takes a device producer's pmix64 digests on
  // the host as the chunks land (a device consumer takes them on its device).
  FetchClient(ChunkCompletion on_chunk, bool tensor_digests_on_host)
      : on_chunk_(std::move(on_chunk)), tensor_digests_on_host_(tensor_digests_on_host) {}

  bool in_flight() const { return fetch_.has_value(); }
  // Whether abandoned fetches still have receives that have not ended (their buffers are held).
  bool draining() const { return !draining_.empty(); }
  // Whether such receives still hold a buffer not yet set aside (set_aside_stuck()).
  bool draining_holds_buffers() const;
  // Offers `set_aside` the buffer of each abandoned fetch whose receives made no progress for
  // `timeout` (taken to never end: UCX cannot cancel a receive already matched to a send, and
  // one whose sender died mid-send, a relay killed mid-version, never ends), at every call until
  // it takes that buffer; one taken is not offered again. `set_aside` returns whether it took the buffer (the caller
  // then uses another; the buffer is freed if the receives end after all). Returns how many
  // buffers were offered and refused.
  std::size_t set_aside_stuck(Clock::time_point now, Clock::duration timeout,
                              const std::function<bool(const std::shared_ptr<detail::ReceiveBuffer>&)>& set_aside);
  // An abandoned fetch's receives on a transport no longer used. Members go in reverse order:
  // the buffer (its release waits for the receives), then a one-sided route's import, then the
  // transport, which the other two need and which the buffer may have been the last to hold.
  struct AbandonedReceives {
    std::shared_ptr<transport::Transport> transport;
    std::unique_ptr<transport::RemoteRegion> remote;
    std::shared_ptr<detail::ReceiveBuffer> buffer;
  };
  // Forgets the abandoned fetches whose buffers belong to a transport `retired` says is no
  // longer offered (made afresh at a rejoin: their sender, the producer that died or a relay,
  // is gone) and returns what they held. Dropping that waits until the receives end, at most the
  // transport's release timeout (UCX then halts the retired worker, which progresses nothing
  // more, and the memory may go). Kept here, each producer that died mid-transfer cost a
  // model-sized buffer and a worker thread for the consumer's life. Not the caller's memory
  // (ConsumerOptions::caller_buffers): the store would hand it out again as soon as the buffer
  // is dropped, while the release may still wait on receives writing into it.
  std::vector<AbandonedReceives> take_retired(const std::function<bool(const transport::Transport*)>& retired);
  // The request for `version`; the fetch is in flight until finished, refused or abandoned.
  // `base`: a version this consumer holds with block digests, offered as a delta base (0: none).
  protocol::FetchRequest begin(std::uint64_t incarnation, std::uint64_t version, std::uint64_t base,
                               Clock::time_point now);
  // True for the producer's answer to the request in flight (a late answer to an older one is not).
  bool answers(const protocol::FetchReply& reply) const;
  // True for a refusal of the fetch in flight after it was answered: the producer withdrew it
  // and will send no more of it (abort() it).
  bool withdraws(const protocol::FetchReply& reply) const;
  // Bytes [0, received_bytes()) of the answered fetch in flight have arrived and will not
  // change; 0 before the answer or after a failure.
  std::uint64_t received_bytes() const;
  // The version of the answered fetch in flight (0: none).
  std::uint64_t arriving_version() const;
  // Forgets the request: refused, or not answered in time.
  void forget() { fetch_.reset(); }
  bool reply_overdue(Clock::time_point now, Clock::duration timeout) const;
  // The answered fetch has made no progress (the answer, or a chunk completing) for longer
  // than `timeout`. Progress, not the whole transfer's duration: a slow link is not a dead one.
  bool transfer_stalled(Clock::time_point now, Clock::duration timeout) const;
  // The consumer sending the answered fetch in flight, or empty (the producer, or none).
  const std::string& relay() const;

  // For serving peers: the buffer and manifest of the answered fetch in flight if it is of
  // `version` (nullopt otherwise), and whether a block of `buffer` is in and verified.
  std::optional<std::pair<std::shared_ptr<detail::ReceiveBuffer>, const Manifest*>> receiving(
      std::uint64_t version) const;
  BlockState block_state(const detail::ReceiveBuffer& buffer, std::uint32_t block);

  // A verified answer: posts one receive per chunk into `buffer`, or on a one-sided route (the
  // reply carries the slot's export) one read per chunk out of the producer's slot. For a delta
  // answer, `base` is the installed version it is against (checked to match by the caller):
  // unchanged blocks are copied from it and only the changed ones received. `wanted_blocks`
  // (one flag per chunk, empty: all) leaves out the blocks of tensors the consumer does not
  // keep (TensorSelection::blocks): neither received nor copied, they are not part of it.
  std::optional<FinishedFetch> accept(const protocol::FetchReply& reply, std::shared_ptr<detail::ReceiveBuffer> buffer,
                                      Clock::time_point now,
                                      std::shared_ptr<const detail::InstalledVersion> base = nullptr,
                                      const std::vector<bool>& wanted_blocks = {});
  // Which chunks of the answer its sender sends (FetchServer::start chooses them so): all, or a
  // delta's changed blocks against `base` (the manifest of the version offered as its base),
  // less those `wanted_blocks` leaves out (one flag per chunk; of another size: none).
  static std::vector<bool> chunks_sent(const protocol::FetchReply& reply, const Manifest* base,
                                       const std::vector<bool>& wanted_blocks);
  // An answer refused before its receives were posted (accept() not called): its sender had
  // posted the chunks' sends before answering. Over UCX's shared memory a rendezvous send ends
  // only when its receiver takes it, not when the sender closes the connection, so each would
  // hold the producer's slot until publish() gave up on it (ProducerStats::sends_abandoned):
  // the chunks it sends are taken and dropped (Transport::discard). Nothing for a one-sided
  // route (nothing is sent), nor for a plan no producer makes. Returns whether every chunk the
  // producer sends is taken so (Ack::discarded).
  static bool discard(const protocol::FetchReply& reply, transport::Transport& transport, const Manifest* base,
                      const std::vector<bool>& wanted_blocks);
  // `now`: when the completion was handled, which is progress for transfer_stalled().
  std::optional<FinishedFetch> on_chunk(const ChunkDone& done, Clock::time_point now);
  // Throws Error(kProtocol) for digests that do not fit the manifest.
  std::optional<FinishedFetch> on_digests(const protocol::Digests& digests);

  // Gives up the fetch in flight. UCX cannot always cancel a receive already matched to a
  // sender, so its buffer stays pinned until every receive has completed (a delta's base is let
  // go at once: its blocks were copied when the fetch was answered). Returns the manifest and id
  // of what was abandoned, if anything had been answered.
  std::optional<std::pair<Manifest, std::uint64_t>> abort();

 private:
  struct InFlight {
    std::uint64_t fetch_id = 0;
    Clock::time_point requested_at{};
    bool replied = false;
    Clock::time_point progressed_at{};  // the answer, then each chunk completing (abandoned: since)
    bool set_aside = false;             // abandoned, and its buffer taken by set_aside_stuck()
    Manifest manifest;
    std::shared_ptr<detail::ReceiveBuffer> buffer;
    std::vector<transport::TransferId> transfers;
    std::unique_ptr<transport::RemoteRegion> remote;  // one-sided routes: the producer's slot
    std::size_t pending = 0;
    std::string failure;
    transfer::ChunkPlan plan;
    std::vector<bool> chunk_done;
    std::size_t done_prefix = 0;  // chunks [0, done_prefix) complete
    std::shared_ptr<const detail::InstalledVersion> base;  // a delta's; held until it finishes
    bool by_block = false;  // checked_by_block(manifest): each block hashed as it lands
    std::vector<std::pair<std::uint32_t, std::uint64_t>> blocks;  // (block, digest of what landed)
    std::uint64_t bytes_received = 0;
    bool digests_pending = false;
    std::vector<std::byte> signature;
    std::string relay;
    bool relay_fault = false;
    std::vector<bool> verified;  // per block: in, and matching its digest
    // A device producer's per-tensor pmix64 digests, summed chunk by chunk as they land in a host
    // consumer's buffer (a device consumer takes them on its device instead).
    std::optional<pmix64::Accumulator> tensor_digests;
  };
  std::optional<FinishedFetch> maybe_finish();

  ChunkCompletion on_chunk_;
  bool tensor_digests_on_host_ = false;
  std::uint64_t next_fetch_id_ = 1;
  std::optional<InFlight> fetch_;
  std::map<std::uint64_t, InFlight> draining_;  // abandoned fetches whose receives are still live
};

}  // namespace modelcast::consumer
