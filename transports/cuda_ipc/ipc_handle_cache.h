// Consumer side of the CUDA IPC path: the producer's device slots, mapped once.
//
// Opening a handle is expensive (it maps the allocation into this process, milliseconds)
// and a producer reuses a handful of slots for every version, so mappings are cached by
// (producer incarnation, slot) and reused across versions. A mapping is closed
//  - when the exporter changes (the producer restarted, or a fetch reads another consumer's
//    exported buffer, a relay, instead): all other exporters' mappings go at that acquire. A
//    reader that switches between the producer and a relay reopens (milliseconds a version)
//    rather than keep mappings that may pin the memory of a process that is gone,
//  - when a slot arrives with a different handle (the producer reallocated it),
//  - when the cache holds more than `capacity` mappings (least recently used first),
//  - by forget() (the reader is done with an export it will not read again: a relay's buffer,
//    which the relay may free once told the reader is done, and CUDA leaves undefined a free
//    before the importer's close),
//  - by clear() and the destructor,
// but never while a caller still holds it: acquire() returns a shared_ptr and the close
// (ops.close) runs when the cache and every holder have let go. Hold it for as long as a copy
// out of the mapping may be in flight.
//
// The open/close functions are injected: the transport gives the device runtime's (open_ipc,
// close_ipc), tests give counting fakes. Thread-safe (one mutex); ops.open runs under it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>

#include "transports/cuda_ipc/ipc_handle.h"

namespace modelcast::cuda_ipc {

struct IpcOps {
  // Maps `source` into this process; returns the base address. Throws modelcast::Error.
  std::function<void*(const IpcExport& source)> open;
  // Unmaps what open returned. Must not throw.
  std::function<void(void* base, const IpcExport& source)> close;
};

struct Mapping {
  void* base = nullptr;  // the producer's slot, mapped: tensor i is at base + manifest offset
  std::uint64_t incarnation = 0;
  IpcExport source;
};

class IpcHandleCache {
 public:
  explicit IpcHandleCache(IpcOps ops, std::size_t capacity = 16);
  ~IpcHandleCache();
  IpcHandleCache(const IpcHandleCache&) = delete;
  IpcHandleCache& operator=(const IpcHandleCache&) = delete;

  // The mapping of `source` from producer `incarnation`, opened now only if not cached (or its
  // handle changed). An open failure propagates and caches nothing.
  std::shared_ptr<const Mapping> acquire(std::uint64_t incarnation, const IpcExport& source);
  // Drops the mapping of `slot` from `incarnation`, if cached (held, it closes when released).
  void forget(std::uint64_t incarnation, std::uint32_t slot);
  // Drops every cached mapping (held ones close when released).
  void clear();

  std::size_t size() const;        // mappings cached now
  std::uint64_t opens() const;     // ops.open calls that succeeded, since construction

 private:
  struct Entry {
    std::uint64_t incarnation;
    std::uint32_t slot;
    std::shared_ptr<const Mapping> mapping;
  };

  IpcOps ops_;
  std::size_t capacity_;
  mutable std::mutex mutex_;
  std::list<Entry> entries_;  // most recently used first
  std::uint64_t opens_ = 0;
};

}  // namespace modelcast::cuda_ipc
