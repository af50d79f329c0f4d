// What a ModelView points at: one verified version and the receive buffer that holds its bytes.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <span>
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
  // install, dropped when a fetch starts writing it; never for caller buffers, which the caller
  // may write while no view uses them): a delta leaves those blocks where they are. The
  // consumer's service thread only.
  std::vector<std::uint64_t> held_blocks;
};

// A tensor the consumer converted to another dtype (ConsumerOptions::conversions): its spec as
// views see it, and where its bytes are in the version's converted memory.
struct ConvertedTensor {
  TensorSpec spec;
  std::uint64_t offset = 0;
  std::vector<float> scales;  // f8e4m3: one per scale_block elements (0: one for the tensor)
  std::size_t scale_block = 0;
};

struct InstalledVersion {
  Manifest manifest;                     // tensor specs say where the view's bytes are
  std::shared_ptr<ReceiveBuffer> buffer; // host consumers: the bytes; null for a device consumer
  std::shared_ptr<DeviceBuffer> device;  // device consumers: the bytes
  // Converted tensors, by the manifest's tensor index (empty: none), and the memory they are
  // in. The manifest stays as the producer sent it: deltas and relays work on those bytes.
  std::vector<std::optional<ConvertedTensor>> converted;
  std::shared_ptr<const HostBuffer> converted_memory;
  std::chrono::nanoseconds update_latency{0};
};

}  // namespace modelcast::detail
