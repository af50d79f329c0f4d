// The staged path's pipeline against host memory: bytes intact, bounded chunks in flight,
// failures reported without claiming later chunks. Engines here are host memcpys: a threaded
// one that completes queued copies in random order, and a manual one the test completes
// step by step (deterministic, single-threaded, with poll()).
#include "transports/staging/staging_pipeline.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "modelcast/error.h"

namespace modelcast::staging {
namespace {

std::vector<std::byte> random_bytes(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::byte> v(n);
  for (auto& b : v) b = static_cast<std::byte>(rng());
  return v;
}

// Copies on a worker thread, picking a random queued copy each time (so completions arrive
// out of order and on another thread). Optionally fails the copy number `fail_at` (0-based).
class ThreadedHostEngine final : public CopyEngine {
 public:
  explicit ThreadedHostEngine(std::uint32_t seed, long fail_at = -1) : rng_(seed), fail_at_(fail_at) {
    worker_ = std::thread([this] { loop(); });
  }
  ~ThreadedHostEngine() override {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    cv_.notify_one();
    worker_.join();
  }
  void copy(void* dst, const void* src, std::size_t size, Done done) override {
    {
      std::lock_guard lock(mutex_);
      queue_.push_back(Op{dst, src, size, std::move(done), submitted_++});
    }
    cv_.notify_one();
  }

 private:
  struct Op {
    void* dst;
    const void* src;
    std::size_t size;
    Done done;
    long number;
  };
  void loop() {
    std::unique_lock lock(mutex_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and drained
      std::size_t pick = std::uniform_int_distribution<std::size_t>(0, queue_.size() - 1)(rng_);
      Op op = std::move(queue_[pick]);
      queue_.erase(queue_.begin() + static_cast<std::ptrdiff_t>(pick));
      lock.unlock();
      if (op.number == fail_at_) {
        op.done(false, "injected engine error");
      } else {
        std::memcpy(op.dst, op.src, op.size);
        op.done(true, {});
      }
      lock.lock();
    }
  }
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<Op> queue_;
  std::mt19937 rng_;
  long fail_at_;
  long submitted_ = 0;
  bool stop_ = false;
  std::thread worker_;
};

// Holds copies until the test completes them.
class ManualEngine final : public CopyEngine {
 public:
  struct Op {
    void* dst;
    const void* src;
    std::size_t size;
    Done done;
  };
  void copy(void* dst, const void* src, std::size_t size, Done done) override {
    if (throw_on_next_) {
      throw_on_next_ = false;
      throw Error(ErrorCode::kTransport, "engine refused the copy");
    }
    pending.push_back(Op{dst, src, size, std::move(done)});
    ++submitted;
  }
  void complete(std::size_t i, bool ok = true) {
    Op op = std::move(pending.at(i));
    pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
    if (ok) std::memcpy(op.dst, op.src, op.size);
    op.done(ok, ok ? std::string() : "manual engine error");
  }
  std::vector<Op> pending;
  std::size_t submitted = 0;
  bool throw_on_next_ = false;
};

// Wraps the fill and drain stages and checks, at every step, what the pipeline does with its
// bounce buffers: a buffer holds one chunk from the start of its fill to the end of its drain;
// no two chunks share a buffer; never more than `depth` buffers busy; the drain of a chunk
// reads the buffer its fill wrote.
class Tracker {
 public:
  explicit Tracker(std::size_t depth) : depth_(depth) {}
  class Wrapped final : public Stage {
   public:
    Wrapped(Tracker& tracker, Stage& inner, bool fill) : tracker_(tracker), inner_(inner), fill_(fill) {}
    void start(const Chunk& chunk, std::byte* bounce, Done done) override {
      if (fill_) {
        tracker_.on_fill(chunk.index, bounce);
        inner_.start(chunk, bounce, std::move(done));
        return;
      }
      tracker_.on_drain(chunk.index, bounce);
      inner_.start(chunk, bounce, [this, index = chunk.index, done = std::move(done)](bool ok, const std::string& error) {
        tracker_.on_drained(index);
        done(ok, error);
      });
    }

   private:
    Tracker& tracker_;
    Stage& inner_;
    bool fill_;
  };

  std::size_t busy() {
    std::lock_guard lock(mutex_);
    return owner_.size();
  }
  std::size_t max_busy() {
    std::lock_guard lock(mutex_);
    return max_busy_;
  }
  std::vector<std::string> violations() {
    std::lock_guard lock(mutex_);
    return violations_;
  }

