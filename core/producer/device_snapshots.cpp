#include "core/producer/device_snapshots.h"

#include <algorithm>
#include <string>

#include "common/library_thread.h"
#include "modelcast/error.h"

namespace modelcast::producer {

DeviceSnapshots::DeviceSnapshots(device::DeviceRuntime& runtime, int device, std::size_t slots, std::uint64_t bytes,
                                 Staged staged, Options options)
    : runtime_(runtime), device_(device), staged_(std::move(staged)), options_(options) {
  if (options_.stage_piece_bytes == 0 || options_.stage_depth == 0) {
    throw Error(ErrorCode::kInvalidArgument, "device staging: the piece size and the depth must be positive");
  }
  // On any failure below the destructor does not run: release what was made so far.
  try {
    for (std::size_t i = 0; i < options_.stage_depth; ++i) piece_done_.push_back(runtime_.create_event(device));
    staged_jobs_.resize(slots);
    for (std::size_t i = 0; i < slots; ++i) {
      slots_.push_back(runtime_.allocate(device, bytes));
      copied_.push_back(runtime_.create_event(device));
    }
    copy_stream_ = runtime_.create_stream(device);
    stage_stream_ = runtime_.create_stream(device);
    caller_point_ = runtime_.create_event(device);
    thread_ = library_thread("device staging", [this] { run(); });
  } catch (...) {
    for (auto* p : slots_) runtime_.release(p);
    for (auto* e : copied_) runtime_.destroy_event(e);
    for (auto* e : piece_done_) runtime_.destroy_event(e);
    if (caller_point_) runtime_.destroy_event(caller_point_);
    if (copy_stream_) runtime_.destroy_stream(copy_stream_);
    if (stage_stream_) runtime_.destroy_stream(stage_stream_);
    throw;
  }
}

void DeviceSnapshots::stop() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  pins_.clear();  // before the host slots are freed
}

DeviceSnapshots::~DeviceSnapshots() {
  stop();
  pins_.clear();
  runtime_.destroy_stream(copy_stream_);
  runtime_.destroy_stream(stage_stream_);
  runtime_.destroy_event(caller_point_);
  for (auto* e : copied_) runtime_.destroy_event(e);
  for (auto* e : piece_done_) runtime_.destroy_event(e);
  for (auto* p : slots_) runtime_.release(p);
}

void DeviceSnapshots::pin_host_slots(const std::vector<std::pair<std::byte*, std::size_t>>& slots) {
  for (const auto& [base, size] : slots) pins_.push_back(std::make_unique<device::HostPin>(runtime_, base, size));
}

void DeviceSnapshots::copy(std::size_t slot, const Manifest& layout, std::span<const TensorRef> tensors,
                           const DeviceOrder& order) {
  if (order.event) {
    runtime_.wait(copy_stream_, order.event);
  } else {
    // The trainer's stream, or the legacy default stream (nullptr), which our streams do not
    // follow by themselves.
    runtime_.record(caller_point_, order.stream);
    runtime_.wait(copy_stream_, caller_point_);
  }
  auto* base = static_cast<std::byte*>(slots_[slot]);
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto& entry = layout.tensors[i];
    if (entry.size != 0) runtime_.copy_async(base + entry.offset, tensors[i].data, entry.size, copy_stream_);
  }
  runtime_.record(copied_[slot], copy_stream_);
  // With the trainer's stream, its next kernels wait for the copies on the GPU and publish()
  // returns at once; otherwise nothing orders the trainer after them, so wait here.
  if (order.stream) {
    runtime_.wait(order.stream, copied_[slot]);
  } else {
    runtime_.synchronize(copied_[slot]);
  }
}

void DeviceSnapshots::stage(std::size_t slot, Manifest manifest, std::byte* host, Clock::time_point called_at,
                            HostCopy host_copy) {
  {
    std::lock_guard lock(mutex_);
    jobs_.push_back(Job{slot, std::move(manifest), host, called_at, host_copy});
  }
  cv_.notify_all();
}

