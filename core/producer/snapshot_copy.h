// The copy publish() makes into a snapshot slot: the whole of the trainer's stall.
#pragma once

#include <cstddef>

namespace modelcast {

// Snapshots at least this large do not fit the last-level cache, so caching the destination
// only costs read-for-ownership traffic: they are copied with streaming stores.
inline constexpr std::size_t kStreamingSnapshotBytes = 64u << 20;

// Copies n bytes. With `streaming`, uses non-temporal stores where the CPU has them.
//
// Why not just memcpy: glibc switches to non-temporal stores only for single copies above a
// threshold (240 MiB on the machines measured), and a snapshot is ~100 tensor-sized copies
// below it, so a 1 GiB snapshot copied tensor by tensor ran 1.3-1.5x slower than one memcpy of
// 1 GiB. Streaming stores bring it to memcpy speed (bench/RESULTS.md).
void snapshot_copy(void* dst, const void* src, std::size_t n, bool streaming) noexcept;

}  // namespace modelcast
