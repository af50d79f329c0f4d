// Faults the simulated device injects when a test asks, for the tests of what the library does
// when device work fails. A GPU fails such work rarely and never on demand, so only the
// simulation can make these tests deterministic; they skip on a real device.
#pragma once

#include <cstdint>
#include <future>

#include "core/device/device_runtime.h"

namespace modelcast::device {

class SimulatedFaults {
 public:
  virtual ~SimulatedFaults() = default;

  // The `nth` copy from device memory to host memory queued from now on (1 = the next one)
  // waits on its stream until `release` is ready, copies nothing, and fails. As CUDA reports an
  // asynchronous failure, it surfaces once, as Error(kTransport) from synchronize() of the next
  // event recorded on that stream (or from synchronize_stream()); later work runs normally.
  // Thread-safe; one armed fault at a time (arming again replaces it).
  virtual void fail_copy_to_host(std::uint64_t nth, std::shared_future<void> release) = 0;
};

// The faults of `runtime` when it is the simulated device; nullptr for any other.
SimulatedFaults* simulated_faults(DeviceRuntime& runtime);

}  // namespace modelcast::device
