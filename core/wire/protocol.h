// Control-plane messages and their msgpack encoding.
//
// Every message is a msgpack array [magic, protocol_version, type, body-map]. Decoding checks
// all of it and throws Error(kProtocol) naming what was wrong; callers log and drop such
// messages, so a bad peer can never change what a consumer serves. Decoding is bounded (see
// DecodeLimits): no message, however it is crafted, makes the decoder allocate more than a
// small multiple of its own size.
//
// Text a peer wrote for people (every `error`, FetchReply::relay) ends up in our errors and
// logs; decode() hands it over printable (printable_text, backslashes kept) and cut to
// kShownPeerTextBytes, so that no use of it can let a peer forge a log line or log megabytes.
//
// Message order, one consumer and one version:
//   consumer DEALER -> producer ROUTER  JoinRequest        (again after a refusal or a restart)
//   producer ROUTER -> consumer DEALER  JoinReply          (incarnation, newest version)
//   producer ROUTER -> consumer DEALER  Announce           (at publish() entry; heartbeats), to
//                                                          joined consumers only; a last one,
//                                                          `stopping`, when the producer closes
// A group member (JoinRequest::group) fetches the version its announcements name, holds it
// verified, acks, and switches when an announcement says the group committed it.
//   consumer -> producer                FetchRequest       (the newest announced version)
//   producer -> consumer                FetchReply         (manifest, signature if signed)
//   producer -> consumer (data plane)   chunk i of the slot, tag chunk_tag(fetch_id, i)
//   producer -> consumer                Digests            (only if the reply said pending)
//   consumer -> producer                Ack                (installed or why not; ends the lease)
//   consumer -> producer                Ping               (every second while joined)
//   consumer -> producer                Leave              (when it closes: forget it now)
//   producer -> consumer                FetchReply         (fetch id 0, kNotJoined: it was dropped)
// A relayed fetch (the producer's relay_fanout is on): the FetchReply names a relay, and the
// producer sends that consumer a RelayOrder instead of the chunks:
//   producer -> relay                   RelayOrder         (send these blocks to that address)
//   relay -> consumer (data plane)      block i, tag chunk_tag(fetch_id, i), once verified there
//   relay -> producer                   RelayFailed        (only if it cannot serve the order)
//   producer -> relay                   RelayCancel        (the fetch ended otherwise)
// On a one-sided route (CUDA IPC between device consumers on one host) the consumer reads the
// relay's installed buffer itself, so the producer answers the fetch only once the relay has
// pinned that buffer and exported it:
//   producer -> relay                   RelayOrder         (export_region: pin it, export it)
//   relay -> producer                   RelayOffer         (the buffer's export) or RelayFailed
//   producer -> consumer                FetchReply         (names the relay; region: its export)
//   consumer -> producer                Ack                (as usual)
//   producer -> relay                   RelayCancel        (whenever the fetch ends: unpin it)
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/model/manifest.h"
#include "modelcast/consumer.h"
#include "transports/transport_registry.h"

