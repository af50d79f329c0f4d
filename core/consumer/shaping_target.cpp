#include "core/consumer/shaping_target.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "core/layout/convert.h"
#include "modelcast/error.h"

namespace modelcast::consumer {

void convert_elements(DType from_dtype, const std::byte* src, const TensorConversion& conversion, std::byte* dst,
                      std::size_t count, std::vector<float>& scales, std::size_t& scale_block) {
  const auto from = *layout::format_of(from_dtype);
  const auto to = conversion.to;
  if (count == 0) {
    if (to == DType::kF8E4M3) scales = {1.0f};
    return;
  }
  if (to != DType::kF8E4M3) return layout::convert(from, src, *layout::format_of(to), dst, count);
  auto* codes = reinterpret_cast<std::uint8_t*>(dst);
  if (conversion.fp8_block == 0) {
    scales = {layout::quantize_fp8_per_tensor(from, src, codes, count)};
  } else {
    scales = layout::quantize_fp8_per_block(from, src, codes, count, conversion.fp8_block);
    scale_block = conversion.fp8_block;
  }
}

namespace {

std::shared_ptr<detail::DeviceBuffer> device_buffer(device::DeviceRuntime& runtime, int device, std::size_t bytes) {
  auto buffer = std::make_shared<detail::DeviceBuffer>();
  buffer->runtime = &runtime;
  buffer->base = runtime.allocate(device, bytes);
  buffer->size = bytes;
  return buffer;
}

// The pool's member no installed version holds, grown to `bytes`, or a new one while the pool
// has fewer than `most`. A member is replaced only after the old one is gone (never two at
// once); an allocation that fails leaves an empty member, taken again next time.
template <typename Buffer, typename Make>
std::shared_ptr<Buffer> free_one(std::vector<std::shared_ptr<Buffer>>& pool, std::size_t bytes, std::size_t most,
                                 std::size_t (*size)(const Buffer&), Make&& make) {
  for (auto& buffer : pool) {
    if (buffer && buffer.use_count() != 1) continue;
    if (!buffer || size(*buffer) < bytes) {
      buffer.reset();
      buffer = make();
    }
    return buffer;
  }
  if (pool.size() >= most) {
    throw Error(ErrorCode::kResource, "every one of the " + std::to_string(pool.size()) +
                                          " buffers for shaped views is held by a view still in use; updates "
                                          "resume when one is released (hold fewer views, or give the consumer "
                                          "more buffers)");
  }
  pool.push_back(make());
  return pool.back();
}

}  // namespace

ShapingTarget::ShapingTarget(std::size_t max_buffers) : max_buffers_(std::max<std::size_t>(max_buffers, 1)) {}

ShapingTarget::ShapingTarget(device::DeviceRuntime& runtime, int device, std::size_t max_buffers)
    : runtime_(&runtime), device_(device), stream_(runtime.create_stream(device)),
      max_buffers_(std::max<std::size_t>(max_buffers, 1)) {}

ShapingTarget::~ShapingTarget() {
  if (runtime_) runtime_->destroy_stream(stream_);
}

std::byte* ShapingTarget::take(std::size_t bytes) {
  bytes = std::max<std::size_t>(bytes, 1);
  // Memory taken for a version whose shaping failed before install() is free again: held here, it
  // looked held by a view, and has_room() stopped the consumer fetching.
  taken_host_.reset();
  taken_device_.reset();
  if (runtime_) {
    taken_device_ = free_one<detail::DeviceBuffer>(
        device_pool_, bytes, max_buffers_, [](const detail::DeviceBuffer& b) { return b.size; },
        [&] { return device_buffer(*runtime_, device_, bytes); });
    return static_cast<std::byte*>(taken_device_->base);
  }
  // A free member first: memory made ahead is for when none is (it stays ready meanwhile).
  const bool free_fits = std::any_of(host_pool_.begin(), host_pool_.end(), [&](const auto& buffer) {
    return buffer && buffer.use_count() == 1 && buffer->size() >= bytes;
  });
  if (auto ahead = free_fits ? nullptr : take_ahead(bytes)) {
    taken_host_ = std::move(ahead);
    return taken_host_->data();
  }
  taken_host_ = free_one<HostBuffer>(host_pool_, bytes, max_buffers_, [](const HostBuffer& b) { return b.size(); },
                                     [&] { return std::make_shared<HostBuffer>(bytes); });
  return taken_host_->data();
}

bool ShapingTarget::has_room() const {
  // A buffer taken for a version whose shaping failed before install() is free too (take() lets
  // it go): only the pool and taken_* hold it.
  const auto free_in = [this](const auto& pool, const auto& taken) {
    return pool.size() < max_buffers_ || std::any_of(pool.begin(), pool.end(), [&](const auto& buffer) {
             return !buffer || buffer.use_count() == 1 || (buffer == taken && buffer.use_count() == 2);
           });
  };
  return runtime_ ? free_in(device_pool_, taken_device_) : free_in(host_pool_, taken_host_);
}

void ShapingTarget::allocate_ahead(std::size_t bytes) {
  if (runtime_ || bytes == 0 || ahead_.covers(bytes)) return;
  std::size_t held = 0;
  for (const auto& buffer : host_pool_) {
    if (buffer && buffer.use_count() > 1) {
      ++held;
    } else if (buffer && buffer->size() >= bytes) {
      return;  // a free one large enough: the next version takes it
    }
  }
  if (held >= max_buffers_) return;
  ahead_.start(bytes);
}

// The memory made ahead, put in the pool in place of a free member (or beside the others when
// there is room), or nullptr when HostBufferAhead::take has none for `bytes`.
std::shared_ptr<HostBuffer> ShapingTarget::take_ahead(std::size_t bytes) {
  auto taken = ahead_.take(bytes);
  if (!taken) return nullptr;
  auto made = std::make_shared<HostBuffer>(std::move(*taken));
  for (auto& buffer : host_pool_) {
    if (!buffer || buffer.use_count() == 1) {
      buffer = made;
      return made;
    }
  }
  if (host_pool_.size() >= max_buffers_) return nullptr;
  host_pool_.push_back(made);
  return made;
}

void ShapingTarget::gather(std::byte* dst, const std::byte* src, std::span<const layout::CopyRun> runs) {
  if (!runtime_) {
    for (const auto& run : runs) std::memcpy(dst + run.dst_offset, src + run.src_offset, run.bytes);
    return;
  }
  runs_.clear();
  for (const auto& run : runs) runs_.push_back({run.src_offset, run.dst_offset, run.bytes});
  runtime_->gather_async(dst, src, runs_, stream_);
}

void ShapingTarget::copy(std::byte* dst, const std::byte* src, std::size_t bytes) {
  if (bytes == 0) return;
  if (runtime_) return runtime_->copy_async(dst, src, bytes, stream_);
  std::memcpy(dst, src, bytes);
}

std::byte* ShapingTarget::scratch(std::size_t bytes) {
  if (!runtime_) {
    host_scratch_.resize(bytes);
    return host_scratch_.data();
  }
  if (!device_scratch_ || device_scratch_->size < bytes) {
    runtime_->synchronize_stream(stream_);  // nothing queued may still use the old one
    device_scratch_.reset();
    device_scratch_ = device_buffer(*runtime_, device_, std::max<std::size_t>(bytes, 1));
  }
  return static_cast<std::byte*>(device_scratch_->base);
}

void ShapingTarget::convert(DType from, const std::byte* src, const TensorConversion& conversion, std::byte* dst,
                            std::size_t count, std::vector<float>& scales, std::size_t& scale_block) {
  if (!runtime_ || count == 0) return convert_elements(from, src, conversion, dst, count, scales, scale_block);
  if (conversion.to != DType::kF8E4M3) return runtime_->convert_async(dst, conversion.to, src, from, count, stream_);
  scales = runtime_->quantize_fp8(dst, src, from, count, conversion.fp8_block, stream_);
  if (conversion.fp8_block != 0) scale_block = conversion.fp8_block;
}

void ShapingTarget::install(detail::InstalledVersion& version) {
  if (runtime_) {
    runtime_->synchronize_stream(stream_);
    version.shaped_device = std::move(taken_device_);
  } else {
    version.shaped_memory = std::move(taken_host_);
  }
  taken_device_.reset();
  taken_host_.reset();
}

}  // namespace modelcast::consumer
