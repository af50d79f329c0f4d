// Which digest a manifest carries. Host versions are checked block by block with XXH3-64 (the
// manifest's block digests); device slots are hashed per tensor on the GPU with pmix64-v1
// (pmix64.h explains why not XXH3 there).
//
// Wire: an optional key "dkind" (uint) in the manifest map, written only for kinds other than
// XXH3-64, so manifests of host-only versions stay byte-for-byte what they are today and a
// manifest without the key means XXH3-64. core/wire/protocol.cpp calls the helpers in
// digest_kind_codec.h (kept apart so that manifest.h need not include msgpack). The digest values keep travelling under the key "xxh3" (its name is
// historical) and in the Digests message, whose kind is that of the fetch's manifest.
//
// Verification, by consumer memory:
//   host consumer:   xxh3-64 -> digest_bytes per block as it lands (FetchClient);
//                    pmix64  -> pmix64::digest_host over the received bytes
//   device consumer: pmix64  -> pmix64::digest_device before the version becomes visible;
//                    xxh3-64 (a host producer) -> hashed per block on the host as it lands
//                    in the bounce buffer, before it goes on to the device;
//                    with ucx_cuda (no host copy) the producer must send pmix64 instead:
//                    digest_kind_for() takes the consumer's memory into account.
#pragma once

#include <cstdint>
#include <string_view>

#include "modelcast/types.h"

namespace modelcast {

enum class DigestKind : std::uint8_t {
  kXxh3_64 = 0,  // XXH3-64 of each block's bytes (libxxhash): host slots
  kPmix64 = 1,   // pmix64-v1 (device/pmix64.h): device slots, computed on the GPU
};

std::string_view digest_kind_name(DigestKind kind) noexcept;  // "xxh3-64", "pmix64-v1"

// The kind a producer computes for one consumer: XXH3-64 when both the slot and the consumer
// are in host memory, or when the slot is host memory and the bytes reach the device consumer
// through host bounce buffers (staged); pmix64-v1 whenever the slot is device memory (hashing
// it on the host would cost a full device-to-host copy) or the consumer receives straight into
// device memory from a host slot (ucx_cuda: no host copy to hash on the way).
DigestKind digest_kind_for(MemoryKind producer, MemoryKind consumer, bool staged) noexcept;

}  // namespace modelcast
