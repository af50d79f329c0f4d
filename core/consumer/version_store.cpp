#include "core/consumer/version_store.h"

#include <algorithm>
#include <utility>

#include "common/clock.h"
#include "modelcast/error.h"

namespace modelcast::consumer {

VersionStore::VersionStore(std::size_t buffers, std::vector<std::span<std::byte>> caller_buffers)
    : buffers_(buffers), caller_buffers_(std::move(caller_buffers)) {}

ModelView VersionStore::acquire() const {
  std::lock_guard lock(mutex_);
  return ModelView(current_);
}

ModelView VersionStore::wait_for(std::uint64_t version, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mutex_);
  auto reached = [&] { return current_ && current_->manifest.version >= version; };
  installed_.wait_until(lock, deadline_after(timeout), [&] { return waits_cancelled_ || reached(); });
  return reached() && !waits_cancelled_ ? ModelView(current_) : ModelView();
}

bool VersionStore::waits_cancelled() const {
  std::lock_guard lock(mutex_);
  return waits_cancelled_;
}

void VersionStore::cancel_waits() {
  {
    std::lock_guard lock(mutex_);
    waits_cancelled_ = true;
  }
  installed_.notify_all();
}

std::shared_ptr<const detail::InstalledVersion> VersionStore::current() const {
  std::lock_guard lock(mutex_);
  return current_;
}

void VersionStore::install(std::shared_ptr<const detail::InstalledVersion> version) {
  // The version replaced is let go outside the lock: as its last holder (no reader has a view,
  // its buffer out of the pool after a reconnect) it unmaps and deregisters a model's worth of
  // memory, and acquire() would wait for that.
  std::shared_ptr<const detail::InstalledVersion> replaced;
  {
    std::lock_guard lock(mutex_);
    replaced = std::exchange(current_, std::move(version));
    ++installs_;
  }
  installed_.notify_all();
}

std::uint64_t VersionStore::installs() const {
  std::lock_guard lock(mutex_);
  return installs_;
}

void VersionStore::use_transport(std::shared_ptr<transport::Transport> transport, transport::MemoryLocation location) {
  if (transport == transport_ && location == location_) return;
  if (location.kind == MemoryKind::kCuda && !caller_buffers_.empty()) {
    throw Error(ErrorCode::kState, "caller buffers are host memory: a route into device memory cannot use them");
  }
  if (location.kind == MemoryKind::kCuda) ahead_.drop();
  location_ = location;
  for (auto& buffer : pool_) {
    if (buffer->sends_given_up > 0) kept_for_sends_.push_back(buffer);
    retired_.push_back(buffer);
  }
  pool_.clear();
  std::erase_if(retired_, [](const auto& weak) { return weak.expired(); });
  transport_ = std::move(transport);
}

std::shared_ptr<detail::ReceiveBuffer> VersionStore::make_buffer(std::span<std::byte> memory, HostBuffer owned) {
  if (!transport_) throw Error(ErrorCode::kState, "no transport chosen yet: receive buffers wait for the join");
  auto buffer = std::make_shared<detail::ReceiveBuffer>();
  buffer->transport = transport_;
  buffer->owned = std::move(owned);
  buffer->memory = buffer->owned.data() ? buffer->owned.span() : memory;
  buffer->region = transport_->register_memory(buffer->memory.data(), buffer->memory.size(), location_);
  pool_.push_back(buffer);
  return buffer;
}

// Caller memory is registered with one transport at a time: memory still referenced under a
// retired transport (a view, an unfinished receive) is not handed out again until released. Held
// only by kept_for_sends_ it is free: the sends given up go to a peer that died, and whatever
// they read as new bytes land reaches no one. Kept from reuse, each such buffer was lost for
// good (the caller's memory cannot be replaced by a new allocation), until none was left.
bool VersionStore::caller_memory_free(std::span<std::byte> memory) const {
  for (const auto& buffer : pool_) {
    if (buffer->memory.data() == memory.data()) return buffer.use_count() == 1;
  }
  return std::none_of(retired_.begin(), retired_.end(), [&](const auto& weak) {
    auto buffer = weak.lock();
    if (!buffer || buffer->memory.data() != memory.data()) return false;
    const auto kept = std::count(kept_for_sends_.begin(), kept_for_sends_.end(), buffer);
    return buffer.use_count() - 1 - kept > 0;  // `buffer` itself is one holder
  });
}

