#include "core/consumer/device_landing.h"

#include <algorithm>

#include "modelcast/error.h"

namespace modelcast::consumer {

DeviceLanding::DeviceLanding(device::DeviceRuntime& runtime, int device, std::size_t buffers)
    : runtime_(runtime), device_(device), buffers_(buffers), stream_(runtime.create_stream(device)) {}

DeviceLanding::~DeviceLanding() {
  abandon();
  runtime_.destroy_stream(stream_);
}

bool DeviceLanding::available() const {
  if (pool_.size() < buffers_) return true;
  for (const auto& b : pool_) {
    if (b.use_count() == 1) return true;
  }
  return false;
}

void DeviceLanding::begin(std::uint64_t total_bytes, detail::ReceiveBuffer& receive) {
  abandon();
  if (!receive.pin && !receive.memory.empty()) {
    receive.pin = std::make_unique<device::HostPin>(runtime_, receive.memory.data(), receive.memory.size());
  }
  std::shared_ptr<detail::DeviceBuffer>* slot = nullptr;
  for (auto& b : pool_) {
    if (b.use_count() == 1) slot = &b;
    if (slot && (*slot)->size >= total_bytes) break;
  }
  if (!slot && pool_.size() >= buffers_) throw Error(ErrorCode::kState, "every device buffer is held by a reader");
  if (!slot || (*slot)->size < total_bytes) {
    if (slot) {
      pool_.erase(pool_.begin() + (slot - pool_.data()));  // the smaller one goes before the larger is made
      slot = nullptr;
    }
    auto buffer = std::make_shared<detail::DeviceBuffer>();
    buffer->runtime = &runtime_;
    buffer->base = runtime_.allocate(device_, total_bytes);  // on failure the pool is as it was
    buffer->size = total_bytes;
    slot = &pool_.emplace_back(std::move(buffer));
  }
  current_.emplace(Current{*slot, receive.memory.data(), total_bytes, 0});
}

void DeviceLanding::advance(std::uint64_t received) {
  if (!current_) return;
  const std::uint64_t upto = std::min(received, current_->total);
  if (upto <= current_->queued) return;
  auto* base = static_cast<std::byte*>(current_->buffer->base);
  runtime_.copy_async(base + current_->queued, current_->host + current_->queued, upto - current_->queued, stream_);
  current_->queued = upto;
}

DeviceLanding::Landed DeviceLanding::complete(const Manifest& manifest, bool digest) {
  if (!current_) throw Error(ErrorCode::kState, "no landing in progress");
  try {
    advance(current_->total);
    Landed landed{current_->buffer, {}};
    if (digest) {
      landed.digests = this->digest(manifest, static_cast<const std::byte*>(landed.buffer->base));  // after the copies
    } else {
      runtime_.synchronize_stream(stream_);
    }
    current_.reset();
    return landed;
  } catch (...) {
    abandon();
    throw;
  }
}

void DeviceLanding::abandon() noexcept {
  if (!current_) return;
  try {
    runtime_.synchronize_stream(stream_);  // no copy may still read the host buffer
  } catch (...) {
    // A failed device cannot be waited for; its copies are over or never will run.
  }
  current_.reset();
}

DeviceLanding::Landed DeviceLanding::land(const Manifest& manifest, detail::ReceiveBuffer& receive, bool digest) {
  begin(manifest.total_bytes, receive);
  return complete(manifest, digest);
}

std::vector<std::uint64_t> DeviceLanding::digest(const Manifest& manifest, const std::byte* base) {
  std::vector<device::ByteRange> ranges;
  ranges.reserve(manifest.tensors.size());
  for (const auto& t : manifest.tensors) ranges.push_back({t.offset, t.size});
  return runtime_.digest(device_, base, ranges, stream_);
}

}  // namespace modelcast::consumer
