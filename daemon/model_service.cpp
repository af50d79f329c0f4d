#include "daemon/model_service.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "modelcast/error.h"
#include "modelcast/keys.h"

namespace modelcastd {

ModelService::ModelService(ModelConfig config, ModelCallbacks callbacks, ServedPtr initial)
    : config_(std::move(config)), callbacks_(std::move(callbacks)), current_(std::move(initial)) {
  modelcast::ConsumerOptions options;
  options.producer_endpoint = config_.endpoint;
  options.model_name = config_.name;
  options.max_model_bytes = config_.max_model_bytes;
  options.producer_public_key = config_.producer_key_file.empty()
                                    ? config_.producer_public_key
                                    : modelcast::load_public_key(config_.producer_key_file);
  options.key_file = config_.key_file;
  for (std::size_t i = 0; i < config_.buffers; ++i) {
    try {
      buffers_.push_back(std::make_shared<ShmBuffer>("modelcastd:" + config_.name, config_.max_model_bytes));
    } catch (const modelcast::Error& e) {  // say which setting asked for it
      throw modelcast::Error(e.code(), "buffer " + std::to_string(i + 1) + " of " + std::to_string(config_.buffers) +
                                           " (buffers) of max_model_bytes = " +
                                           std::to_string(config_.max_model_bytes) + " bytes: " + e.what());
    }
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
  // No on_error: the library logs each of its errors naming the model (logged here again, every
  // one came out twice, the second time as a warning).
  consumer_ = std::make_unique<modelcast::Consumer>(std::move(options));
  copier_ = std::thread([this] { copy_loop(); });
}

ModelService::~ModelService() {
  consumer_.reset();  // no more installs
  {
    std::lock_guard lock(queue_->mutex);
    queue_->stop = true;
    queue_->next.reset();
  }
  queue_->wake.notify_all();
  copier_.join();
}

std::shared_ptr<ShmBuffer> ModelService::copy_buffer(std::size_t bytes) {
  for (auto& buffer : copies_) {
    // A served version (a client's hold, the writer) has it. An empty slot is one whose larger
    // buffer could not be made (below): free, and tried again; skipped, it was lost for good,
    // and with every other buffer held the model served its old version from then on.
    if (buffer && buffer.use_count() != 1) continue;
    if (!buffer || buffer->size() < bytes) {
      buffer.reset();  // the old one goes first: never two of them at once
      buffer = std::make_shared<ShmBuffer>("modelcastd:" + config_.name + ":copy", bytes);
    }
    return buffer;
  }
  // As many as receive buffers: clients that hold more versions hold updates back, as they do
  // for a model served where it landed.
  if (copies_.size() >= config_.buffers) return nullptr;
  copies_.push_back(std::make_shared<ShmBuffer>("modelcastd:" + config_.name + ":copy", bytes));
  return copies_.back();
}

void ModelService::installed(const modelcast::ModelView& view) {
  auto tensors = view.tensors();
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
  // The receive buffer every tensor with bytes lies in. An empty tensor's pointer says nothing (a
  // converted one points into the consumer's own memory), and it is served at offset 0.
  const auto has_bytes = [](const modelcast::TensorView& t) { return t.size_bytes() > 0; };
  const auto first = std::find_if(tensors.begin(), tensors.end(), has_bytes);
  const std::shared_ptr<ShmBuffer>* in = nullptr;
  for (const auto& buffer : buffers_) {
    if (first == tensors.end() || buffer->contains(first->data)) in = &buffer;
  }
  for (const auto& t : tensors) {
    if (in && has_bytes(t) && !(*in)->contains(t.data)) in = nullptr;
  }
  if (!in) {
    // Shaped or assembled views: the copy thread copies them into memory clients can map. A
    // version still waiting there for a free buffer is replaced: only the newest is worth serving.
    {
      std::lock_guard lock(queue_->mutex);
      queue_->next = view;
      ++queue_->arrivals;
    }
    queue_->wake.notify_all();
    return;
  }
  auto served = std::make_shared<ServedVersion>();
  served->buffer = *in;
  served->view = view;  // pins the receive buffer while the version is served
  std::vector<std::uint64_t> offsets;
  for (const auto& t : tensors) offsets.push_back(has_bytes(t) ? served->buffer->offset_of(t.data) : 0);
  serve(std::move(served), view, offsets);
}

void ModelService::copy_loop() {
  // Versions are told apart by their arrival here, not by number: a restarted producer numbers
  // its versions from 1 again.
  std::uint64_t tried = 0;     // the arrival that found every buffer held (0: none)
  std::uint64_t releases = 0;  // queue_->releases when it did
  // Every buffer was held when last tried: the wait is said once, when it begins, not for each
  // version that arrives meanwhile (at 20 versions a second, 20 lines a second, each a new text
  // that the log's repeat limit let through).
  bool waiting = false;
  std::unique_lock lock(queue_->mutex);
  for (;;) {
    queue_->wake.wait(lock, [&] {
      return queue_->stop || (queue_->next && (queue_->arrivals != tried || queue_->releases != releases));
    });
    if (queue_->stop) return;
    modelcast::ModelView view = *queue_->next;
    const std::uint64_t arrival = queue_->arrivals;
    releases = queue_->releases;
    lock.unlock();
    const bool done = serve_copy(view, arrival != tried && !waiting);
    waiting = !done;
    lock.lock();
    tried = done ? 0 : arrival;
    queue_->waiting = done ? 0 : view.version();
    if (done && queue_->arrivals == arrival) queue_->next.reset();
  }
}

std::uint64_t ModelService::waiting_for_buffer() const {
  std::lock_guard lock(queue_->mutex);
  return queue_->waiting;
}

bool ModelService::serve_copy(const modelcast::ModelView& view, bool report_wait) {
  auto tensors = view.tensors();
  constexpr std::size_t kAlignment = 64;
  std::vector<std::uint64_t> offsets;
  std::size_t bytes = 0;
  for (const auto& t : tensors) {
    offsets.push_back(bytes);
    bytes += (t.size_bytes() + kAlignment - 1) / kAlignment * kAlignment;
  }
  std::shared_ptr<ShmBuffer> buffer;
  try {
    buffer = copy_buffer(std::max<std::size_t>(bytes, 1));
  } catch (const modelcast::Error& e) {  // the buffer could not be made: this version is lost
    if (callbacks_.on_rejected) {
      callbacks_.on_rejected(config_.name, modelcast::Error(e.code(), "version " + std::to_string(view.version()) +
                                                                           " not served: " + e.what()));
    }
    return true;
  }
  if (!buffer) {
    if (report_wait && callbacks_.on_error) {
      callbacks_.on_error(config_.name, modelcast::Error(modelcast::ErrorCode::kResource,
          "version " + std::to_string(view.version()) + " waits: every one of the " + std::to_string(copies_.size()) +
              " shared-memory buffers for shaped versions is held by a client or the repository writer; it is "
              "served once one is released, unless a newer version comes first"));
    }
    return false;
  }
  // Dropping the last hold of a copied version may free the buffer another version waits for.
  std::shared_ptr<ServedVersion> served(new ServedVersion, [queue = std::weak_ptr<CopyQueue>(queue_)](ServedVersion* v) {
    delete v;
    if (auto q = queue.lock()) {
      {
        std::lock_guard lock(q->mutex);
        q->releases++;
      }
      q->wake.notify_all();
    }
  });
  served->buffer = std::move(buffer);
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    std::memcpy(served->buffer->memory().data() + offsets[i], tensors[i].data, tensors[i].size_bytes());
  }
  serve(std::move(served), view, offsets);
  return true;
}

namespace {

// Whether two versions describe their tensors alike (names, dtypes, shapes, parts, fp8 blocks).
bool same_layout(const attach::Manifest& a, const attach::Manifest& b) {
  return std::equal(a.tensors.begin(), a.tensors.end(), b.tensors.begin(), b.tensors.end(),
                    [](const attach::TensorEntry& x, const attach::TensorEntry& y) {
                      return x.name == y.name && x.dtype == y.dtype && x.shape == y.shape &&
                             x.box_offset == y.box_offset && x.whole_shape == y.whole_shape &&
                             x.scale_block == y.scale_block;
                    });
}

}  // namespace

void ModelService::serve(std::shared_ptr<ServedVersion> served, const modelcast::ModelView& view,
                         const std::vector<std::uint64_t>& offsets) {
  auto tensors = view.tensors();
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
  // What a client is sent for it (with a hold of the widest encoding) must fit what a client
  // reads: fp8 scales of many tensors pass each tensor's bound and can still make it too large.
  attach::Reply reply;
  reply.manifest = m;
  reply.manifest->hold = std::numeric_limits<std::uint64_t>::max();
  if (const auto bytes = attach::encode(reply).size(); bytes > attach::kMaxManifestBytes) {
    if (callbacks_.on_rejected) {
      callbacks_.on_rejected(
          config_.name, modelcast::Error(modelcast::ErrorCode::kInvalidArgument,
                                         "version " + std::to_string(m.version) + " not served: its manifest for clients is " +
                                             std::to_string(bytes) + " bytes, more than the " +
                                             std::to_string(attach::kMaxManifestBytes) +
                                             " a client reads (fp8 scales: a larger fp8_block in [model.convert] gives fewer)"));
    }
    return;
  }
  served->installed_at = std::chrono::system_clock::now();
  served->update_latency = view.update_latency();
  ServedPtr replaced;  // dropped outside the lock: its deleter may wake the copy thread
  {
    std::lock_guard lock(mutex_);
    // Never back to an older version of the same producer run (callbacks of two versions could
    // in principle arrive out of order), nor again to the one served: a restarted daemon (or a
    // model a reload restarted) is sent the producer's newest version when it joins, which it
    // already served from the repository or from before the reload, and installed, wrote and
    // hooked it again (Triton reloaded the same weights).
    if (current_ && current_->manifest.incarnation == m.incarnation) {
      const auto served_version = current_->manifest.version;
      // A version read from the repository that is newer than what its own producer run sends
      // was not written by this daemon from that run: the producer's replaces it. Kept, it held
      // back every version the producer sent up to that number.
      const bool repository_ahead = current_->manifest.source == "repository" && served_version > m.version;
      // The same version cut or converted otherwise (a reload changed the model's wants or
      // conversions, and restarted it; the producer sent the version it had served): what the
      // configuration asks for now. Skipped, the old shapes stayed served until the producer's
      // next version, for good once its training had ended.
      const bool reshaped = served_version == m.version && !same_layout(current_->manifest, m);
      if (served_version >= m.version && !repository_ahead && !reshaped) return;
      if (auto log = spdlog::get("modelcastd"); log && repository_ahead) {
        log->warn(
            "model {}: the repository's version {} is newer than version {} of the same producer run, which replaces "
            "it: that repository version was not written from this run",
            config_.name, served_version, m.version);
      }
    }
    replaced = std::move(current_);
    current_ = served;
  }
  if (callbacks_.on_installed) callbacks_.on_installed(served);
}

ServedPtr ModelService::current() const {
  std::lock_guard lock(mutex_);
  return current_;
}

}  // namespace modelcastd
