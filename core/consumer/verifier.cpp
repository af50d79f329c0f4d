#include "core/consumer/verifier.h"

#include <cstdio>

#include "core/security/manifest_signature.h"
#include "core/transfer/chunk_plan.h"
#include "modelcast/error.h"

namespace modelcast::consumer {

void check_reply(const VerifierPolicy& policy, const protocol::FetchReply& reply) {
  const Manifest& manifest = reply.manifest;
  // This consumer's own capacity, not a fault of the producer's: said as such.
  if (manifest.total_bytes > policy.limits.max_total_bytes) {
    // With ranks each fetches one rank's pieces: the figure is that rank's, not the model's.
    const std::string what = manifest.rank_count > 1
                                 ? "rank " + std::to_string(manifest.rank) + "'s pieces of step " + std::to_string(manifest.step) +
                                       " take " + std::to_string(manifest.total_bytes) + " bytes"
                                 : "version " + std::to_string(manifest.version) + " is a " +
                                       std::to_string(manifest.total_bytes) + "-byte model";
    throw Error(ErrorCode::kResource, what + "; this consumer takes at most " +
                                          std::to_string(policy.limits.max_total_bytes) +
                                          " (max_model_bytes, its largest caller buffer, or half the machine's memory)");
  }
  validate_manifest(manifest, policy.limits);
  if (manifest.model != policy.model) {
    throw Error(ErrorCode::kProtocol, "manifest is for model '" + manifest.model + "'");
  }
  transfer::check_plan({manifest.total_bytes, reply.chunk_bytes});
  // Blocks are chunks: the same boundaries for the digests and the transfer.
  if (manifest.block_bytes != 0 && manifest.block_bytes != reply.chunk_bytes) {
    throw Error(ErrorCode::kProtocol, "fetch reply with " + std::to_string(reply.chunk_bytes) + "-byte chunks for " +
                                          std::to_string(manifest.block_bytes) + "-byte blocks");
  }
  // XXH3 integrity is checked block by block: without blocks nothing would check the bytes.
  if (manifest.integrity && manifest.digest_kind == DigestKind::kXxh3_64 && manifest.block_bytes == 0) {
    throw Error(ErrorCode::kProtocol, "version " + std::to_string(manifest.version) +
                                          " carries XXH3 integrity without the blocks it is checked by");
  }
  if (reply.base_version != 0 && (reply.digests_pending || manifest.block_digests.empty())) {
    throw Error(ErrorCode::kProtocol, "a delta answer without the block digests that define it");
  }
  // One rank's pieces of a sharded model are not the model: the assembler checks the layout of
  // the whole tensors they make (a correct global layout was refused here, piece by piece).
  if (manifest.rank_count <= 1) check_expected_layout(policy.expected_layout, manifest);
  if (!policy.producer) return;
  if (!manifest.integrity) {
    throw Error(ErrorCode::kAuthentication, "version " + std::to_string(manifest.version) +
                                                " carries no digests, so its signature cannot cover its bytes");
  }
  if (!reply.digests_pending) check_signature(*policy.producer, manifest, reply.signature);
}

void check_signature(const security::PublicKey& producer, const Manifest& manifest,
                     std::span<const std::byte> signature) {
  if (signature.empty()) {
    throw Error(ErrorCode::kAuthentication, "version " + std::to_string(manifest.version) + " is not signed");
  }
  if (!security::verify_manifest(manifest, signature, producer)) {
    throw Error(ErrorCode::kAuthentication, "version " + std::to_string(manifest.version) +
                                                " does not carry the pinned producer's signature "
                                                "(tampered in transit, or another producer)");
  }
}

void check_not_a_replay(const Manifest* installed, const Manifest& incoming) {
  if (installed && installed->incarnation != incoming.incarnation &&
      incoming.publish_time_ns < installed->publish_time_ns) {
    // A restarted producer whose clock is behind looks the same as a replay: say both, and by
    // how much, so that an operator can tell an attack from a clock.
    const double earlier_s = static_cast<double>(installed->publish_time_ns - incoming.publish_time_ns) / 1e9;
    char by[32];
    std::snprintf(by, sizeof by, "%.3f", earlier_s);
    throw Error(ErrorCode::kAuthentication,
                "version " + std::to_string(incoming.version) + " of another producer run was published " + by +
                    " s before the version installed, by the producers' clocks: a replay of an older run, or a "
                    "producer restarted on a host whose clock is behind (its versions are taken once they are "
                    "published after the installed one)");
  }
}

void check_arrived(const VerifierPolicy& policy, const Manifest& manifest, const Arrived& arrived,
                   std::span<const std::byte> signature, const Manifest* installed) {
  if (arrived.by_block) {
    check_blocks(manifest, arrived.blocks);
  } else if (manifest.integrity) {
    check_digests(manifest, arrived.tensor_digests);
  }
  if (!policy.producer) return;
  check_signature(*policy.producer, manifest, signature);
  check_not_a_replay(installed, manifest);
}

void check_blocks(const Manifest& manifest, const std::vector<std::pair<std::uint32_t, std::uint64_t>>& received) {
  for (const auto& [block, digest] : received) {
    if (block < manifest.block_digests.size() && digest == manifest.block_digests[block]) continue;
    const std::uint64_t offset = std::uint64_t{block} * manifest.block_bytes;
    const std::uint64_t end = offset + manifest.block_bytes;
    // The tensors whose bytes the block holds: what a reader of the error can look at.
    std::vector<std::string> names;
    for (const auto& t : manifest.tensors) {
      if (t.size != 0 && t.offset < end && offset < t.offset + t.size) names.push_back("'" + t.spec.name + "'");
    }
    std::string where;
    if (names.size() == 1) where = " (in tensor " + names.front() + ")";
    if (names.size() > 1) where = " (in tensors " + names.front() + " to " + names.back() + ")";
    throw Error(ErrorCode::kIntegrity, "block " + std::to_string(block) + " at byte " + std::to_string(offset) + where +
                                           " of version " + std::to_string(manifest.version) +
                                           " failed its digest check");
  }
}

void check_digests(const Manifest& manifest, const std::vector<std::uint64_t>& received) {
  for (std::size_t i = 0; i < manifest.tensors.size(); ++i) {
    const auto& t = manifest.tensors[i];
    if (i >= received.size() || received[i] != t.digest) {
      throw Error(ErrorCode::kIntegrity, "tensor '" + t.spec.name + "' of version " +
                                             std::to_string(manifest.version) + " failed its digest check");
    }
  }
}

}  // namespace modelcast::consumer
