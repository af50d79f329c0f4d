// Where a consumer's shaped views go (parts gathered, tensors converted, a ranked model's pieces
// assembled) and what moves the bytes there: host memory with memcpy and layout's conversions, or
// a device's memory with DeviceRuntime's gather, conversion and fp8 quantization on a stream of
// its own. Both give the same bits (device/element_format.h is the one arithmetic). Sources are
// in the same memory as the target: a host consumer's receive buffers, or a device consumer's
// device copies.
//
// Threads: one caller at a time (a consumer's service thread, or the rank assembler under its
// lock). Memory handed out is shared with installed versions; a piece is reused for a later
// version only when no view holds it. allocate_ahead() makes the next version's host memory on a
// helper thread of its own (HostBufferAhead); the caller alone owns it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/host_buffer.h"
#include "common/host_buffer_ahead.h"
#include "core/layout/copy_runs.h"
#include "core/model/installed_version.h"
#include "device/device_runtime.h"
#include "modelcast/consumer.h"

namespace modelcast::consumer {

// Converts `count` elements of dtype `from` (f32, f16 or bf16) at `src` into `dst` as
// `conversion` asks, in host memory; an f8e4m3 target sets `scales` and `scale_block`
// (view.scales' meaning).
void convert_elements(DType from, const std::byte* src, const TensorConversion& conversion, std::byte* dst,
                      std::size_t count, std::vector<float>& scales, std::size_t& scale_block);

class ShapingTarget {
 public:
  // Host memory; at most `max_buffers` versions' shaped views at once (a consumer's buffers:
  // versions readers hold keep theirs).
  explicit ShapingTarget(std::size_t max_buffers);
  // Device memory of `device`; the work goes on a stream of the target's own. Throws
  // Error(kTransport) if the stream cannot be made.
  ShapingTarget(device::DeviceRuntime& runtime, int device, std::size_t max_buffers);
  ~ShapingTarget();  // waits for the stream; memory held by views stays valid
  ShapingTarget(const ShapingTarget&) = delete;
  ShapingTarget& operator=(const ShapingTarget&) = delete;

  bool on_device() const noexcept { return runtime_ != nullptr; }
  int device() const noexcept { return device_; }  // 0 for host memory

  // Memory for `bytes` of a version's shaped views that no installed version holds; taken by
  // install(). std::bad_alloc or Error(kResource) when it cannot be had, or when every one of
  // the max_buffers is held by a view.
  std::byte* take(std::size_t bytes);
  // Whether take() can hand out memory without exceeding max_buffers: a member no view holds, or
  // room for another. Views are released from readers' threads, so a false may turn true.
  bool has_room() const;
  // Queues the copies of `runs` from `src` to `dst`; one run copies `bytes` bytes.
  void gather(std::byte* dst, const std::byte* src, std::span<const layout::CopyRun> runs);
  void copy(std::byte* dst, const std::byte* src, std::size_t bytes);
  // Scratch of `bytes` (a part gathered before it converts), valid until the next scratch().
  std::byte* scratch(std::size_t bytes);
  // convert_elements on this target's memory.
  void convert(DType from, const std::byte* src, const TensorConversion& conversion, std::byte* dst,
               std::size_t count, std::vector<float>& scales, std::size_t& scale_block);
  // Waits for the queued work and gives `version` the memory take() handed out (if any).
  void install(detail::InstalledVersion& version);
  // Starts making host memory of `bytes` for the next version on a helper thread, when no free
  // member of the pool is large enough and the pool has room; nothing for device memory. Call
  // once the version installed last is the one readers see (the one before it then released),
  // or a member about to be freed would be made again.
  void allocate_ahead(std::size_t bytes);

 private:
  std::shared_ptr<HostBuffer> take_ahead(std::size_t bytes);
  device::DeviceRuntime* runtime_ = nullptr;
  int device_ = 0;
  device::StreamHandle stream_ = nullptr;
  std::size_t max_buffers_ = 1;
  std::shared_ptr<HostBuffer> taken_host_;
  std::shared_ptr<detail::DeviceBuffer> taken_device_;
  std::vector<std::shared_ptr<HostBuffer>> host_pool_;  // free when only the pool refers to one
  HostBufferAhead ahead_;  // host memory being made for the next version, not yet pooled
  std::vector<std::shared_ptr<detail::DeviceBuffer>> device_pool_;
  std::vector<std::byte> host_scratch_;
  std::shared_ptr<detail::DeviceBuffer> device_scratch_;
  std::vector<device::ByteRun> runs_;  // gather()'s conversion of runs, kept to reuse its memory
};

}  // namespace modelcast::consumer