std::shared_ptr<detail::ReceiveBuffer> VersionStore::take_buffer(std::uint64_t bytes) {
  if (!caller_buffers_.empty()) {
    for (auto memory : caller_buffers_) {
      if (memory.size() < bytes || !caller_memory_free(memory)) continue;
      for (auto& buffer : pool_) {
        if (buffer->memory.data() == memory.data()) return buffer;
      }
      return make_buffer(memory, {});
    }
    return nullptr;
  }
  for (auto& buffer : pool_) {
    if (buffer.use_count() == 1 && buffer->memory.size() >= bytes) return buffer;
  }
  // Drop free buffers too small for this model, then allocate up to the configured count, the
  // buffer made ahead included: taken first, it kept a free buffer of the old size for good
  // (one more than the count, a model's worth of memory).
  std::erase_if(pool_, [&](const auto& b) {
    if (b.use_count() > 1 || b->memory.size() >= bytes) return false;
    if (b->sends_given_up > 0) kept_for_sends_.push_back(b);
    return true;
  });
  if (pool_.size() >= buffers_) return nullptr;
  if (auto made = ahead_.take(bytes)) return make_buffer({}, std::move(*made));
  if (location_.kind == MemoryKind::kCuda) {
    auto owned = std::make_unique<detail::DeviceBuffer>();
    owned->runtime = &device::require_device_runtime("a receive buffer in device memory");
    owned->base = owned->runtime->allocate(location_.device, bytes);
    owned->size = bytes;
    std::span<std::byte> memory(static_cast<std::byte*>(owned->base), bytes);
    auto buffer = make_buffer(memory, {});
    buffer->device_owned = std::move(owned);
    return buffer;
  }
  return make_buffer({}, HostBuffer(std::max<std::uint64_t>(bytes, 1)));
}

void VersionStore::allocate_ahead(std::uint64_t bytes, std::uint64_t most) {
  if (!caller_buffers_.empty() || location_.kind == MemoryKind::kCuda || bytes == 0 || bytes > most) return;
  if (ahead_.covers(bytes)) return;
  for (const auto& buffer : pool_) {
    if (buffer.use_count() == 1 && buffer->memory.size() >= bytes) return;
  }
  const std::size_t kept = static_cast<std::size_t>(
      std::count_if(pool_.begin(), pool_.end(), [&](const auto& b) { return b.use_count() > 1 || b->memory.size() >= bytes; }));
  if (kept >= buffers_) return;
  ahead_.start(bytes);
}

bool VersionStore::set_aside(const std::shared_ptr<detail::ReceiveBuffer>& buffer) {
  if (!caller_buffers_.empty() || !buffer) return false;
  std::erase_if(set_aside_, [](const auto& weak) { return weak.expired(); });
  if (set_aside_.size() >= buffers_) return false;
  auto it = std::find(pool_.begin(), pool_.end(), buffer);
  if (it == pool_.end()) return true;  // a retired transport's: the pool does not count it
  pool_.erase(it);
  // As a buffer dropped for its size: relay sends given up may read it after the receives end.
  // Kept for good then, it is not counted among those set aside (it would take a place for good).
  if (buffer->sends_given_up > 0) {
    kept_for_sends_.push_back(buffer);
  } else {
    set_aside_.push_back(buffer);
  }
  return true;
}

void VersionStore::keep_for_sends(const std::shared_ptr<detail::ReceiveBuffer>& buffer) {
  if (!buffer || std::find(pool_.begin(), pool_.end(), buffer) != pool_.end()) return;
  if (std::find(kept_for_sends_.begin(), kept_for_sends_.end(), buffer) == kept_for_sends_.end()) {
    kept_for_sends_.push_back(buffer);
  }
  // Kept for good, a buffer set aside would take a set-aside place for good (as set_aside() says).
  std::erase_if(set_aside_, [&](const auto& weak) { return weak.lock() == buffer; });
}

bool VersionStore::buffer_available(std::uint64_t bytes) const {
  if (!caller_buffers_.empty()) {
    return std::any_of(caller_buffers_.begin(), caller_buffers_.end(),
                       [&](auto memory) { return memory.size() >= bytes && caller_memory_free(memory); });
  }
  if (pool_.size() < buffers_) return true;
  return std::any_of(pool_.begin(), pool_.end(), [](const auto& b) { return b.use_count() == 1; });
}

}  // namespace modelcast::consumer
