// How a snapshot is cut into transfers: one definition for the sender and the receiver.
//
// Chunk i of a fetch covers bytes [i * chunk_bytes, min((i + 1) * chunk_bytes, total)) and
// travels with tag protocol::chunk_tag(fetch_id, i). The producer picks chunk_bytes and tells
// the consumer in its FetchReply; the consumer refuses a plan it must not follow.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/wire/protocol.h"

namespace modelcast::transfer {

// Each chunk costs the receiver one posted receive and its bookkeeping: chunks this small or
// smaller are refused (a hostile plan of 1-byte chunks would cost hundreds of bytes per byte).
inline constexpr std::uint64_t kMinChunkBytes = 64u << 10;
// One chunk is one posted transfer and one verified block: a gibibyte bounds what a receiver
// holds unverified and keeps every sum of an offset and a chunk far from 2^64.
inline constexpr std::uint64_t kMaxChunkBytes = std::uint64_t{1} << 30;
// The chunk index has kChunkBits bits of the tag.
inline constexpr std::uint64_t kMaxChunks = std::uint64_t{1} << protocol::kChunkBits;

struct ChunkPlan {
  std::uint64_t total_bytes = 0;
  std::uint64_t chunk_bytes = 0;

  std::size_t count() const {
    // Not (total + chunk - 1) / chunk: that wraps to 0 chunks for a chunk near 2^64.
    return chunk_bytes == 0 ? 0 : static_cast<std::size_t>(total_bytes / chunk_bytes + (total_bytes % chunk_bytes != 0));
  }
  std::uint64_t offset(std::size_t chunk) const { return chunk * chunk_bytes; }
  std::uint64_t length(std::size_t chunk) const { return std::min(chunk_bytes, total_bytes - offset(chunk)); }
  // Bytes [0, prefix_end(n)) are covered by chunks [0, n).
  std::uint64_t prefix_end(std::size_t chunks) const { return std::min(chunks * chunk_bytes, total_bytes); }
};

// A version's block list (its block digests; the blocks a fetch sends) travels as one msgpack
// array, which receivers decode up to DecodeLimits::max_array elements: a model cut into more
// blocks could never be received.
inline constexpr std::uint64_t kMaxBlocks = std::uint64_t{1} << 17;
static_assert(kMaxBlocks <= kMaxChunks && kMaxBlocks <= protocol::DecodeLimits{}.max_array);

// The producer's plan for a model: its chunk option, raised for a model that would otherwise
// have more than kMaxBlocks blocks.
inline ChunkPlan producer_plan(std::uint64_t total_bytes, std::uint64_t chunk_option) {
  return {total_bytes, std::max(chunk_option, (total_bytes + kMaxBlocks - 1) / kMaxBlocks)};
}

// Chunks when consumers relay: a block travels down a chain of relays one hop after another,
// so a chain of n costs about (blocks + n - 1) blocks' time; about 64 blocks a model keep that
// within a few percent of one transfer for chains of a few consumers. Never above the chunk
// option, never below 256 KiB (each block is a message and a digest at every hop).
inline std::uint64_t relay_chunk_bytes(std::uint64_t total_bytes, std::uint64_t chunk_option) {
  constexpr std::uint64_t kGrain = 64u << 10, kFloor = 256u << 10, kBlocksPerModel = 64;
  const std::uint64_t wanted = (total_bytes / kBlocksPerModel + kGrain - 1) / kGrain * kGrain;
  return std::min(chunk_option, std::max(kFloor, wanted));
}

// The blocks whose digests differ between a base version and the next, in order: what a
// consumer holding the base must receive (the rest it copies from the base). One definition for
// the producer, which sends them, and the consumer, which posts their receives. Both digest
// lists must be of one length.
std::vector<std::uint32_t> changed_blocks(const std::vector<std::uint64_t>& base, const std::vector<std::uint64_t>& next);

// Throws Error(kProtocol) for a plan a receiver must not follow: zero or tiny chunks, or more
// chunks than a tag can number.
void check_plan(const ChunkPlan& plan);

}  // namespace modelcast::transfer
