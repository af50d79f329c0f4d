// What the loopback transports of one process share: a directory of transports by address (so
// connect() finds its peer) and of exported regions by id (so a peer reads only what was
// exported, for as long as it stays registered), and the wire form of addresses and
// descriptors, which carry this process's token: one that reached another process (a join
// relayed across processes, say) is refused instead of naming something unrelated here.
//
// Threads: `mutex` guards both directories; a sender holds it while delivering, which keeps
// the target transport (or the exported region) alive for that long.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <mutex>
#include <span>
#include <vector>

namespace modelcast::transport::loopback {

class LoopbackTransport;

struct Export {
  std::uint64_t owner = 0;          // the exporting transport's address
  const void* region = nullptr;     // the MemoryRegion, to forget its exports when it goes
  const std::byte* base = nullptr;
  std::size_t length = 0;
};

struct Fabric {
  std::mutex mutex;
  std::map<std::uint64_t, LoopbackTransport*> transports;  // by address
  std::map<std::uint64_t, Export> exports;                 // by export id
  std::atomic<std::uint64_t> next_id{1};                   // addresses and export ids

  static Fabric& get();
  // Drops every export of `region` (it is being deregistered).
  void forget(const void* region);
};

// [process token][words...]
std::vector<std::byte> pack_words(std::initializer_list<std::uint64_t> words);
// The `count` words of a packed blob; throws Error(kTransport) naming `what` if it is malformed
// or from another process.
std::vector<std::uint64_t> unpack_words(std::span<const std::byte> bytes, std::size_t count, const char* what);

}  // namespace modelcast::transport::loopback
