// One configured model: its shared-memory receive buffers, the Consumer that fills them, and
// the version clients are served (the newest installed, or one recovered from disk until then).
//
// A version whose views lie in one receive buffer (the whole model, as the producer sent it) is
// served from that buffer without a copy. Views the Consumer shaped (parts a [model.wants] keeps,
// tensors [model.convert] converted) or assembled from producer ranks live in the Consumer's own
// memory, which clients cannot map: they are copied once into a shared-memory buffer of the
// daemon's (`copies_`), reused once no served version refers to it.
//
// A shaped version waits while clients (or the repository writer) hold every copy buffer, and is
// served as soon as one is released, unless a newer version replaces it first: updates never
// stop for good because a client held on too long.
//
// Threads: the Consumer's update callbacks run installed() one at a time (a rank's service
// thread or the assembler's caller, serialised by the Consumer); a version served in place is
// installed there. The copy thread (`copier_`) copies the others: it alone touches `copies_`, so
// a copy never stalls the Consumer's loop. A copy buffer's release wakes it (the ServedVersion's
// deleter, on whatever thread drops the last hold). current() is called from any thread (one
// shared_ptr under a mutex).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "daemon/config.h"
#include "daemon/served_version.h"
#include "modelcast/consumer.h"

namespace modelcastd {

struct ModelCallbacks {
  std::function<void(const ServedPtr&)> on_installed;  // a version from the producer is served
  // A version the consumer installed that the daemon does not serve (it counts as rejected).
  std::function<void(const std::string& model, const modelcast::Error&)> on_rejected;
  // Everything else to report: the consumer's errors (the versions it rejects are counted from
  // its stats) and updates waiting on buffers that clients hold.
  std::function<void(const std::string& model, const modelcast::Error&)> on_error;
};

class ModelService {
 public:
  // Allocates config.buffers memfds of config.max_model_bytes and starts a Consumer receiving
  // into them; serves `initial` (recovered from the repository, or what the model served before
  // a reload restarted it; may be null) until the producer delivers. Throws modelcast::Error
  // (kInvalidArgument for bad options, kResource for memory).
  ModelService(ModelConfig config, ModelCallbacks callbacks, ServedPtr initial = nullptr);
  ~ModelService();  // stops the Consumer; versions still held elsewhere stay valid
  ModelService(const ModelService&) = delete;
  ModelService& operator=(const ModelService&) = delete;

  ServedPtr current() const;  // nullptr before any version
  const ModelConfig& config() const { return config_; }
  modelcast::ConsumerStats consumer_stats() const { return consumer_->stats(); }
  // The shaped version that waits for a copy buffer clients hold (0: none waits). Any thread.
  std::uint64_t waiting_for_buffer() const;

 private:
  // What the copy thread waits on, shared with the deleters of copied versions (which may outlive
  // the service, so they hold it weakly).
  struct CopyQueue {
    std::mutex mutex;
    std::condition_variable wake;
    std::optional<modelcast::ModelView> next;  // the newest version waiting for its copy; mutex
    std::uint64_t arrivals = 0;                // versions handed over so far; mutex
    std::uint64_t releases = 0;                // copied versions dropped so far; mutex
    std::uint64_t waiting = 0;                 // the version the last try found no buffer for; mutex
    bool stop = false;                         // mutex
  };

  void installed(const modelcast::ModelView& view);  // Consumer's service thread
  void copy_loop();                                  // the copy thread
  // Copies `view` into a free copy buffer and serves it; false when every buffer is held (said
  // through on_error when `report_wait`: once per wait). Copy thread.
  bool serve_copy(const modelcast::ModelView& view, bool report_wait);
  // Describes `served` (its buffer and `offsets` set) from `view`, makes it current unless a newer
  // version is, and tells the callbacks.
  void serve(std::shared_ptr<ServedVersion> served, const modelcast::ModelView& view,
             const std::vector<std::uint64_t>& offsets);
  // A buffer of `bytes` for a copied version that no served version refers to, or nullptr when
  // every one of config.buffers is held.
  std::shared_ptr<ShmBuffer> copy_buffer(std::size_t bytes);

  const ModelConfig config_;
  const ModelCallbacks callbacks_;
  std::vector<std::shared_ptr<ShmBuffer>> buffers_;
  std::vector<std::shared_ptr<ShmBuffer>> copies_;  // copy thread only
  mutable std::mutex mutex_;
  ServedPtr current_;           // guarded by mutex_
  const std::shared_ptr<CopyQueue> queue_ = std::make_shared<CopyQueue>();
  std::thread copier_;
  std::unique_ptr<modelcast::Consumer> consumer_;  // last: its callbacks use the members above
};

}  // namespace modelcastd
