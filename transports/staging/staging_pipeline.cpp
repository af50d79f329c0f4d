#include "transports/staging/staging_pipeline.h"

#include <algorithm>
#include <exception>
#include <utility>

#include "modelcast/error.h"

namespace modelcast::staging {

void CopyStage::start(const Chunk& chunk, std::byte* bounce, Done done) {
  std::byte* at = base_ + chunk.offset;
  if (direction_ == Direction::kFill) {
    engine_.copy(bounce, at, chunk.length, std::move(done));
  } else {
    engine_.copy(at, bounce, chunk.length, std::move(done));
  }
}

StagingPipeline::StagingPipeline(PipelineOptions options, std::span<std::byte> bounce)
    : options_(options), bounce_(bounce) {
  if (options_.chunk_bytes == 0) throw Error(ErrorCode::kInvalidArgument, "staging: chunk size must be positive");
  if (options_.depth == 0) throw Error(ErrorCode::kInvalidArgument, "staging: depth must be positive");
  if (options_.chunk_bytes > bounce_.size() / options_.depth) {
    throw Error(ErrorCode::kInvalidArgument,
                "staging: " + std::to_string(bounce_.size()) + " bounce bytes cannot hold depth " +
                    std::to_string(options_.depth) + " x chunk " + std::to_string(options_.chunk_bytes));
  }
}

StagingPipeline::~StagingPipeline() {
  // Abandoned mid-transfer: start nothing more and wait until no stage uses a buffer or `this`.
  failed_ = true;
  while (outstanding_ > 0) {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return !events_.empty(); });
    auto events = std::exchange(events_, {});
    lock.unlock();
    outstanding_ -= events.size();
  }
}

std::size_t StagingPipeline::chunk_count(std::uint64_t total) const {
  return static_cast<std::size_t>((total + options_.chunk_bytes - 1) / options_.chunk_bytes);
}

Chunk StagingPipeline::chunk_at(std::size_t index) const {
  Chunk chunk;
  chunk.index = index;
  chunk.offset = std::uint64_t{index} * options_.chunk_bytes;
  chunk.length = static_cast<std::size_t>(std::min<std::uint64_t>(options_.chunk_bytes, total_ - chunk.offset));
  return chunk;
}

void StagingPipeline::start(std::uint64_t total, Stage& fill, Stage& drain, Progress progress) {
  if (running_) throw Error(ErrorCode::kState, "staging: a transfer is still running");
  fill_ = &fill;
  drain_ = &drain;
  progress_ = std::move(progress);
  total_ = total;
  chunks_ = chunk_count(total);
  next_fill_ = 0;
  done_prefix_ = 0;
  outstanding_ = 0;
  free_buffers_.clear();
  for (std::size_t i = options_.depth; i-- > 0;) free_buffers_.push_back(i);  // buffer 0 on top
  states_.assign(chunks_, ChunkState{});
  failed_ = false;
  failed_chunk_ = 0;
  error_.clear();
  result_ = {};
  running_ = true;
}

void StagingPipeline::launch(std::size_t index, Step step) {
  const Chunk chunk = chunk_at(index);
  std::byte* buffer = bounce_.data() + states_[index].buffer * options_.chunk_bytes;
  ++outstanding_;
  Done done = [this, index, step](bool ok, const std::string& error) {
    // Notified under the lock: once the driving thread can see the event it may finish and
    // destroy the pipeline, so nothing of ours may be touched after the unlock.
    std::lock_guard lock(mutex_);
    events_.push_back(Event{index, step, ok, ok ? std::string() : error});
    cv_.notify_one();
  };
  try {
    (step == Step::kFill ? fill_ : drain_)->start(chunk, buffer, std::move(done));
  } catch (const std::exception& e) {
    // Not started: no completion will come.
    --outstanding_;
    fail(index, step, std::string("could not start: ") + e.what());
    free_buffers_.push_back(states_[index].buffer);
  }
}

void StagingPipeline::fail(std::size_t chunk, Step step, const std::string& error) {
  if (failed_ && failed_chunk_ <= chunk) return;  // keep the failure that bounds the delivered prefix
  const Chunk c = chunk_at(chunk);
  failed_ = true;
  failed_chunk_ = chunk;
  error_ = "staging: chunk " + std::to_string(chunk) + " (bytes " + std::to_string(c.offset) + ".." +
           std::to_string(c.offset + c.length) + ") " + (step == Step::kFill ? "fill" : "drain") +
           " failed: " + error;
}

void StagingPipeline::handle(const Event& event) {
  --outstanding_;
  ChunkState& state = states_[event.chunk];
  if (!event.ok) {
    fail(event.chunk, event.step, event.error);
    free_buffers_.push_back(state.buffer);
    return;
  }
  if (event.step == Step::kFill) {
    if (failed_) {
      free_buffers_.push_back(state.buffer);  // no new work after a failure
      return;
    }
    launch(event.chunk, Step::kDrain);
    return;
  }
  state.drained = true;
  free_buffers_.push_back(state.buffer);
  const std::size_t before = done_prefix_;
  while (done_prefix_ < chunks_ && states_[done_prefix_].drained) ++done_prefix_;
  if (done_prefix_ != before && progress_) {
    progress_(done_prefix_ == chunks_ ? total_ : std::uint64_t{done_prefix_} * options_.chunk_bytes);
  }
}

void StagingPipeline::launch_fills() {
  while (!failed_ && next_fill_ < chunks_ && !free_buffers_.empty()) {
    const std::size_t index = next_fill_++;
    states_[index].buffer = free_buffers_.back();
    free_buffers_.pop_back();
    launch(index, Step::kFill);
  }
}

std::deque<StagingPipeline::Event> StagingPipeline::take_events() {
  std::lock_guard lock(mutex_);
  return std::exchange(events_, {});
}

bool StagingPipeline::poll() {
  if (!running_) return true;
  for (const Event& event : take_events()) handle(event);
  launch_fills();
  // A start() that throws completes synchronously, so more fills may be possible: launch_fills()
  // loops until no buffer is free, the chunks run out or a failure stops it.
  const bool over = outstanding_ == 0 && (failed_ || done_prefix_ == chunks_);
  if (!over) return false;
  running_ = false;
  result_.ok = !failed_;
  result_.error = error_;
  result_.done_bytes = done_prefix_ == chunks_ ? total_ : std::uint64_t{done_prefix_} * options_.chunk_bytes;
  return true;
}

PipelineResult StagingPipeline::wait() {
  while (!poll()) {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return !events_.empty(); });
  }
  return result_;
}

PipelineResult StagingPipeline::run(std::uint64_t total, Stage& fill, Stage& drain, Progress progress) {
  start(total, fill, drain, std::move(progress));
  return wait();
}

PipelineResult StagingPipeline::result() const { return result_; }

}  // namespace modelcast::staging
