// What a consumer checks before it accepts a version: the manifest (self-consistent, within
// this consumer's limits, the expected layout), the chunk plan, the producer's signature, and
// at the end the digests of the bytes that arrived. Pure functions: each throws Error naming
// what was wrong, and the caller rejects the version and keeps the last good one.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/model/manifest.h"
#include "core/security/key_codec.h"
#include "core/wire/protocol.h"

namespace modelcast::consumer {

struct VerifierPolicy {
  std::string model;
  ManifestLimits limits;
  std::vector<TensorSpec> expected_layout;       // empty: any layout
  std::optional<security::PublicKey> producer;   // set: versions must carry its signature
};

// The answer to a fetch, before anything is allocated: kProtocol, kLayoutMismatch or
// kAuthentication. The signature is checked here when it came with the reply.
void check_reply(const VerifierPolicy& policy, const protocol::FetchReply& reply);

// kAuthentication unless the pinned producer signed exactly this manifest.
void check_signature(const security::PublicKey& producer, const Manifest& manifest,
                     std::span<const std::byte> signature);

// kAuthentication if `incoming`, from another producer run than `installed`, was published
// before it: a replayed old version must not roll the model back.
void check_not_a_replay(const Manifest* installed, const Manifest& incoming);

// kIntegrity naming the first tensor whose received bytes do not match its digest.
void check_digests(const Manifest& manifest, const std::vector<std::uint64_t>& received);

// kIntegrity naming the first received block (and the tensor it starts in) whose bytes do not
// match its digest: `received` holds (block index, digest of what arrived).
void check_blocks(const Manifest& manifest, const std::vector<std::pair<std::uint32_t, std::uint64_t>>& received);

// What arrived: the digests of every tensor (a whole version from the producer), or, `by_block`,
// of the blocks received (every block of a relayed version; a delta's changed ones, the rest
// being the verified base's bytes under equal block digests).
struct Arrived {
  std::vector<std::uint64_t> tensor_digests;
  bool by_block = false;
  std::vector<std::pair<std::uint32_t, std::uint64_t>> blocks;
};

// Everything checked once the bytes are in: the digests (integrity on) and, with a pinned
// producer, its signature and that the version replays no earlier run (`installed`: the
// version readers see now, or null).
void check_arrived(const VerifierPolicy& policy, const Manifest& manifest, const Arrived& arrived,
                   std::span<const std::byte> signature, const Manifest* installed);

}  // namespace modelcast::consumer
