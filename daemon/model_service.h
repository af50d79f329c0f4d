// One configured model: its shared-memory receive buffers, the Consumer that fills them, and
// the version clients are served (the newest installed, or one recovered from disk until then).
//
// A version whose views lie in one receive buffer (the whole model, as the producer sent it) is
// served from that buffer without a copy. Views the Consumer shaped (parts a [model.wants] keeps,
// tensors [model.convert] converted) or assembled from producer ranks live in the Consumer's own
// memory, which clients cannot map: they are copied once into a shared-memory buffer of the
// daemon's (`copies_`), reused once no served version refers to it.
//
// Threads: the Consumer's update callbacks run on_installed/on_rejected, one at a time (a rank's
// service thread or the assembler's caller, serialised by the Consumer); they alone touch
// `copies_`. current() is called from any thread (one shared_ptr under a mutex).
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "daemon/config.h"
#include "daemon/served_version.h"
#include "modelcast/consumer.h"

namespace modelcastd {

struct ModelCallbacks {
  std::function<void(const ServedPtr&)> on_installed;  // a version from the producer is served
  // A version refused, or (ErrorCode::kResource) updates waiting on buffers that clients hold.
  std::function<void(const std::string& model, const modelcast::Error&)> on_rejected;
};

class ModelService {
 public:
  // Allocates config.buffers memfds of config.max_model_bytes and starts a Consumer receiving
  // into them. Throws modelcast::Error (kInvalidArgument for bad options, kResource for memory).
  ModelService(ModelConfig config, ModelCallbacks callbacks);
  ~ModelService();  // stops the Consumer; versions still held elsewhere stay valid
  ModelService(const ModelService&) = delete;
  ModelService& operator=(const ModelService&) = delete;

  // Serves `recovered` (from the repository) unless the producer has already delivered.
  void serve_recovered(ServedPtr recovered);
  ServedPtr current() const;  // nullptr before any version
  const ModelConfig& config() const { return config_; }
  modelcast::ConsumerStats consumer_stats() const { return consumer_->stats(); }

 private:
  void installed(const modelcast::ModelView& view);  // Consumer's service thread
  // A buffer of `bytes` for a copied version that no served version refers to.
  std::shared_ptr<ShmBuffer> copy_buffer(std::size_t bytes);

  const ModelConfig config_;
  const ModelCallbacks callbacks_;
  std::vector<std::shared_ptr<ShmBuffer>> buffers_;
  std::vector<std::shared_ptr<ShmBuffer>> copies_;  // update callbacks only
  mutable std::mutex mutex_;
  ServedPtr current_;           // guarded by mutex_
  bool from_producer_ = false;  // guarded by mutex_
  std::unique_ptr<modelcast::Consumer> consumer_;  // last: its callbacks use the members above
};

}  // namespace modelcastd
