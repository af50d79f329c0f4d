#include "core/consumer/device_landing.h"

#include "modelcast/error.h"

namespace modelcast::consumer {

DeviceLanding::DeviceLanding(device::DeviceRuntime& runtime, int device, std::size_t buffers)
    : runtime_(runtime), device_(device), buffers_(buffers), stream_(runtime.create_stream(device)) {}

DeviceLanding::~DeviceLanding() { runtime_.destroy_stream(stream_); }

bool DeviceLanding::available() const {
  if (pool_.size() < buffers_) return true;
  for (const auto& b : pool_) {
    if (b.use_count() == 1) return true;
  }
  return false;
}

DeviceLanding::Landed DeviceLanding::land(const Manifest& manifest, detail::ReceiveBuffer& receive, bool digest) {
  if (!receive.pin && !receive.memory.empty()) {
    receive.pin = std::make_unique<device::HostPin>(runtime_, receive.memory.data(), receive.memory.size());
  }
  const std::byte* host = receive.memory.data();
  std::shared_ptr<detail::DeviceBuffer>* slot = nullptr;
  for (auto& b : pool_) {
    if (b.use_count() == 1) slot = &b;
    if (slot && (*slot)->size >= manifest.total_bytes) break;
  }
  if (!slot && pool_.size() >= buffers_) throw Error(ErrorCode::kState, "every device buffer is held by a reader");
  if (!slot || (*slot)->size < manifest.total_bytes) {
    if (slot) {
      pool_.erase(pool_.begin() + (slot - pool_.data()));  // the smaller one goes before the larger is made
      slot = nullptr;
    }
    auto buffer = std::make_shared<detail::DeviceBuffer>();
    buffer->runtime = &runtime_;
    buffer->base = runtime_.allocate(device_, manifest.total_bytes);  // on failure the pool is as it was
    buffer->size = manifest.total_bytes;
    slot = &pool_.emplace_back(std::move(buffer));
  }
  Landed landed{*slot, {}};
  auto* base = static_cast<std::byte*>(landed.buffer->base);
  if (manifest.total_bytes != 0) runtime_.copy_async(base, host, manifest.total_bytes, stream_);
  if (digest) {
    landed.digests = this->digest(manifest, base);  // ordered after the copy by the stream
  } else {
    runtime_.synchronize_stream(stream_);
  }
  return landed;
}

std::vector<std::uint64_t> DeviceLanding::digest(const Manifest& manifest, const std::byte* base) {
  std::vector<device::ByteRange> ranges;
  ranges.reserve(manifest.tensors.size());
  for (const auto& t : manifest.tensors) ranges.push_back({t.offset, t.size});
  return runtime_.digest(device_, base, ranges, stream_);
}

}  // namespace modelcast::consumer
