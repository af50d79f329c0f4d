#include "transports/cuda_ipc/ipc_handle_cache.h"

#include <utility>

#include "modelcast/error.h"

namespace modelcast::cuda_ipc {

IpcHandleCache::IpcHandleCache(IpcOps ops, std::size_t capacity) : ops_(std::move(ops)), capacity_(capacity) {
  if (!ops_.open || !ops_.close) throw Error(ErrorCode::kInvalidArgument, "IPC handle cache: open and close are required");
  if (capacity_ == 0) throw Error(ErrorCode::kInvalidArgument, "IPC handle cache: capacity must be positive");
}

IpcHandleCache::~IpcHandleCache() { clear(); }

std::shared_ptr<const Mapping> IpcHandleCache::acquire(std::uint64_t incarnation, const IpcExport& source) {
  std::list<Entry> dropped;  // released after the lock: a close must not run under it
  std::shared_ptr<const Mapping> result;
  {
    std::lock_guard lock(mutex_);
    // A new incarnation means the old producer is gone: none of its mappings is any use.
    for (auto it = entries_.begin(); it != entries_.end();) {
      auto next = std::next(it);
      const bool stale = it->incarnation != incarnation ||
                         (it->slot == source.slot && it->mapping->source.handle != source.handle);
      if (stale) dropped.splice(dropped.end(), entries_, it);
      it = next;
    }
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->slot == source.slot) {
        entries_.splice(entries_.begin(), entries_, it);  // most recently used
        return entries_.front().mapping;
      }
    }
    void* base = ops_.open(source);  // throws: nothing cached
    ++opens_;
    auto close = ops_.close;
    auto* mapping = new Mapping{base, incarnation, source};
    result = std::shared_ptr<const Mapping>(mapping, [close](const Mapping* m) {
      close(m->base, m->source);
      delete m;
    });
    entries_.push_front(Entry{incarnation, source.slot, result});
    while (entries_.size() > capacity_) dropped.splice(dropped.end(), entries_, std::prev(entries_.end()));
  }
  return result;  // `dropped` goes here: closes what nobody holds
}

void IpcHandleCache::forget(std::uint64_t incarnation, std::uint32_t slot) {
  std::list<Entry> dropped;  // released after the lock: a close must not run under it
  std::lock_guard lock(mutex_);
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->incarnation == incarnation && it->slot == slot) {
      dropped.splice(dropped.end(), entries_, it);
      break;
    }
  }
}

void IpcHandleCache::clear() {
  std::list<Entry> dropped;
  {
    std::lock_guard lock(mutex_);
    dropped.swap(entries_);
  }
}

std::size_t IpcHandleCache::size() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

std::uint64_t IpcHandleCache::opens() const {
  std::lock_guard lock(mutex_);
  return opens_;
}

}  // namespace modelcast::cuda_ipc
