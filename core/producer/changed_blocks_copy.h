// publish()'s other way to take a host snapshot: hash the trainer's tensors block by block and
// copy only the blocks whose bytes the slot does not hold already. For a model of which little
// changes between versions (frozen layers, adapters, embedding rows, sparse steps) this is the
// cheaper stall: hashing reads the model once, a copy reads and writes it; and the block digests
// come out of the stall, so no hashing pass over the slot is left between the copy and a delta.
// When most of the model changes, the whole copy is cheaper, and the digest thread hashes the
// slot behind it as before: copy_changed_blocks_pays() chooses.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "core/model/manifest.h"

namespace modelcast::producer {

// The largest share of blocks changed between the slot's version and the newest one at which
// publish() hashes before it copies. Hashing on two threads takes about 0.6x a copy's time (1 GiB:
// 37-39 against 62-66 ms on the 2-core machine, bench/RESULTS.md), so hashing everything and
// copying a share f of the blocks beats one copy while f < 0.4; the share between the slot's
// version and the new one is larger than the share measured one version earlier (the slot is one
// or more versions older than the newest), so the rule asks half of that. Not tuned on a
// benchmark: derived from the two costs.
inline constexpr double kCompareBelowChangedShare = 0.2;

// Whether to hash before copying: the slot's bytes are known (`held`, the block digests of the
// version in it; empty when not known) and, between that version and the newest one whose
// digests are known (`newest`), at most kCompareBelowChangedShare of the blocks changed.
bool copy_changed_blocks_pays(const std::vector<std::uint64_t>& held, const std::vector<std::uint64_t>& newest);

struct ChangedBlocksCopy {
  std::vector<std::uint64_t> block_digests;  // of the snapshot now in the slot
  std::size_t blocks_copied = 0;
  std::uint64_t bytes_copied = 0;
};

// Runs a task on another thread, soon or late (the producer's digest thread).
using Helper = std::function<void(std::function<void()>)>;

// Takes a snapshot of the tensors at `sources` (one per layout tensor, in the layout's order)
// into `slot`, which holds a snapshot of the same layout whose block digests are `held`: each
// block is hashed as it will be in the slot (the tensors' bytes from `sources`, the bytes between
// tensors from the slot, which no copy writes), and the tensor bytes of a block are copied only
// when its digest differs from held's. With a `helper`, the blocks are shared with the task it
// runs (one core's hashing is bound by its own memory reads: two cores hash 1 GiB in 0.6x the
// time); the call returns once every block is done, however late the task starts. The caller's
// thread; `slot` must be reserved (no reader).
ChangedBlocksCopy copy_changed_blocks(std::byte* slot, const Manifest& layout, const std::vector<const std::byte*>& sources,
                                      const std::vector<std::uint64_t>& held, bool streaming,
                                      const Helper& helper = {});

}  // namespace modelcast::producer
