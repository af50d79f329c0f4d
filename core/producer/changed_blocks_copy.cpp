#include "core/producer/changed_blocks_copy.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>

#include "common/digest.h"
#include "core/transfer/chunk_plan.h"
#include "core/producer/snapshot_copy.h"

namespace modelcast::producer {

bool copy_changed_blocks_pays(const std::vector<std::uint64_t>& held, const std::vector<std::uint64_t>& newest) {
  if (held.empty() || newest.size() != held.size()) return false;
  const auto changed = transfer::changed_blocks(held, newest).size();  // what a delta would send
  return static_cast<double>(changed) <= kCompareBelowChangedShare * static_cast<double>(held.size());
}

namespace {

// The blocks are shared out between the caller and the helper one at a time (next), so that a
// helper that starts late or not at all only leaves the caller more to do. The inputs are the
// caller's: the helper touches them only for blocks it claimed, and the caller returns only once
// every block is done, so none is touched after. Each block's results are written by the thread
// that claimed it and read by the caller after `done` says so (release / acquire).
struct SharedCopy {
  std::byte* slot;
  const Manifest* layout;
  const std::vector<const std::byte*>* sources;
  const std::vector<std::uint64_t>* held;
  bool streaming;
  std::size_t blocks;
  std::vector<std::uint64_t> digests;
  std::vector<std::uint64_t> bytes;  // copied, per block; ~0 for a block not copied
  std::atomic<std::size_t> next{0};
  std::atomic<std::size_t> done{0};
  std::mutex mutex;
  std::condition_variable all_done;

  // A block's bytes in the slot's order: tensor pieces (from the trainer's memory) and the gaps
  // between tensors (hashed where they are in the slot, which no copy writes).
  struct Piece {
    std::uint64_t offset;     // in the slot
    std::uint64_t size;
    const std::byte* source;  // null: a gap
  };
  struct Scratch {
    std::vector<Piece> pieces;
    std::vector<DigestPiece> hashed;
  };

  void copy_block(std::size_t b, Scratch& scratch) {
    const auto& tensors = layout->tensors;
    const std::uint64_t begin = b * layout->block_bytes;
    const std::uint64_t end = std::min(begin + layout->block_bytes, layout->total_bytes);
    // Tensors lie in offset order: the first that ends past the block's start.
    auto first = std::partition_point(tensors.begin(), tensors.end(),
                                      [&](const TensorEntry& t) { return t.offset + t.size <= begin; });
    auto& pieces = scratch.pieces;
    pieces.clear();
    std::uint64_t at = begin;
    for (auto t = first; t != tensors.end() && t->offset < end; ++t) {
      const std::uint64_t from = std::max(t->offset, begin), to = std::min(t->offset + t->size, end);
      if (from >= to) continue;  // an empty tensor
      if (from > at) pieces.push_back({at, from - at, nullptr});
      pieces.push_back({from, to - from, (*sources)[static_cast<std::size_t>(t - tensors.begin())] + (from - t->offset)});
      at = to;
    }
    if (at < end) pieces.push_back({at, end - at, nullptr});
    scratch.hashed.clear();
    for (const auto& p : pieces) scratch.hashed.push_back({p.source ? p.source : slot + p.offset, p.size});
    digests[b] = digest_pieces(scratch.hashed.data(), scratch.hashed.size());
    if (b < held->size() && (*held)[b] == digests[b]) return;
    std::uint64_t copied = 0;
    for (const auto& p : pieces) {
      if (!p.source) continue;
      snapshot_copy(slot + p.offset, p.source, p.size, streaming);
      copied += p.size;
    }
    bytes[b] = copied;
  }

  void work() {
    Scratch scratch;
    for (;;) {
      const std::size_t b = next.fetch_add(1, std::memory_order_relaxed);
      if (b >= blocks) return;
      copy_block(b, scratch);
      if (done.fetch_add(1, std::memory_order_acq_rel) + 1 == blocks) {
        std::lock_guard lock(mutex);
        all_done.notify_all();
      }
    }
  }
};

}  // namespace

ChangedBlocksCopy copy_changed_blocks(std::byte* slot, const Manifest& layout, const std::vector<const std::byte*>& sources,
                                      const std::vector<std::uint64_t>& held, bool streaming, const Helper& helper) {
  auto shared = std::make_shared<SharedCopy>();
  shared->slot = slot;
  shared->layout = &layout;
  shared->sources = &sources;
  shared->held = &held;
  shared->streaming = streaming;
  shared->blocks = block_count(layout);
  shared->digests.assign(shared->blocks, 0);
  shared->bytes.assign(shared->blocks, ~std::uint64_t{0});
  if (helper && shared->blocks > 1) helper([shared] { shared->work(); });
  shared->work();
  {
    std::unique_lock lock(shared->mutex);
    shared->all_done.wait(lock, [&] { return shared->done.load(std::memory_order_acquire) == shared->blocks; });
  }
  ChangedBlocksCopy result;
  result.block_digests = std::move(shared->digests);
  for (auto b : shared->bytes) {
    if (b == ~std::uint64_t{0}) continue;
    result.blocks_copied++;
    result.bytes_copied += b;
  }
  return result;
}

}  // namespace modelcast::producer