namespace modelcast::protocol {

inline constexpr std::uint32_t kMagic = 0x4D435354;  // "MCST"
inline constexpr std::uint16_t kVersion = 8;

// The most producer ranks one model may have. A consumer runs a connection, a UCX worker and a
// service thread per rank; without a bound, one join reply listing 100,000 endpoints (from a
// misconfigured trainer, or anyone on a plaintext control plane) exhausts its process.
inline constexpr std::uint32_t kMaxRanks = 256;

// Why a request was refused, so the other side can act on it without reading prose.
enum class Refusal : std::uint8_t {
  kNone = 0,
  kWrongModel = 1,       // the producer serves another model
  kBadRequest = 2,       // empty name, unusable transport address, ...
  kFull = 3,             // the producer has as many consumers as it takes
  kNotJoined = 4,        // join (again) before fetching
  kStaleIncarnation = 5, // the producer restarted since the join: join again
  kBusy = 6,             // this consumer already has a fetch in flight
  kNotHeld = 7,          // the version asked for is gone or superseded; ask for the newest
  kNothingPublished = 8,
  kNoTransport = 9,      // none of the transports offered serves this consumer
};

// Upper bounds on what decode() accepts. Defaults fit a manifest of 65,536 tensors; messages
// larger than max_message_bytes are refused before msgpack sees them.
struct DecodeLimits {
  std::size_t max_message_bytes = std::size_t{64} << 20;
  std::size_t max_array = std::size_t{1} << 17;   // elements of any one array
  std::size_t max_map = std::size_t{1} << 12;     // entries of any one map (metadata)
  std::size_t max_string = std::size_t{1} << 20;  // bytes of any one string
  std::size_t max_binary = std::size_t{1} << 16;  // bytes of any one binary (addresses, signatures)
  std::size_t max_depth = 8;
};

// What a group of consumers (ConsumerOptions::group) has committed, told with each announcement.
struct GroupState {
  std::uint64_t committed = 0;  // every member switches to this version (0: none yet)
  std::uint32_t members = 0;    // joined members; fewer than the group's size: it waits
  // The version the group last gave up because a member rejected it, while the group has not
  // committed a newer one (0: none): every member says so, also one that never fetched it.
  std::uint64_t given_up = 0;
};

// ROUTER -> each joined consumer's DEALER. Sent at each publish and as a periodic heartbeat;
// `version` is the newest published (0 before the first). A consumer that hears none for its
// producer_timeout has been forgotten (or the producer is gone) and joins again.
struct Announce {
  std::uint64_t incarnation = 0;
  std::uint64_t version = 0;
  std::int64_t step = 0;
  std::int64_t publish_time_ns = 0;  // CLOCK_REALTIME of the publish() call (0 in heartbeats before any)
  // To members of a group only (JoinRequest::group): `version` is then the version the group is
  // to fetch (its target, or the committed one when none), and `group` says what it committed.
  std::optional<GroupState> group;
  // The last announcement of this incarnation: its Producer is being destroyed (the end of the
  // run, or before a restart). The consumer keeps its version and waits for the next producer
  // without taking the silence that follows for a failure. Absent (false) from producers before
  // it, and ignored by consumers before it (a heartbeat to them).
  bool stopping = false;
};

// DEALER -> ROUTER: a consumer introduces itself, where it receives, and the transports it
// allows (preference order, each with its capabilities and address); the producer chooses.
struct JoinRequest {
  std::string model;
  std::string consumer_name;
  std::vector<transport::TransportOffer> offers;
  transport::MemoryLocation memory;  // where the consumer's receive buffers live
  std::string host_id;  // the kernel's boot id: equal on one machine, network namespaces included
  std::uint64_t process = 0;  // random per process: equal only for a producer in the same process
  // Random per Consumer object: a join from a new connection with the same session (and key)
  // is the same consumer reconnecting and replaces its old record; any other join never does.
  std::uint64_t session = 0;
  // A path the consumer insists on (ConsumerOptions::path); nullopt: the producer chooses.
  std::optional<DeliveryPath> path;
  // The consumer serves blocks it holds to other consumers when the producer asks it to.
  bool serves_peers = false;
  // A member of this group of `group_size` consumers that switch versions together; empty: none.
  std::string group;
  std::uint32_t group_size = 0;
  // What the consumer keeps of each tensor (ConsumerOptions::wants; empty: everything): the
  // producer sends it only the blocks that hold those bytes.
  std::vector<TensorWant> wants;
};

struct JoinReply {
  bool ok = false;
  Refusal refusal = Refusal::kNone;
  std::string error;
  std::uint64_t incarnation = 0;
  std::uint64_t latest_version = 0;
  std::string transport;  // the offer the producer chose
  DeliveryPath path = DeliveryPath::kHostUcx;
  // A model published by several producer ranks: this producer's rank, and (from rank 0) every
  // rank's control endpoint in rank order; the consumer joins the others there. Empty: one producer.
  std::uint32_t rank = 0;
  std::vector<std::string> rank_endpoints{};
  // The size of the producer's snapshots once its tensors are prepared (0: not yet), so that the
  // consumer can make its first receive buffer before the first version.
  std::uint64_t model_bytes = 0;
};

// Ask for a version (0 = newest). The producer leases the slot and starts sending chunk i with
// tag (fetch_id << kChunkBits) | i.
struct FetchRequest {
  std::uint64_t incarnation = 0;  // the producer the consumer joined; a stale one is refused
  std::uint64_t version = 0;
  std::uint64_t fetch_id = 0;
  // A version of this incarnation the consumer holds verified, with its block digests (0:
  // none): the producer may then send only the blocks that differ from it.
  std::uint64_t base_version = 0;
  // What to send of this version, when it is not the join's wants (a consumer assembling several
  // ranks asks each for the regions it takes from it); empty with has_wants false: the join's.
  bool has_wants = false;
  std::vector<TensorWant> wants{};
};

// A refusal that carries the id of a fetch already answered withdraws that fetch: the producer
// sends no more of it and has released its lease (a device version whose host copy failed
// while its chunks were going out). A kNotJoined refusal with fetch id 0 (no fetch has it)
// answers nothing: the producer has dropped this consumer and announces nothing more to it;
// the consumer joins again.
struct FetchReply {
  bool ok = false;
  Refusal refusal = Refusal::kNone;
  std::string error;
  std::uint64_t fetch_id = 0;
  std::uint64_t chunk_bytes = 0;
  bool digests_pending = false;  // the manifest's digests follow in a Digests message
  // Non-zero: a delta against this version (the request's base): only the blocks whose digest
  // differs from the base's are sent; the consumer copies the others from the base. Never with
  // digests pending (the block digests are the delta).
  std::uint64_t base_version = 0;
  Manifest manifest;
  // Ed25519 signature of manifest_signing_bytes(manifest) by the producer's key; empty when the
  // producer signs nothing or the digests (and so the signature) follow in a Digests message.
  std::vector<std::byte> signature;
  // One-sided routes only: the slot's export (Transport::export_region), which the consumer
  // reads the version out of; nothing is sent. Empty for two-sided routes.
  std::vector<std::byte> region;
  // Non-empty: the blocks come from this other consumer (its name, for reports), not from the
  // producer. The manifest then carries its block digests: every block is checked as it lands.
  std::string relay;
};

// Producer -> consumer: the digests of a fetch answered before they were computed (the producer
// hashes a snapshot while it is already being sent).
struct Digests {
  std::uint64_t fetch_id = 0;
  std::uint64_t version = 0;
  std::vector<std::uint64_t> digests;  // one per manifest tensor, in manifest order
  std::vector<std::uint64_t> block_digests;  // one per block, or none (a version without blocks)
  std::vector<std::byte> signature;    // of the manifest with these digests, when signing
};

// How the relay a FetchReply named failed the fetch, if it did.
enum class RelayFault : std::uint8_t {
  kNone = 0,
  kStalled = 1,   // the relay stopped sending: no block for transfer_timeout, or its connection failed
  kBadBlock = 2,  // a block that did not match its signed digest
};

// Consumer -> producer after a fetch ends: releases the lease; `ok` = installed.
struct Ack {
  std::uint64_t incarnation = 0;
  std::uint64_t version = 0;
  std::uint64_t fetch_id = 0;
  bool ok = false;
  std::string error;
  // The relay the reply named failed this fetch: the producer serves this consumer itself, and
  // passes the relay over (for a stall, only if the relay held the whole version).
  RelayFault relay_fault = RelayFault::kNone;
  // Not ok, and no verdict on the version: its transfer failed (the transport, a timeout) or no
  // buffer was free. The consumer fetches it again; a group keeps it as its target. Absent
  // (false) from consumers before it: their every failure ended a group's target.
  bool again = false;
  // Not ok, and the consumer takes every chunk the producer sends of this fetch and drops it
  // (Transport::discard): the sends end by themselves, and the producer closes the connection
  // only if they have not ended soon after (FetchServer::kDiscardDrain). Absent (false) from
  // consumers before it: their connection is closed to end the sends.
  bool discarded = false;
};

// Producer -> a consumer that holds (or is receiving) `version`: send blocks `blocks` of it to
// the consumer at `peer_address`, block i with tag chunk_tag(fetch_id, i), each once it is
// verified here. `block_bytes` must be the version's own block size.
struct RelayOrder {
  std::uint64_t incarnation = 0;
  std::uint64_t order_id = 0;  // unique per producer incarnation
  std::uint64_t version = 0;
  std::uint64_t fetch_id = 0;  // the receiving consumer's
  std::uint64_t block_bytes = 0;
  std::vector<std::uint32_t> blocks;
  std::vector<std::byte> peer_address;  // the receiver's transport address
  bool detect_failure = true;           // connect with peer-failure detection (not on one host)
  // A one-sided route: send nothing; pin the buffer holding the installed version (whole) and
  // answer with a RelayOffer carrying its export, which the receiver reads. Nothing is sent
  // to `peer_address` (empty) and `blocks` is empty: the receiver reads the whole version.
  bool export_region = false;
};

// Producer -> relay: the fetch an order served ended (failed, or the receiver left): stop.
// Also ends an exported order, whose buffer stays pinned until this comes.
struct RelayCancel {
  std::uint64_t incarnation = 0;
  std::uint64_t order_id = 0;
  bool delivered = false;  // the receiver installed what the order served (for the relay's counters)
};

// Relay -> producer: an export_region order is served: its buffer is pinned and `region` is its
// export (Transport::export_region), which the producer passes on in the receiver's FetchReply.
struct RelayOffer {
  std::uint64_t incarnation = 0;
  std::uint64_t order_id = 0;
  std::vector<std::byte> region;
};

// Relay -> producer: the order cannot be served (the version is no longer held here, the
// receiver is unreachable, a send failed); the producer withdraws the fetch it served.
struct RelayFailed {
  std::uint64_t incarnation = 0;
  std::uint64_t order_id = 0;
  std::string error;
};

// Consumer -> producer, periodically: "still here". A consumer silent for long is dropped.
struct Ping {
  std::uint64_t incarnation = 0;
};

// Consumer -> producer, when it closes: forget it now (its fetch ends, the fetches it relays are
// withdrawn, it is no relay any more), not once the silence limit has passed. Incarnation 0 (no
// producer has one): the consumer closed before the answer to its join came; the connection
// names it.
struct Leave {
  std::uint64_t incarnation = 0;
};

using Message = std::variant<Announce, JoinRequest, JoinReply, FetchRequest, FetchReply, Ack, Ping, Digests,
                             RelayOrder, RelayCancel, RelayFailed, RelayOffer, Leave>;

// The most of a peer's text (see the top of this file) that decode() keeps.
inline constexpr std::size_t kShownPeerTextBytes = 1024;

// How a JoinReply's error begins when the producer could not connect to the consumer's transport
// address (kBadRequest): the consumer then makes its transports afresh (a worker made while a
// network device had no carrier lacks that device for good). Part of the protocol: both sides
// read it.
inline constexpr std::string_view kUnreachableConsumer = "cannot reach the consumer's ";

inline constexpr unsigned kChunkBits = 20;
inline std::uint64_t chunk_tag(std::uint64_t fetch_id, std::uint64_t chunk) {
  return (fetch_id << kChunkBits) | chunk;
}

// What each channel accepts: requests to the producer are small (a join's address is the
// largest part); what the producer sends carries manifests (the defaults).
inline const DecodeLimits kRequestLimits = [] {
  DecodeLimits limits;
  limits.max_message_bytes = 256u << 10;
  return limits;
}();
// The most a request's wants may take encoded (fetch_request_bytes): the request limit less room
// for a join's other fields (its UCX address, names, a group). A request over the limit is
// dropped by the producer's socket unread, and its consumer heard nothing back.
inline constexpr std::size_t kMaxWantsBytes = (256u << 10) - (64u << 10);
std::vector<std::byte> encode(const Message& message);
// What a FetchRequest carrying `wants` takes encoded.
std::size_t fetch_request_bytes(const std::vector<TensorWant>& wants);

// The protocol version a message claims, when it is a modelcast envelope (magic checked) of
// another version than this build's; std::nullopt for anything else. Reads the envelope only.
std::optional<std::uint16_t> foreign_version(std::span<const std::byte> bytes);
// A join refusal that a consumer speaking protocol `version` decodes, saying it speaks another
// version than this producer; std::nullopt for any version but 5, 6 and 7, the ones before
// this, whose join replies this build still writes. Without it such a consumer would wait for ever,
// silently.
std::optional<std::vector<std::byte>> encode_version_refusal(std::uint16_t version);
// Throws Error(kProtocol) for anything but a well-formed message of this protocol version
// within `limits`; never throws anything else and never allocates beyond the limits.
Message decode(std::span<const std::byte> bytes, const DecodeLimits& limits = {});

// The bytes a producer signs and a consumer verifies: a fixed domain prefix and the manifest's
// canonical encoding (every field, digests included, in one fixed order).
std::vector<std::byte> manifest_signing_bytes(const Manifest& manifest);

}  // namespace modelcast::protocol
