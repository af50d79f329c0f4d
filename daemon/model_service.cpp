#include "daemon/model_service.h"

#include "modelcast/error.h"
#include "modelcast/keys.h"

namespace modelcastd {

ModelService::ModelService(ModelConfig config, ModelCallbacks callbacks)
    : config_(std::move(config)), callbacks_(std::move(callbacks)) {
  modelcast::ConsumerOptions options;
  options.producer_endpoint = config_.endpoint;
  options.model_name = config_.name;
  options.max_model_bytes = config_.max_model_bytes;
  options.producer_public_key = config_.producer_key_file.empty()
                                    ? config_.producer_public_key
                                    : modelcast::load_public_key(config_.producer_key_file);
  options.key_file = config_.key_file;
  for (std::size_t i = 0; i < config_.buffers; ++i) {
    buffers_.push_back(std::make_shared<ShmBuffer>("modelcastd:" + config_.name, config_.max_model_bytes));
    // Only the first max_model_bytes are offered: the Consumer's size limit and the buffer agree.
    options.caller_buffers.push_back(buffers_.back()->memory().first(config_.max_model_bytes));
  }
  // Only modelcast writes these buffers (clients map them read-only; recovery uses buffers of
  // its own): versions stay as verified, so this daemon serves peers like any consumer.
  options.caller_buffers_untouched = true;
  options.serve_peers = config_.serve_peers;
  options.group = config_.group;
  options.group_size = config_.group_size;
  options.on_update = [this](const modelcast::ModelView& view) { installed(view); };
  options.on_error = [this](const modelcast::Error& error) {
    if (callbacks_.on_rejected) callbacks_.on_rejected(config_.name, error);
  };
  consumer_ = std::make_unique<modelcast::Consumer>(std::move(options));
}

ModelService::~ModelService() { consumer_.reset(); }

void ModelService::installed(const modelcast::ModelView& view) {
  auto served = std::make_shared<ServedVersion>();
  auto tensors = view.tensors();
  for (const auto& buffer : buffers_) {
    if (!tensors.empty() && buffer->contains(tensors.front().data)) served->buffer = buffer;
  }
  if (!served->buffer) {
    // Cannot happen with caller buffers (every byte lands in one of ours); refuse rather than
    // serve memory clients could not map.
    if (callbacks_.on_rejected) {
      callbacks_.on_rejected(config_.name, modelcast::Error(modelcast::ErrorCode::kState,
                                                            "version " + std::to_string(view.version()) +
                                                                " is not in a shared-memory buffer; not served"));
    }
    return;
  }
  served->model = config_.name;
  auto& m = served->manifest;
  m.buffer_id = served->buffer->id();
  m.buffer_bytes = served->buffer->size();
  m.version = view.version();
  m.step = view.step();
  m.incarnation = view.producer_incarnation();
  m.source = "producer";
  m.metadata = view.metadata();
  for (const auto& t : tensors) {
    m.tensors.push_back({t.name(), t.dtype(), t.shape(), served->buffer->offset_of(t.data), t.size_bytes()});
  }
  served->view = view;
  served->installed_at = std::chrono::system_clock::now();
  served->update_latency = view.update_latency();
  {
    std::lock_guard lock(mutex_);
    current_ = served;
    from_producer_ = true;
  }
  if (callbacks_.on_installed) callbacks_.on_installed(served);
}

void ModelService::serve_recovered(ServedPtr recovered) {
  std::lock_guard lock(mutex_);
  if (!from_producer_) current_ = std::move(recovered);
}

ServedPtr ModelService::current() const {
  std::lock_guard lock(mutex_);
  return current_;
}

}  // namespace modelcastd
