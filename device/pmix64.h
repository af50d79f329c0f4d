// pmix64-v1: the digest of device-resident tensors, computed by a kernel of ours.
//
// Why not XXH3-64 (the host path's digest) on the GPU: XXH3 folds 1 KiB blocks into its
// accumulators one after the other (a scramble between blocks), so one tensor is one serial
// chain -- a GPU would hash each tensor with a single thread, far below memory bandwidth.
// A tree of XXH3 leaves would parallelise but is no longer XXH3 either, and needs a ported XXH3
// kernel. pmix64 is built for the hardware instead:
//
//   w_i    = little-endian 64-bit word i of the tensor, the last one zero-padded
//   term_i = mix(w_i ^ (i+1)*K)             mix = SplitMix64 finaliser (a bijection)
//   digest = mix( (sum_i term_i mod 2^64) + mix(size + K2) )
//
// Every word is independent and the terms are combined by addition, which is associative and
// commutative: any split into blocks and any reduction order gives the same bits, so the
// kernel is one coalesced streaming pass (16-byte loads, warp shuffles, one 64-bit atomicAdd
// per block) and the host reference below reproduces it exactly. Guarantee: since mix() is a
// bijection, changing any single 8-byte word (any one corrupted byte) ALWAYS changes the digest;
// wider corruption escapes with probability ~2^-64 for non-adversarial errors (like XXH3, it is
// an integrity check, not a MAC). Position keys make swapped words or tensors count.
//
// Cost: two 64-bit multiplies per 8 bytes -- well under an H100's integer throughput at HBM
// bandwidth, so the kernel is memory-bound; on the host the reference runs at a few GB/s
// (used by host consumers of device-produced versions and by tests).
//
// Carrying the kind: core/cuda/digest_kind.h (Manifest gains `digest_kind`; wire key "dkind"
// in the manifest map, absent = xxh3-64).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "device/pmix64_segment.h"


namespace modelcast::pmix64 {

// Host reference: the digest of [data, data+size) in host memory.
std::uint64_t digest_host(const void* data, std::size_t size) noexcept;

// A tensor inside a device buffer.
struct Range {
  std::uint64_t offset = 0;  // from the buffer's base
  std::uint64_t size = 0;    // bytes
};

// Splits tensors into kernel segments of at most kSegmentBytes (empty tensors get none).
std::vector<Segment> plan_segments(std::span<const Range> tensors);

// True when this build has the kernel (MODELCAST_HAVE_CUDA).
bool device_digest_available() noexcept;

// Digests of `tensors` inside device memory at `base` on `device`, one launch for all of them,
// stream-ordered after earlier work on `stream` (nullptr = the legacy default stream); blocks
// until they are computed. Throws Error(kState) in a build without CUDA, Error(kTransport) for
// a CUDA failure.
std::vector<std::uint64_t> digest_device(int device, const void* base, std::span<const Range> tensors,
                                         CUstream_st* stream);

}  // namespace modelcast::pmix64
