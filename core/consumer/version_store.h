// The consumer's versions: the receive buffers versions arrive in, the installed version
// readers see, and the swap between them.
//
// Threads: readers call acquire()/wait_for() from any thread; they copy `current_` under
// `mutex_`. Everything else is the service thread's. A version becomes visible by replacing
// one shared_ptr under `mutex_`: readers see the old version or the new one, never a mix, and a
// view they hold keeps its buffer out of reuse (a buffer is free exactly when only the pool
// refers to it, and only the service thread hands out references).
// A buffer allocated ahead (HostBufferAhead) is made on a helper thread of its own; the service
// thread alone owns it and registers the result.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "common/host_buffer_ahead.h"
#include "core/model/installed_version.h"
#include "modelcast/consumer.h"
#include "modelcast/model_view.h"

namespace modelcast::consumer {

class VersionStore {
 public:
  VersionStore(std::size_t buffers, std::vector<std::span<std::byte>> caller_buffers);

  // ---- any thread ----
  ModelView acquire() const;
  // The first installed version >= `version`, or an empty view after `timeout` or once waits
  // are cancelled.
  ModelView wait_for(std::uint64_t version, std::chrono::milliseconds timeout) const;
  void cancel_waits();  // ends every wait_for, those under way and those to come
  bool waits_cancelled() const;
  std::shared_ptr<const detail::InstalledVersion> current() const;
  std::uint64_t installs() const;  // versions made the one readers see, since construction

  // ---- service thread ----
  // The transport versions arrive over from now on (the one the producer chose at the join).
  // Another than the current one retires buffers registered with the old; views and unfinished
  // receives keep it alive. The same one changes nothing.
  // Buffers are allocated at `location`: device memory when the route reads straight into
  // the device (device buffers come from device::device_runtime()).
  void use_transport(std::shared_ptr<transport::Transport> transport,
                     transport::MemoryLocation location = transport::MemoryLocation::host());
  // The transport versions arrive over (null before use_transport).
  transport::Transport* transport() const { return transport_.get(); }
  // A free buffer of at least `bytes`, registered with the current transport, or nullptr when
  // readers hold every buffer. Throws Error(kResource) or std::bad_alloc if allocation fails,
  // Error(kState) before use_transport.
  std::shared_ptr<detail::ReceiveBuffer> take_buffer(std::uint64_t bytes);
  // take_buffer could succeed for `bytes` (0: for some size). Only caller buffers have a size
  // that can fall short: the store's own pool makes one of any size while it has room.
  bool buffer_available(std::uint64_t bytes = 0) const;
  // Relay sends from `buffer` were given up (ReceiveBuffer::sends_given_up): one no longer in the
  // pool (a retired transport's) is kept registered until the store goes, as the pool keeps
  // those it lets go; its last holder was the relay order, which released it under the sends.
  void keep_for_sends(const std::shared_ptr<detail::ReceiveBuffer>& buffer);
  // Starts making a host buffer of `bytes` in the background (HostBufferAhead), for
  // take_buffer to find ready. Nothing when `bytes` exceeds `most` (the largest model this
  // consumer takes: the size is the producer's word, and a version past it is refused), a free
  // buffer or one under way is large enough, no more may be allocated, or buffers are the
  // caller's or on the device.
  void allocate_ahead(std::uint64_t bytes, std::uint64_t most);
  // Makes `version` the one readers see and wakes waiters.
  void install(std::shared_ptr<const detail::InstalledVersion> version);
  // Takes `buffer` out of the pool (receives that will never end hold it: FetchClient::
  // set_aside_stuck), so that another may be allocated in its place; it stays registered while
  // anything holds it. False, and nothing done, for caller buffers, or while as many buffers as
  // the count are set aside and still held (memory stays within twice the count).
  bool set_aside(const std::shared_ptr<detail::ReceiveBuffer>& buffer);
  // How many buffers it may allocate from now on (the service feeds an assembler, or no longer
  // does). Buffers beyond a lowered count are kept, not freed; none is allocated past it.
  void set_buffer_count(std::size_t buffers) { buffers_ = buffers; }

 private:
  std::shared_ptr<detail::ReceiveBuffer> make_buffer(std::span<std::byte> memory, HostBuffer owned);
  bool caller_memory_free(std::span<std::byte> memory) const;

  mutable std::mutex mutex_;
  mutable std::condition_variable installed_;
  std::shared_ptr<const detail::InstalledVersion> current_;  // guarded by mutex_
  std::uint64_t installs_ = 0;                               // guarded by mutex_
  bool waits_cancelled_ = false;                             // guarded by mutex_

  // Service thread only:
  std::size_t buffers_;
  const std::vector<std::span<std::byte>> caller_buffers_;
  std::shared_ptr<transport::Transport> transport_;
  transport::MemoryLocation location_;
  std::vector<std::shared_ptr<detail::ReceiveBuffer>> pool_;    // registered with transport_
  // Buffers out of the pool (too small, or of a retired transport) that relay sends given up
  // may still read (ReceiveBuffer::sends_given_up): kept, registered, until the store goes
  // (caller memory among them is handed out again: caller_memory_free).
  std::vector<std::shared_ptr<detail::ReceiveBuffer>> kept_for_sends_;
  std::vector<std::weak_ptr<detail::ReceiveBuffer>> retired_;  // registered with an older one
  std::vector<std::weak_ptr<detail::ReceiveBuffer>> set_aside_;  // out of the pool by set_aside()
  HostBufferAhead ahead_;  // a buffer being made by allocate_ahead, not yet registered
};

}  // namespace modelcast::consumer
