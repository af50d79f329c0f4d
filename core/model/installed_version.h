// What a ModelView points at: one verified version and the receive buffer that holds its bytes.
#pragma once

#include <chrono>
#include <memory>
#include <span>

#include "common/host_buffer.h"
#include "core/model/manifest.h"
#include "transports/transport.h"

namespace modelcast::detail {

// A receive buffer is free for the next transfer exactly when no InstalledVersion refers to it.
// It keeps its transport alive so views may outlive the Consumer that made them.
struct ReceiveBuffer {
  std::shared_ptr<transport::Transport> transport;  // declared first: destroyed after `region`
  HostBuffer owned;                                 // empty when the caller gave the memory
  std::span<std::byte> memory;
  std::unique_ptr<transport::MemoryRegion> region;
};

struct InstalledVersion {
  Manifest manifest;
  std::shared_ptr<ReceiveBuffer> buffer;
  std::chrono::nanoseconds update_latency{0};
};

}  // namespace modelcast::detail
