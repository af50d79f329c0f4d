// Control-plane messages and their msgpack encoding.
//
// Every message is a msgpack array [magic, protocol_version, type, body-map]. Decoding checks
// all of it and throws Error(kProtocol) naming what was wrong; callers log and drop such
// messages, so a bad peer can never change what a consumer serves.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "core/manifest.h"

namespace modelcast::protocol {

inline constexpr std::uint32_t kMagic = 0x4D435354;  // "MCST"
inline constexpr std::uint16_t kVersion = 1;

// PUB -> SUB, topic frame = model name. Sent at each publish and as a periodic heartbeat;
// `version` is the newest published (0 before the first).
struct Announce {
  std::uint64_t incarnation = 0;
  std::uint64_t version = 0;
  std::int64_t step = 0;
  std::int64_t publish_time_ns = 0;  // CLOCK_REALTIME of the publish() call (0 in heartbeats before any)
};

// DEALER -> ROUTER: a consumer introduces itself and its transport address.
struct JoinRequest {
  std::string model;
  std::string consumer_name;
  std::vector<std::byte> transport_address;
  std::string host_id;  // the kernel's boot id: equal on one machine, network namespaces included
};

struct JoinReply {
  bool ok = false;
  std::string error;
  std::uint64_t incarnation = 0;
  std::string announce_endpoint;
  std::uint64_t latest_version = 0;
  std::string transport;  // the producer's transport name; the consumer must speak it
};

// Ask for a version (0 = newest). The producer leases the slot and starts sending chunk i with
// tag (fetch_id << kChunkBits) | i.
struct FetchRequest {
  std::uint64_t incarnation = 0;  // the producer the consumer joined; a stale one is refused
  std::uint64_t version = 0;
  std::uint64_t fetch_id = 0;
};

struct FetchReply {
  bool ok = false;
  std::string error;
  std::uint64_t fetch_id = 0;
  std::uint64_t chunk_bytes = 0;
  bool digests_pending = false;  // the manifest's digests follow in a Digests message
  Manifest manifest;
};

// Producer -> consumer: the digests of a fetch answered before they were computed (the producer
// hashes a snapshot while it is already being sent).
struct Digests {
  std::uint64_t fetch_id = 0;
  std::uint64_t version = 0;
  std::vector<std::uint64_t> digests;  // one per manifest tensor, in manifest order
};

// Consumer -> producer after a fetch ends: releases the lease; `ok` = installed.
struct Ack {
  std::uint64_t incarnation = 0;
  std::uint64_t version = 0;
  std::uint64_t fetch_id = 0;
  bool ok = false;
  std::string error;
};

// Consumer -> producer, periodically: "still here". A consumer silent for long is dropped.
struct Ping {
  std::uint64_t incarnation = 0;
};

using Message = std::variant<Announce, JoinRequest, JoinReply, FetchRequest, FetchReply, Ack, Ping, Digests>;

inline constexpr unsigned kChunkBits = 20;
inline std::uint64_t chunk_tag(std::uint64_t fetch_id, std::uint64_t chunk) {
  return (fetch_id << kChunkBits) | chunk;
}

std::vector<std::byte> encode(const Message& message);
// Throws Error(kProtocol) for anything but a well-formed message of this protocol version.
Message decode(std::span<const std::byte> bytes);

}  // namespace modelcast::protocol
