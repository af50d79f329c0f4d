// The staged path's mover: a transfer of `total` bytes is cut into chunks that pass
// through `depth` bounce buffers in two asynchronous steps,
//
//   fill  : source[chunk]  -> bounce buffer     (producer: device->host copy; consumer: transport receive)
//   drain : bounce buffer  -> destination[chunk] (producer: transport send;    consumer: host->device copy)
//
// so copies overlap the network transfer. A bounce buffer is busy from the start of its chunk's
// fill until the end of its drain, hence at most `depth` chunks are in flight at any time.
//
// Steps are generic (Stage); CopyStage adapts a CopyEngine (an asynchronous memcpy: host memcpy
// in tests, a CUDA stream in cuda_copy_engine.h) into a fill or a drain step.
//
// Threads: one thread drives the pipeline (start/poll/run/wait); stage completions may arrive on
// any thread (a CUDA callback thread, a transport's progress thread) and only queue an event, so a
// completion never re-enters an engine (CUDA forbids API calls inside stream callbacks).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace modelcast::staging {

// Completion of one asynchronous operation: called exactly once, from any thread, possibly
// before the call that started it returns. `error` is set iff !ok.
using Done = std::function<void(bool ok, const std::string& error)>;

// One chunk of a transfer.
struct Chunk {
  std::size_t index = 0;
  std::uint64_t offset = 0;  // from the start of the transfer
  std::size_t length = 0;    // == chunk_bytes except possibly for the last chunk
};

// One step applied to a chunk. start() must not block on the step's completion; it reports
// through `done`. Throwing modelcast::Error from start() counts as that chunk failing.
class Stage {
 public:
  virtual ~Stage() = default;
  virtual void start(const Chunk& chunk, std::byte* bounce, Done done) = 0;
};

// An asynchronous memcpy. `done` obeys the Done contract and must do no more than record the
// completion (the pipeline's does). Throwing modelcast::Error = the copy was not started.
class CopyEngine {
 public:
  virtual ~CopyEngine() = default;
  virtual void copy(void* dst, const void* src, std::size_t size, Done done) = 0;
};

// Adapts a CopyEngine: fill copies base[offset..] -> bounce, drain copies bounce -> base[offset..].
class CopyStage final : public Stage {
 public:
  enum class Direction { kFill, kDrain };
  CopyStage(CopyEngine& engine, Direction direction, std::byte* base) : engine_(engine), direction_(direction), base_(base) {}
  void start(const Chunk& chunk, std::byte* bounce, Done done) override;

 private:
  CopyEngine& engine_;
  Direction direction_;
  std::byte* base_;
};

struct PipelineOptions {
  std::size_t chunk_bytes = std::size_t{8} << 20;
  std::size_t depth = 4;  // bounce buffers = chunks in flight at most
};

struct PipelineResult {
  bool ok = false;
  std::string error;          // the first failure: chunk index, byte range and the stage's message
  std::uint64_t done_bytes = 0;  // contiguous prefix delivered (both steps complete); never past a failure
};

// Progress: the contiguous delivered prefix grew to `done_bytes` (for hashing while receiving).
// Runs on the driving thread.
using Progress = std::function<void(std::uint64_t done_bytes)>;

class StagingPipeline {
 public:
  // `bounce` holds depth buffers of chunk_bytes back to back (pinned and transport-registered
  // once by the caller, reused for every transfer). Throws Error(kInvalidArgument) for a zero
  // chunk size or depth, or a bounce span shorter than chunk_bytes * depth.
  StagingPipeline(PipelineOptions options, std::span<std::byte> bounce);
  ~StagingPipeline();  // waits for operations still in flight (their buffers are ours)
  StagingPipeline(const StagingPipeline&) = delete;
  StagingPipeline& operator=(const StagingPipeline&) = delete;

  // Begins a transfer of `total` bytes. Throws Error(kState) if one is still running.
  void start(std::uint64_t total, Stage& fill, Stage& drain, Progress progress = {});
  // Handles the completions queued so far and starts what the free buffers allow. Never blocks.
  // Returns true once the transfer is over: everything delivered, or a failure seen and every
  // operation still in flight has completed (no buffer is in use any more).
  bool poll();
  // Blocks until the queued completions let poll() return true; returns the result.
  PipelineResult wait();
  // start() + wait().
  PipelineResult run(std::uint64_t total, Stage& fill, Stage& drain, Progress progress = {});
  // Valid once poll() returned true.
  PipelineResult result() const;

  const PipelineOptions& options() const { return options_; }
  std::size_t chunk_count(std::uint64_t total) const;

 private:
  enum class Step : std::uint8_t { kFill, kDrain };
  struct Event {
    std::size_t chunk;
    Step step;
    bool ok;
    std::string error;
  };
  struct ChunkState {
    std::size_t buffer = 0;
    bool drained = false;
  };

  Chunk chunk_at(std::size_t index) const;
  void launch(std::size_t index, Step step);
  void fail(std::size_t chunk, Step step, const std::string& error);
  void handle(const Event& event);
  void launch_fills();
  std::deque<Event> take_events();

  PipelineOptions options_;
  std::span<std::byte> bounce_;

  // Driving thread only.
  Stage* fill_ = nullptr;
  Stage* drain_ = nullptr;
  Progress progress_;
  std::uint64_t total_ = 0;
  std::size_t chunks_ = 0;
  std::size_t next_fill_ = 0;      // next chunk to start
  std::size_t done_prefix_ = 0;    // chunks [0, done_prefix_) delivered
  std::size_t outstanding_ = 0;    // operations started and not yet handled
  std::vector<std::size_t> free_buffers_;
  std::vector<ChunkState> states_;  // by chunk index
  bool running_ = false;
  bool failed_ = false;
  std::size_t failed_chunk_ = 0;
  std::string error_;
  PipelineResult result_;

  // Shared with completion threads.
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Event> events_;
};

}  // namespace modelcast::staging
