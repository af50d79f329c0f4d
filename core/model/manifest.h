// The manifest: what a version contains and where each tensor sits in a snapshot slot.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/cuda/digest_kind.h"
#include "modelcast/error.h"
#include "modelcast/tensor.h"

namespace modelcast {

// Tensors start on this boundary inside a slot: keeps every tensor aligned for any dtype and
// for vectorised digest and copy code.
inline constexpr std::size_t kTensorAlignment = 256;

struct TensorEntry {
  TensorSpec spec;
  std::uint64_t offset = 0;  // from the start of the slot
  std::uint64_t size = 0;    // bytes
  // Of the bytes, when the manifest says integrity and has no blocks (device versions: pmix64);
  // 0 for a version checked by its blocks.
  std::uint64_t digest = 0;
  // A piece of a tensor held by several producer ranks (TensorRef::global_shape): the whole
  // tensor's shape and the piece's offset in it. Both empty: the tensor whole.
  std::vector<std::int64_t> global_shape;
  std::vector<std::int64_t> global_offset;

  bool is_piece() const noexcept { return !global_shape.empty(); }
};

struct Manifest {
  std::string model;
  std::uint64_t incarnation = 0;  // random per producer process
  std::uint64_t version = 0;
  std::int64_t step = 0;
  std::int64_t publish_time_ns = 0;  // CLOCK_REALTIME at the publish() call
  std::map<std::string, std::string> metadata;
  bool integrity = true;
  // XXH3-64 per block for host snapshots; pmix64-v1 per tensor for device snapshots, hashed
  // where they live.
  DigestKind digest_kind = DigestKind::kXxh3_64;
  std::uint64_t total_bytes = 0;
  std::vector<TensorEntry> tensors;
  // The snapshot as blocks: block i is bytes [i * block_bytes, min((i + 1) * block_bytes,
  // total_bytes)), hashed with XXH3-64: a host version's integrity is its block digests, which
  // the signature covers, so any block can be checked on its own, from any source. What changed
  // between two versions is the blocks whose digests differ, so a consumer holding one receives
  // only those of the next. Empty for versions hashed on a device and without integrity: such a
  // version is fetched whole.
  std::uint64_t block_bytes = 0;
  std::vector<std::uint64_t> block_digests;
  // A model published by several producer ranks (ProducerOptions::rank_count): this version is
  // rank `rank`'s pieces of step `step`. rank_count 1: the whole model.
  std::uint32_t rank = 0;
  std::uint32_t rank_count = 1;
  // rank_count > 1: CLOCK_REALTIME when this producer run (its incarnation) started; 0 when the
  // producer did not say (before 0.10). A consumer puts pieces together only where each was
  // published after every other piece's run started (RankAssembler).
  std::int64_t start_time_ns = 0;
  // rank_count > 1: ProducerOptions::run_id, empty when not set. Pieces of two run ids are
  // never put together.
  std::string run_id;
};

// Lays tensors out back to back (aligned) in the given order. Throws Error(kInvalidArgument)
// naming the tensor for an empty or duplicate name, a negative extent or an unknown dtype.
std::vector<TensorEntry> plan_layout(const std::vector<TensorSpec>& specs, std::uint64_t* total_bytes);

// What a received manifest may declare. A peer's manifest decides how much a consumer
// allocates and how many receives it posts, so each of these is checked before either happens.
struct ManifestLimits {
  std::uint64_t max_total_bytes = std::uint64_t{1} << 40;  // the consumer narrows it to its memory
  std::size_t max_tensors = std::size_t{1} << 16;
  std::size_t max_rank = 16;
  std::size_t max_name_bytes = 4096;
  std::size_t max_metadata_entries = 1024;
  std::size_t max_metadata_bytes = std::size_t{1} << 20;  // keys and values together
};

// What makes `metadata` unusable (more entries or bytes than `limits` allow; a key that is no
// name (name_problem) or a value with a NUL byte or not UTF-8: C readers stop at the NUL and
// Python cannot decode it), naming the entry, or nullopt. Newlines are fine in values.
std::optional<std::string> metadata_problem(const std::map<std::string, std::string>& metadata,
                                            const ManifestLimits& limits = {});

// Throws Error(code) naming the tensor when its spec cannot be: an empty or unusable name
// (name_problem), a rank past ManifestLimits, an unknown memory kind or dtype, a negative extent.
void check_spec(const TensorSpec& spec, ErrorCode code);

// Throws Error(code) naming the tensor when its placement (a piece's global shape and offset) is
// not both-or-neither, of its rank, and inside the global shape.
void check_placement(const TensorEntry& entry, ErrorCode code);

// Block count of a manifest's block_bytes over its total_bytes (0 without blocks).
std::size_t block_count(const Manifest& manifest);

// Whether a version's bytes are checked block by block (integrity with XXH3 blocks) rather than
// tensor by tensor (pmix64 on a device) or not at all.
bool checked_by_block(const Manifest& manifest);

// Checks a received manifest is self-consistent and within `limits` (sizes match shapes, no
// overflow, tensors inside total_bytes and total_bytes no larger than the layout needs, names
// unique, one digest per block). Throws Error(kProtocol) saying what is wrong.
void validate_manifest(const Manifest& manifest, const ManifestLimits& limits = {});

// Throws Error(kLayoutMismatch) listing the first differences between what a consumer expects
// and what the producer sent (missing, unexpected, dtype or shape differences).
void check_expected_layout(const std::vector<TensorSpec>& expected, const Manifest& manifest);

}  // namespace modelcast