void DeviceSnapshots::copy_to_host(std::size_t slot, std::uint64_t version) {
  {
    std::lock_guard lock(mutex_);
    Job job{slot, {}, nullptr, {}, HostCopy::kNow, true};
    job.manifest.version = version;  // the rest is the staged job's, taken on the staging thread
    jobs_.push_back(std::move(job));
  }
  cv_.notify_all();
}

void DeviceSnapshots::run() {
  for (;;) {
    Job job;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
      if (stop_) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    std::string error;
    if (job.host_only) {
      const std::uint64_t version = job.manifest.version;
      if (staged_jobs_[job.slot].manifest.version != version) {
        staged_(Step::kOnHost, job.slot, job.manifest, job.called_at, 0,
                "version " + std::to_string(version) + " is no longer in its device slot");
        continue;
      }
      job = staged_jobs_[job.slot];
    } else {
      try {
        digest(job);
      } catch (const std::exception& e) {
        error = e.what();
      }
      const bool now = job.host_copy == HostCopy::kNow;
      if (error.empty()) staged_jobs_[job.slot] = job;
      staged_(now ? Step::kDigested : Step::kDigestedDeviceOnly, job.slot, job.manifest, job.called_at, 0, error);
      if (!error.empty() || !now) continue;
    }
    try {
      stage_to_host(job);
    } catch (const std::exception& e) {
      error = e.what();
      // Nothing queued may still write the host slot or read the device slot once this
      // version's failure lets the service hand them out again.
      try {
        runtime_.synchronize_stream(stage_stream_);
      } catch (const std::exception&) {
      }
    }
    staged_(Step::kOnHost, job.slot, job.manifest, job.called_at, error.empty() ? job.manifest.total_bytes : 0, error);
  }
}

// Up to stage_depth pieces are queued on the staging stream, each followed by an event; the
// thread waits for the oldest, reports the prefix it completes, and queues the next piece.
void DeviceSnapshots::stage_to_host(const Job& job) {
  const std::uint64_t total = job.manifest.total_bytes;
  const std::uint64_t piece = options_.stage_piece_bytes;
  const std::size_t depth = piece_done_.size();
  const auto* device_base = static_cast<const std::byte*>(slots_[job.slot]);
  const std::size_t pieces = static_cast<std::size_t>((total + piece - 1) / piece);
  auto finished = [&](std::size_t i) {
    runtime_.synchronize(piece_done_[i % depth]);
    const std::uint64_t prefix = std::min(total, (i + 1) * piece);
    if (prefix < total) staged_(Step::kHostPrefix, job.slot, job.manifest, job.called_at, prefix, {});
  };
  for (std::size_t i = 0; i < pieces; ++i) {
    if (i >= depth) finished(i - depth);
    const std::uint64_t offset = i * piece;
    runtime_.copy_async(job.host + offset, device_base + offset, std::min(piece, total - offset), stage_stream_);
    runtime_.record(piece_done_[i % depth], stage_stream_);
  }
  for (std::size_t i = pieces > depth ? pieces - depth : 0; i < pieces; ++i) finished(i);
}

// The digest is of the device slot (what the trainer's tensors were), taken before any copy
// out of it, so a consumer's check also covers that copy and the transport.
void DeviceSnapshots::digest(Job& job) {
  const auto* base = static_cast<const std::byte*>(slots_[job.slot]);
  runtime_.wait(stage_stream_, copied_[job.slot]);
  if (job.manifest.integrity) {
    std::vector<device::ByteRange> ranges;
    ranges.reserve(job.manifest.tensors.size());
    for (const auto& t : job.manifest.tensors) ranges.push_back({t.offset, t.size});
    auto digests = runtime_.digest(device_, base, ranges, stage_stream_);
    for (std::size_t i = 0; i < digests.size(); ++i) job.manifest.tensors[i].digest = digests[i];
  } else {
    runtime_.synchronize(copied_[job.slot]);
  }
}

}  // namespace modelcast::producer
