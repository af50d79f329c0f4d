// What a ModelView points at: one verified version and the receive buffer that holds its bytes.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/host_buffer.h"
#include "device/device_runtime.h"
#include "core/model/manifest.h"
#include "transports/transport.h"

namespace modelcast::detail {

// Device memory a device consumer's versions live in (its own copy of a staged version, or a
// receive buffer a one-sided route reads into). Free for the next version exactly when no
// InstalledVersion refers to it; the runtime is never destroyed, so views may outlive everything.
struct DeviceBuffer {
  device::DeviceRuntime* runtime = nullptr;
  void* base = nullptr;
  std::size_t size = 0;
  ~DeviceBuffer() {
    if (base) runtime->release(base);
  }
};

// A receive buffer is free for the next transfer exactly when no InstalledVersion refers to it.
// It keeps its transport alive so views may outlive the Consumer that made them.
struct ReceiveBuffer {
  std::shared_ptr<transport::Transport> transport;  // declared first: destroyed after `region`
  HostBuffer owned;                                 // empty when the caller gave the memory
  std::unique_ptr<DeviceBuffer> device_owned;       // set when the buffer is device memory
  std::span<std::byte> memory;
  std::unique_ptr<device::HostPin> pin;             // a device consumer's landing buffer, pinned
  std::unique_ptr<transport::MemoryRegion> region;
  // Block digests of the verified version whose bytes the buffer still holds intact (set at
  // install, dropped when a fetch starts writing it; never for caller buffers the caller may
  // write, ConsumerOptions::caller_buffers_untouched): a delta leaves those blocks where they are. The
  // consumer's service thread only.
  std::vector<std::uint64_t> held_blocks;
  // Relay sends from this buffer given up while still posted (RelayServer::give_up_stuck): to
  // a receiver that died on this host, which UCX never ends. The buffer is reused, but never
  // released while the consumer runs (the release would wait on those sends). Service thread.
  std::size_t sends_given_up = 0;
};

// One tensor view of a consumer that shapes its views (ConsumerOptions::wants and conversions,
// core/consumer/tensor_shaper.h): a whole tensor or a part of one, maybe in another dtype, and
// where its bytes are.
struct ShapedTensor {
  TensorSpec spec;  // as views see it: the dtype converted to, the part's extent as shape
  // With the version's bytes at byte `offset` (a whole tensor or a contiguous part, not
  // converted: in the receive buffer, or a device consumer's copy), else in the version's shaped
  // memory at `offset`.
  bool in_receive_buffer = true;
  std::uint64_t offset = 0;
  std::vector<float> scales;  // f8e4m3: one per scale_block elements (0: one for the tensor)
  std::size_t scale_block = 0;
  // A part: where it starts in the whole tensor, and the whole tensor's shape. Empty: whole.
  std::vector<std::int64_t> box_offset;
  std::vector<std::int64_t> whole_shape;
};

struct InstalledVersion {
  Manifest manifest;                     // tensor specs say where the view's bytes are
  std::shared_ptr<ReceiveBuffer> buffer; // host consumers: the bytes; null for a device consumer
  std::shared_ptr<DeviceBuffer> device;  // device consumers: the bytes
  // The views, when the consumer shapes them (empty: the manifest's tensors as they arrived),
  // and the memory of those it gathered or converted. The manifest stays as the producer sent
  // it: deltas and relays work on those bytes.
  std::vector<ShapedTensor> shaped;
  bool shapes_views = false;  // views are `shaped` (which may be empty: nothing wanted)
  std::shared_ptr<const HostBuffer> shaped_memory;
  std::shared_ptr<const DeviceBuffer> shaped_device;  // a device consumer's shaped memory
  // Which wants the consumer fetched it with (its service's count of changes to them): a delta
  // against it copies only blocks those wants kept, so it is a base only for the same wants.
  std::uint64_t wants_generation = 0;
  // Per block of the manifest, whether its bytes are in `buffer` (only the blocks of the parts
  // the consumer keeps are fetched); empty: every block.
  std::vector<bool> blocks_held;
  std::chrono::nanoseconds update_latency{0};
  // Each view's positions by name (a name with parts has several), made at the first lookup by
  // name (ModelView::find, parts), once the version is installed and no longer changes: a scan per
  // lookup made looking up every tensor quadratic (19 s for 65,536 tensors).
  struct NameIndex {
    std::once_flag made;
    std::unordered_map<std::string_view, std::vector<std::size_t>> at;  // views of the version's names
  };
  std::unique_ptr<NameIndex> names = std::make_unique<NameIndex>();
};

}  // namespace modelcast::detail
