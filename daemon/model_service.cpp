#include "daemon/model_service.h"

#include <algorithm>
#include <cstring>

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
  options.wants = config_.wants;
  options.conversions = config_.conversions;
  options.on_update = [this](const modelcast::ModelView& view) { installed(view); };
  options.on_error = [this](const modelcast::Error& error) {
    if (callbacks_.on_rejected) callbacks_.on_rejected(config_.name, error);
  };
  consumer_ = std::make_unique<modelcast::Consumer>(std::move(options));
}

ModelService::~ModelService() { consumer_.reset(); }

std::shared_ptr<ShmBuffer> ModelService::copy_buffer(std::size_t bytes) {
  for (auto& buffer : copies_) {
    if (buffer.use_count() != 1) continue;  // a served version (a client's hold, the writer) has it
    if (buffer->size() < bytes) {
      buffer.reset();  // the old one goes first: never two of them at once
      buffer = std::make_shared<ShmBuffer>("modelcastd:" + config_.name + ":copy", bytes);
    }
    return buffer;
  }
  // As many as receive buffers: clients that hold more versions hold updates back, as they do
  // for a model served where it landed.
  if (copies_.size() >= config_.buffers) {
    throw modelcast::Error(modelcast::ErrorCode::kResource,
                           "every one of the " + std::to_string(copies_.size()) +
                               " shared-memory buffers for shaped versions is held by a client or the repository "
                               "writer; updates resume when one is released");
  }
  copies_.push_back(std::make_shared<ShmBuffer>("modelcastd:" + config_.name + ":copy", bytes));
  return copies_.back();
}

void ModelService::installed(const modelcast::ModelView& view) {
  auto served = std::make_shared<ServedVersion>();
  auto tensors = view.tensors();
  const std::shared_ptr<ShmBuffer>* in = nullptr;  // the receive buffer every view lies in
  for (const auto& buffer : buffers_) {
    if (tensors.empty() || buffer->contains(tensors.front().data)) in = &buffer;
  }
  for (const auto& t : tensors) {
    if (in && t.size_bytes() > 0 && !(*in)->contains(t.data)) in = nullptr;
  }
  for (const auto& t : tensors) {
    if (t.scales.size() > attach::kMaxScalesPerTensor) {
      if (callbacks_.on_rejected) {
        callbacks_.on_rejected(config_.name, modelcast::Error(modelcast::ErrorCode::kInvalidArgument,
            "version " + std::to_string(view.version()) + " not served: tensor '" + t.name() + "' has " +
            std::to_string(t.scales.size()) + " fp8 scales, more than the " + std::to_string(attach::kMaxScalesPerTensor) +
            " a client takes (a larger fp8_block in [model.convert] gives fewer)"));
      }
      return;
    }
  }
  std::vector<std::uint64_t> offsets;
  if (in) {
    served->buffer = *in;
    served->view = view;  // pins the receive buffer while the version is served
    for (const auto& t : tensors) offsets.push_back(served->buffer->offset_of(t.data));
  } else {
    // Shaped or assembled views: one copy into memory clients can map.
    constexpr std::size_t kAlignment = 64;
    std::size_t bytes = 0;
    for (const auto& t : tensors) {
      offsets.push_back(bytes);
      bytes += (t.size_bytes() + kAlignment - 1) / kAlignment * kAlignment;
    }
    try {
      served->buffer = copy_buffer(std::max<std::size_t>(bytes, 1));
    } catch (const modelcast::Error& e) {
      if (callbacks_.on_rejected) {
        callbacks_.on_rejected(config_.name, modelcast::Error(e.code(), "version " + std::to_string(view.version()) +
                                                                             " not served: " + e.what()));
      }
      return;
    }
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      std::memcpy(served->buffer->memory().data() + offsets[i], tensors[i].data, tensors[i].size_bytes());
    }
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
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    m.tensors.push_back({t.name(), t.dtype(), t.shape(), offsets[i], t.size_bytes(),
                         {t.box_offset.begin(), t.box_offset.end()}, {t.whole_shape.begin(), t.whole_shape.end()},
                         {t.scales.begin(), t.scales.end()}, t.scale_block});
  }
  served->installed_at = std::chrono::system_clock::now();
  served->update_latency = view.update_latency();
  {
    std::lock_guard lock(mutex_);
    // Never back to an older version of the same producer run (callbacks of two versions could
    // in principle arrive out of order).
    if (from_producer_ && current_ && current_->manifest.incarnation == m.incarnation &&
        current_->manifest.version >= m.version) {
      return;
    }
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
