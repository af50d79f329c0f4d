// Faults the simulated device injects when a test asks, for the tests of what the library does
// when device work fails or runs late, and what it lets a test see of the copies it ran. A GPU
// fails or delays such work rarely and never on demand, so only the simulation can make these
// tests deterministic; they skip on a real device.
#pragma once

#include <cstdint>
#include <future>

#include "device/device_runtime.h"

namespace modelcast::device {

class SimulatedFaults {
 public:
  virtual ~SimulatedFaults() = default;

  // The `nth` copy from device memory to host memory queued from now on (1 = the next one)
  // waits on its stream until `release` is ready, copies nothing, and fails. It is reported
  // where CUDA reports an asynchronous failure: as Error(kTransport) from synchronize() or
  // ready() of the next event recorded on that stream (or from synchronize_stream()), once.
  // Unlike most asynchronous CUDA errors, which are sticky (the context is lost and every later
  // call fails), later work then runs normally: it stands for a failure the process survives,
  // so a test can show what the library does next. Throws kInvalidArgument for nth 0 or a
  // `release` without a state. Thread-safe; one armed fault at a time (arming replaces it).
  virtual void fail_copy_to_host(std::uint64_t nth, std::shared_future<void> release) = 0;
  // The same copy, held but not failed: it waits on its stream until `release` is ready and then
  // copies as usual (a device-to-host copy that runs late, so a test can see what the library
  // does meanwhile). Returns a future that becomes ready when the stream reaches the copy and
  // starts to wait: from then on, the stream's later work waits too. Shares the one armed fault
  // with fail_copy_to_host.
  virtual std::shared_future<void> hold_copy_to_host(std::uint64_t nth, std::shared_future<void> release) = 0;
  // The `nth` copy from another process's allocation mapped here (open_ipc) queued from now on,
  // held as hold_copy_to_host holds its copy: a peer's read of an exporter's memory under way,
  // so a test can see what the exporter does meanwhile. Shares the one armed fault.
  // Released allocations that were exported (export_allocation) are overwritten first, as a GPU
  // reuses freed memory: a copy that reads one after its release gets bytes that fail digests.
  virtual std::shared_future<void> hold_copy_from_peer(std::uint64_t nth, std::shared_future<void> release) = 0;
  // The `nth` device allocation (allocate()) from now on (1 = the next one), and the `count` - 1
  // after it, fail with Error(kResource), as cudaMalloc out of memory does; later ones succeed.
  // Independent of the copy faults. Thread-safe; throws kInvalidArgument for nth or count 0.
  virtual void fail_allocation(std::uint64_t nth, std::uint64_t count = 1) = 0;
  // Disarms the faults not yet reached (a test that ends early must not leave them to the next).
  virtual void disarm() = 0;

  // Bytes copied from host memory into device memory so far by this process, counted as each
  // copy completes on its stream (a landing's progress on the device, seen from outside).
  virtual std::uint64_t copied_host_to_device() const = 0;
  // Other processes' allocations this process has mapped (open_ipc) and not closed yet.
  virtual std::size_t open_ipc_mappings() const = 0;
};

// The faults of `runtime` when it is the simulated device; nullptr for any other.
SimulatedFaults* simulated_faults(DeviceRuntime& runtime);

}  // namespace modelcast::device
