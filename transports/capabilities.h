// What a transport can do, described so that two sides can agree on one without knowing it by
// name: which memory it moves from where to where, how far a peer may be, and whether a peer
// can read exported memory by itself (one-sided) or only receive what is sent (two-sided).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "modelcast/types.h"

namespace modelcast::transport {

// Where bytes live: the memory kind and, for device memory, the device ordinal (-1 for host).
// Memory is described by location rather than by a flag per kind, as Mooncake's transfer engine
// does, so that a transport can say "CUDA device 0 to host" and a registry can match it.
struct MemoryLocation {
  MemoryKind kind = MemoryKind::kHost;
  int device = -1;

  static MemoryLocation host() { return {}; }
  static MemoryLocation cuda(int device) { return {MemoryKind::kCuda, device}; }
  friend bool operator==(const MemoryLocation&, const MemoryLocation&) = default;
};

// How far apart two peers are, nearest first. A transport's reach is the farthest peer it serves.
enum class Reach : std::uint8_t {
  kProcess = 0,  // the same process (an in-process copy)
  kHost = 1,     // another process on the same machine (shared memory, CUDA IPC)
  kNetwork = 2,  // another machine
};

// A (source kind, destination kind) pair a transport moves bytes between.
struct MemoryPair {
  MemoryKind source = MemoryKind::kHost;
  MemoryKind destination = MemoryKind::kHost;
  friend bool operator==(const MemoryPair&, const MemoryPair&) = default;
};

struct Capabilities {
  std::vector<MemoryPair> pairs{{MemoryKind::kHost, MemoryKind::kHost}};
  Reach reach = Reach::kProcess;
  bool two_sided = true;   // post_send / post_recv with tags
  bool one_sided = false;  // export_region / import_region / post_read

  bool moves(MemoryKind source, MemoryKind destination) const;
  bool reaches(Reach distance) const { return static_cast<int>(distance) <= static_cast<int>(reach); }
  // True when `this` side can hold memory of `kind` at either end (register it).
  bool handles(MemoryKind kind) const;
};

std::string_view reach_name(Reach reach) noexcept;
// "host->host, host->cuda; reach host; two-sided, one-sided": for logs and refusal messages.
std::string describe(const Capabilities& capabilities);

// Wire form of the pairs: one byte each, source in the high nibble, destination in the low.
std::vector<std::uint8_t> encode_pairs(const std::vector<MemoryPair>& pairs);
// Throws Error(kProtocol) for an unknown memory kind.
std::vector<MemoryPair> decode_pairs(const std::vector<std::uint8_t>& bytes);

}  // namespace modelcast::transport
