// publish() for device tensors: the copies into a device slot, ordered against the trainer's
// GPU work, and the staging of each version on a thread of its own in two steps: the pmix64
// digest taken on the device (the version can then be read from the device slot), then the
// device-to-host copy into the host slot the two-sided transports send from, in pieces whose
// completion is reported as it happens, so sends of the first chunks overlap the copy of the
// rest. The producer has the host copy made only while some consumer or the persister needs
// it: with every consumer reading the device slot (CUDA IPC) it would only compete with their
// reads for the GPU (on an H200 a 1 GiB version reached an IPC consumer in 19 ms with the copy
// running, under 5 ms without).
//
// Threads: copy() runs on the trainer's thread and is the whole of its stall. The staging
// thread owns the staging stream and finishes versions in order; it reports each step through
// `Staged` (which only pushes an event). A device slot is written by copy() only while the
// SnapshotStore has it reserved; the staging thread reads it after it was reported digested,
// and the service keeps the slot pinned until the host copy is reported too.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "device/device_runtime.h"
#include "core/model/manifest.h"
#include "modelcast/producer.h"

namespace modelcast::producer {

class DeviceSnapshots {
 public:
  using Clock = std::chrono::steady_clock;
  // kDigested: the device slot holds the version, digests filled in (integrity on). kHostPrefix:
  // the host slot holds the version's first `host_bytes` (less than all of it). kOnHost: the
  // host slot holds all of it. With an error, the step failed (kDigested failing ends the
  // version; kOnHost failing leaves it readable from the device only). kDigestedDeviceOnly: as
  // kDigested, for a version staged with HostCopy::kOnRequest.
  enum class Step { kDigested, kDigestedDeviceOnly, kHostPrefix, kOnHost };
  // Runs on the staging thread: kDigested, then kHostPrefix zero or more times with growing
  // host_bytes, then kOnHost (unless kDigested failed). With HostCopy::kOnRequest:
  // kDigestedDeviceOnly, then the kHostPrefix and kOnHost reports once copy_to_host() asks.
  using Staged = std::function<void(Step step, std::size_t slot, const Manifest& manifest, Clock::time_point called_at,
                                    std::uint64_t host_bytes, const std::string& error)>;

  struct Options {
    // Pieces of the device-to-host copy whose completion is reported on its own: small enough
    // that the first chunks leave early, large enough that a copy runs near the link's speed.
    std::uint64_t stage_piece_bytes = std::uint64_t{8} << 20;
    // Pieces queued on the staging stream ahead of the one being waited for.
    std::size_t stage_depth = 4;
  };

  // Allocates `slots` device slots of `bytes` on `device`. Throws Error(kResource/kTransport),
  // or Error(kInvalidArgument) for a zero piece size or depth.
  DeviceSnapshots(device::DeviceRuntime& runtime, int device, std::size_t slots, std::uint64_t bytes, Staged staged,
                  Options options);
  DeviceSnapshots(device::DeviceRuntime& runtime, int device, std::size_t slots, std::uint64_t bytes, Staged staged)
      : DeviceSnapshots(runtime, device, slots, bytes, std::move(staged), Options{}) {}
  ~DeviceSnapshots();  // stop(), then waits for the streams and frees the slots
  // Stages nothing further, joins the staging thread and unpins the host slots; the device
  // slots stay allocated. Before the host slots are freed.
  void stop();
  DeviceSnapshots(const DeviceSnapshots&) = delete;
  DeviceSnapshots& operator=(const DeviceSnapshots&) = delete;

  // Trainer's thread. Queues the copy of each tensor into device slot `slot` at the layout's
  // offsets, ordered per `order` (see DeviceOrder); returns once publish() may return.
  void copy(std::size_t slot, const Manifest& layout, std::span<const TensorRef> tensors, const DeviceOrder& order);
  // Whether stage() copies the version to its host slot at once or only when copy_to_host() asks.
  enum class HostCopy { kNow, kOnRequest };
  // Any thread. Stages the version copied into `slot` into `host` (total_bytes long), in the
  // background; `host` must stay unread by senders until `Staged` ran for it.
  void stage(std::size_t slot, Manifest manifest, std::byte* host, Clock::time_point called_at,
             HostCopy host_copy = HostCopy::kNow);
  // Any thread. Copies `version`, staged in `slot` with HostCopy::kOnRequest, to its host slot
  // after the jobs queued before; the caller keeps the slot from being written until kOnHost.
  // kOnHost reports an error if the slot holds another version by then.
  void copy_to_host(std::size_t slot, std::uint64_t version);

  int device() const { return device_; }
  // Pins the host slots versions are staged into (once, after they are allocated): a copy to
  // pageable memory runs at a fraction of the link's speed. They stay pinned while this lives.
  void pin_host_slots(const std::vector<std::pair<std::byte*, std::size_t>>& slots);
  // The device slots, one per snapshot slot: what one-sided transports export.
  const std::vector<void*>& slots() const { return slots_; }

 private:
  struct Job {
    std::size_t slot;
    Manifest manifest;
    std::byte* host;
    Clock::time_point called_at;
    HostCopy host_copy = HostCopy::kNow;
    bool host_only = false;  // copy_to_host(): the version was digested by an earlier job
  };
  void run();
  void digest(Job& job);
  // Copies the job's version to its host slot piece by piece, reporting each finished prefix.
  void stage_to_host(const Job& job);

  device::DeviceRuntime& runtime_;
  const int device_;
  Staged staged_;
  const Options options_;
  std::vector<void*> slots_;                // device memory, one per snapshot slot
  std::vector<device::EventHandle> copied_; // recorded after each slot's copies
  device::StreamHandle copy_stream_ = nullptr;    // trainer's thread
  device::StreamHandle stage_stream_ = nullptr;   // staging thread
  device::EventHandle caller_point_ = nullptr;    // trainer's thread: a point on the caller's stream
  std::vector<device::EventHandle> piece_done_;   // staging thread: a ring of stage_depth events
  // Staging thread: what each slot holds (its last staged job), for copy_to_host().
  std::vector<Job> staged_jobs_;

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;  // guarded by mutex_
  bool stop_ = false;     // guarded by mutex_
  std::vector<std::unique_ptr<device::HostPin>> pins_;  // trainer's thread: prepare, then stop
  std::thread thread_;
};

}  // namespace modelcast::producer