 private:
  void on_fill(std::size_t chunk, std::byte* bounce) {
    std::lock_guard lock(mutex_);
    if (owner_.count(bounce)) violations_.push_back("chunk " + std::to_string(chunk) + " filled a busy buffer");
    owner_[bounce] = chunk;
    max_busy_ = std::max(max_busy_, owner_.size());
    if (owner_.size() > depth_) violations_.push_back(std::to_string(owner_.size()) + " chunks in flight");
  }
  void on_drain(std::size_t chunk, std::byte* bounce) {
    std::lock_guard lock(mutex_);
    auto it = owner_.find(bounce);
    if (it == owner_.end() || it->second != chunk) violations_.push_back("chunk " + std::to_string(chunk) + " drained from another buffer");
    buffer_of_[chunk] = bounce;
  }
  void on_drained(std::size_t chunk) {
    std::lock_guard lock(mutex_);
    owner_.erase(buffer_of_[chunk]);
  }
  std::size_t depth_;
  std::mutex mutex_;
  std::map<std::byte*, std::size_t> owner_;
  std::map<std::size_t, std::byte*> buffer_of_;
  std::size_t max_busy_ = 0;
  std::vector<std::string> violations_;
};

constexpr std::size_t kChunk = 4096;

TEST(StagingPipeline, BytesArriveIntactForEverySizeAndDepth) {
  const std::size_t sizes[] = {0, 1, kChunk - 1, kChunk, kChunk + 1, 3 * kChunk, 7 * kChunk + 123, 64 * kChunk - 8};
  for (std::size_t depth = 1; depth <= 4; ++depth) {
    std::vector<std::byte> bounce(depth * kChunk);
    StagingPipeline pipeline({kChunk, depth}, bounce);  // reused for every size: reuse works too
    for (std::size_t size : sizes) {
      SCOPED_TRACE("depth " + std::to_string(depth) + " size " + std::to_string(size));
      const auto src = random_bytes(size + 64, static_cast<std::uint32_t>(size * 7 + depth));
      std::vector<std::byte> dst(size + 64, std::byte{0xEE});  // 64 guard bytes past the end
      ThreadedHostEngine fill_engine(static_cast<std::uint32_t>(depth)), drain_engine(static_cast<std::uint32_t>(size));
      CopyStage fill(fill_engine, CopyStage::Direction::kFill, const_cast<std::byte*>(src.data()));
      CopyStage drain(drain_engine, CopyStage::Direction::kDrain, dst.data());
      Tracker tracker(depth);
      Tracker::Wrapped tracked_fill(tracker, fill, true), tracked_drain(tracker, drain, false);
      std::vector<std::uint64_t> progress;
      auto result = pipeline.run(size, tracked_fill, tracked_drain, [&](std::uint64_t done) { progress.push_back(done); });
      ASSERT_TRUE(result.ok) << result.error;
      EXPECT_EQ(result.done_bytes, size);
      EXPECT_EQ(std::memcmp(dst.data(), src.data(), size), 0);
      for (std::size_t i = size; i < dst.size(); ++i) ASSERT_EQ(dst[i], std::byte{0xEE}) << "wrote past the end at " << i;
      EXPECT_TRUE(std::is_sorted(progress.begin(), progress.end()));
      if (size > 0) {
        ASSERT_FALSE(progress.empty());
        EXPECT_EQ(progress.back(), size);
      }
      EXPECT_LE(tracker.max_busy(), depth);
      EXPECT_TRUE(tracker.violations().empty()) << tracker.violations().front();
    }
  }
}

// Deterministic: after every completion and poll(), the number of busy buffers is exactly
// min(depth, chunks not yet delivered) while chunks remain to start -- never more (the bound),
// never less (the pipe is kept full).
TEST(StagingPipeline, KeepsExactlyDepthChunksInFlight) {
  for (std::size_t depth = 1; depth <= 4; ++depth) {
    SCOPED_TRACE("depth " + std::to_string(depth));
    const std::size_t size = 10 * kChunk + 17;  // 11 chunks
    const auto src = random_bytes(size, 99);
    std::vector<std::byte> dst(size);
    std::vector<std::byte> bounce(depth * kChunk);
    ManualEngine fill_engine, drain_engine;
    CopyStage fill(fill_engine, CopyStage::Direction::kFill, const_cast<std::byte*>(src.data()));
    CopyStage drain(drain_engine, CopyStage::Direction::kDrain, dst.data());
    Tracker tracker(depth);
    Tracker::Wrapped tracked_fill(tracker, fill, true), tracked_drain(tracker, drain, false);
    StagingPipeline pipeline({kChunk, depth}, bounce);
    pipeline.start(size, tracked_fill, tracked_drain);
    ASSERT_FALSE(pipeline.poll());
    EXPECT_EQ(fill_engine.pending.size(), depth);
    EXPECT_EQ(drain_engine.pending.size(), 0u);
    std::mt19937 rng(static_cast<std::uint32_t>(depth));
    bool over = false;
    while (!over) {
      const std::size_t pending = fill_engine.pending.size() + drain_engine.pending.size();
      ASSERT_GT(pending, 0u) << "pipeline stalled with nothing in flight";
      std::size_t pick = std::uniform_int_distribution<std::size_t>(0, pending - 1)(rng);
      if (pick < fill_engine.pending.size()) {
        fill_engine.complete(pick);
      } else {
        drain_engine.complete(pick - fill_engine.pending.size());
      }
      over = pipeline.poll();
      const std::size_t unstarted = 11 - fill_engine.submitted;
      EXPECT_LE(tracker.busy(), depth);
      if (unstarted > 0) {
        EXPECT_EQ(tracker.busy(), depth) << "a free buffer was left idle";
      }
    }
    EXPECT_EQ(fill_engine.submitted, 11u);
    EXPECT_EQ(drain_engine.submitted, 11u);
    EXPECT_TRUE(pipeline.result().ok);
    EXPECT_EQ(std::memcmp(dst.data(), src.data(), size), 0);
    EXPECT_TRUE(tracker.violations().empty()) << tracker.violations().front();
  }
}

// A drain fails mid-way: the error names the chunk and the engine's message, the delivered
// prefix stops before it, progress never passes it, nothing new starts once the failure is
// seen, and the pipeline reports the end only when every copy in flight has completed.
TEST(StagingPipeline, EngineErrorMidwayIsReportedAndBoundsWhatIsDone) {
  const std::size_t depth = 3;
  const std::size_t size = 10 * kChunk;
  const std::size_t bad = 4;
  const auto src = random_bytes(size, 5);
  std::vector<std::byte> dst(size);
  std::vector<std::byte> bounce(depth * kChunk);
  ManualEngine fill_engine, drain_engine;
  CopyStage fill(fill_engine, CopyStage::Direction::kFill, const_cast<std::byte*>(src.data()));
  CopyStage drain(drain_engine, CopyStage::Direction::kDrain, dst.data());
  StagingPipeline pipeline({kChunk, depth}, bounce);
  std::uint64_t last_progress = 0;
  pipeline.start(size, fill, drain, [&](std::uint64_t done) { last_progress = done; });
  ASSERT_FALSE(pipeline.poll());
  // Complete in submission order (fills first) until the drain of chunk `bad` is the oldest drain.
  std::size_t drains_done = 0;
  while (drains_done < bad) {
    if (!drain_engine.pending.empty()) {
      drain_engine.complete(0);
      ++drains_done;
    } else {
      fill_engine.complete(0);
    }
    ASSERT_FALSE(pipeline.poll());
  }
  // Make sure chunk bad+1's fill has completed too (its drain is in flight), then fail chunk bad.
  while (drain_engine.pending.size() < 2) {
    fill_engine.complete(0);
    ASSERT_FALSE(pipeline.poll());
  }
  drain_engine.complete(0, /*ok=*/false);
  const std::size_t fills_before = fill_engine.submitted, drains_before = drain_engine.submitted;
  EXPECT_FALSE(pipeline.poll()) << "must wait for the copies still in flight";
  // Finish everything still in flight successfully: the later chunk's drain does land.
  while (!fill_engine.pending.empty() || !drain_engine.pending.empty()) {
    if (!fill_engine.pending.empty()) fill_engine.complete(0);
    else drain_engine.complete(0);
    if (!fill_engine.pending.empty() || !drain_engine.pending.empty()) {
      EXPECT_FALSE(pipeline.poll());
    }
  }
  ASSERT_TRUE(pipeline.poll());
  EXPECT_EQ(fill_engine.submitted, fills_before) << "a fill started after the failure";
  EXPECT_EQ(drain_engine.submitted, drains_before) << "a drain started after the failure";
  const PipelineResult result = pipeline.result();
  EXPECT_FALSE(result.ok);
  EXPECT_NE(result.error.find("chunk " + std::to_string(bad)), std::string::npos) << result.error;
  EXPECT_NE(result.error.find("drain failed: manual engine error"), std::string::npos) << result.error;
  EXPECT_EQ(result.done_bytes, bad * kChunk);
  EXPECT_EQ(last_progress, bad * kChunk);
  EXPECT_EQ(std::memcmp(dst.data(), src.data(), result.done_bytes), 0);
}

TEST(StagingPipeline, FillErrorAndRefusedStartAreReported) {
  const std::size_t size = 6 * kChunk;
  const auto src = random_bytes(size, 6);
  std::vector<std::byte> dst(size), bounce(2 * kChunk);
  {
    ManualEngine fill_engine, drain_engine;
    CopyStage fill(fill_engine, CopyStage::Direction::kFill, const_cast<std::byte*>(src.data()));
    CopyStage drain(drain_engine, CopyStage::Direction::kDrain, dst.data());
    StagingPipeline pipeline({kChunk, 2}, bounce);
    pipeline.start(size, fill, drain);
    ASSERT_FALSE(pipeline.poll());
    fill_engine.complete(0, /*ok=*/false);  // chunk 0's fill fails; chunk 1's is in flight
    EXPECT_FALSE(pipeline.poll());
    fill_engine.complete(0);  // chunk 1's fill succeeds, but no drain may start now
    ASSERT_TRUE(pipeline.poll());
    EXPECT_EQ(drain_engine.submitted, 0u);
    EXPECT_FALSE(pipeline.result().ok);
    EXPECT_NE(pipeline.result().error.find("chunk 0"), std::string::npos) << pipeline.result().error;
    EXPECT_NE(pipeline.result().error.find("fill failed"), std::string::npos) << pipeline.result().error;
    EXPECT_EQ(pipeline.result().done_bytes, 0u);
  }
  {
    ManualEngine fill_engine, drain_engine;
    CopyStage fill(fill_engine, CopyStage::Direction::kFill, const_cast<std::byte*>(src.data()));
    CopyStage drain(drain_engine, CopyStage::Direction::kDrain, dst.data());
    StagingPipeline pipeline({kChunk, 2}, bounce);
    pipeline.start(size, fill, drain);
    ASSERT_FALSE(pipeline.poll());
    fill_engine.complete(0);
    drain_engine.throw_on_next_ = true;  // chunk 0's drain cannot even start
    ASSERT_FALSE(pipeline.poll());       // chunk 1's fill is still in flight
    fill_engine.complete(0);
    ASSERT_TRUE(pipeline.poll());
    EXPECT_EQ(drain_engine.submitted, 0u);
    EXPECT_FALSE(pipeline.result().ok);
    EXPECT_NE(pipeline.result().error.find("could not start: engine refused the copy"), std::string::npos)
        << pipeline.result().error;
  }
}

// The same with real threads: whichever copy fails, run() returns (no hang), reports it, and
// what it claims delivered is intact.
TEST(StagingPipeline, ThreadedFailureNeverOverclaims) {
  const std::size_t size = 20 * kChunk + 100;  // 21 chunks
  const auto src = random_bytes(size, 8);
  for (long fail_at : {0L, 1L, 5L, 13L, 20L}) {
    for (bool fail_drain : {false, true}) {
      SCOPED_TRACE("fail copy " + std::to_string(fail_at) + (fail_drain ? " of drains" : " of fills"));
      std::vector<std::byte> dst(size), bounce(3 * kChunk);
      ThreadedHostEngine fill_engine(1, fail_drain ? -1 : fail_at), drain_engine(2, fail_drain ? fail_at : -1);
      CopyStage fill(fill_engine, CopyStage::Direction::kFill, const_cast<std::byte*>(src.data()));
      CopyStage drain(drain_engine, CopyStage::Direction::kDrain, dst.data());
      StagingPipeline pipeline({kChunk, 3}, bounce);
      const PipelineResult result = pipeline.run(size, fill, drain);
      EXPECT_FALSE(result.ok);
      EXPECT_NE(result.error.find("injected engine error"), std::string::npos) << result.error;
      EXPECT_LT(result.done_bytes, size);
      EXPECT_EQ(result.done_bytes % kChunk, 0u);
      EXPECT_EQ(std::memcmp(dst.data(), src.data(), result.done_bytes), 0);
    }
  }
}

TEST(StagingPipeline, RejectsBadOptionsAndOverlappingTransfers) {
  std::vector<std::byte> bounce(4 * kChunk);
  auto code_of = [&](PipelineOptions options, std::size_t bounce_bytes) {
    try {
      StagingPipeline pipeline(options, std::span(bounce).first(bounce_bytes));
    } catch (const Error& e) {
      return e.code();
    }
    return ErrorCode{};
  };
  EXPECT_EQ(code_of({0, 2}, bounce.size()), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of({kChunk, 0}, bounce.size()), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of({kChunk, 4}, 4 * kChunk - 1), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of({kChunk, 4}, 4 * kChunk), ErrorCode{});

  ManualEngine engine;
  std::vector<std::byte> src(2 * kChunk), dst(2 * kChunk);
  CopyStage fill(engine, CopyStage::Direction::kFill, src.data());
  CopyStage drain(engine, CopyStage::Direction::kDrain, dst.data());
  StagingPipeline pipeline({kChunk, 1}, bounce);
  pipeline.start(src.size(), fill, drain);
  try {
    pipeline.start(src.size(), fill, drain);
    ADD_FAILURE() << "a second start while running must be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kState);
  }
  ASSERT_FALSE(pipeline.poll());
  while (!engine.pending.empty()) {
    engine.complete(0);
    pipeline.poll();
  }
  EXPECT_TRUE(pipeline.result().ok);
  EXPECT_EQ(src, dst);
}

}  // namespace
}  // namespace modelcast::staging
