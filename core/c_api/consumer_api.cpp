// The C ABI's consumer entry points (include/modelcast/modelcast.h).
#include "core/c_api/c_boundary.h"
#include "core/model/manifest.h"

#include <map>
#include <string>

using namespace modelcast::c_api;

namespace {

// The C callbacks as the C++ consumer's std::functions. The view handed to on_update is built
// for the call and freed after it (the caller acquires its own to keep one).
void set_callbacks(const mc_consumer_options& options, modelcast::ConsumerOptions& o) {
  void* user_data = options.callback_user_data;
  if (mc_update_fn on_update = options.on_update) {
    o.on_update = [on_update, user_data](const modelcast::ModelView& view) {
      std::unique_ptr<mc_view> handle(make_view(view));
      on_update(handle.get(), user_data);
    };
  }
  if (mc_error_fn on_error = options.on_error) {
    o.on_error = [on_error, user_data](const modelcast::Error& error) {
      on_error(status_of(error.code()), error.what(), user_data);
    };
  }
}

}  // namespace

extern "C" {

// ---- consumer ------------------------------------------------------------------------------

// The name in parentheses: modelcast.h's macro of that name would expand here.
void (mc_consumer_options_init)(mc_consumer_options* options) {
  if (options == nullptr) return;
  const modelcast::ConsumerOptions defaults;
  *options = mc_consumer_options{};
  options->struct_size = sizeof(mc_consumer_options);
  options->model_name = "model";
  options->buffers = defaults.buffers;
  options->producer_timeout_ms = defaults.producer_timeout.count();
  options->transfer_timeout_ms = defaults.transfer_timeout.count();
  options->max_model_bytes = defaults.max_model_bytes;
  options->serve_peers = defaults.serve_peers ? 1 : 0;
}

void mc_consumer_options_init_sized(mc_consumer_options* options, size_t size) {
  init_sized(options, size, &(mc_consumer_options_init));
}

mc_status mc_consumer_create(const mc_consumer_options* options, mc_consumer_t** out) {
  if (out != nullptr) *out = nullptr;
  return guarded(__func__, [&] {
    require(out, "out");
    require(options, "options");
    if (options->struct_size < kConsumerOptionsV1) {
      invalid("options.struct_size is " + std::to_string(options->struct_size) +
              ": call mc_consumer_options_init first");
    }
    require(options->producer_endpoint, "options.producer_endpoint");
    require(options->model_name, "options.model_name");
    if (options->producer_timeout_ms <= 0) invalid("options.producer_timeout_ms must be > 0");
    modelcast::ConsumerOptions o;
    o.producer_endpoint = options->producer_endpoint;
    o.model_name = options->model_name;
    if (options->consumer_name != nullptr) o.consumer_name = options->consumer_name;
    o.buffers = options->buffers;
    if (options->caller_buffer_count > 0) {
      require(options->caller_buffers, "options.caller_buffers");
      require(options->caller_buffer_sizes, "options.caller_buffer_sizes");
      for (std::size_t i = 0; i < options->caller_buffer_count; ++i) {
        if (options->caller_buffers[i] == nullptr) invalid("options.caller_buffers[" + std::to_string(i) + "] is NULL");
        o.caller_buffers.emplace_back(static_cast<std::byte*>(options->caller_buffers[i]),
                                      options->caller_buffer_sizes[i]);
      }
    }
    if (options->expected_layout_count > 0) {
      require(options->expected_layout, "options.expected_layout");
      // Elements lie struct_size apart, the caller's: a caller built against a header whose
      // mc_tensor_desc has grown (or shrunk) lays its array out so, and sizeof here would read
      // every element after the first at the wrong place.
      const std::size_t stride = options->expected_layout[0].struct_size;
      // Element 0 vouches for the others' place: a size no header's mc_tensor_desc has (past
      // 4 KiB, or not a multiple of its alignment) would read outside the array, or misaligned.
      if (stride > 4096 || stride % alignof(mc_tensor_desc) != 0) {
        invalid("options.expected_layout[0].struct_size is " + std::to_string(stride) +
                ", which no mc_tensor_desc has: call mc_tensor_desc_init");
      }
      const auto* base = reinterpret_cast<const unsigned char*>(options->expected_layout);
      for (std::size_t i = 0; i < options->expected_layout_count; ++i) {
        const auto& d = *reinterpret_cast<const mc_tensor_desc*>(base + i * stride);
        if (d.struct_size < kTensorDescV1) {
          invalid("options.expected_layout[" + std::to_string(i) + "].struct_size is not set: call mc_tensor_desc_init");
        }
        if (d.struct_size != stride) {
          invalid("options.expected_layout[" + std::to_string(i) + "].struct_size is " + std::to_string(d.struct_size) +
                  ", element 0's " + std::to_string(stride) + ": every element comes from one header's mc_tensor_desc");
        }
        o.expected_layout.push_back(tensor_ref(d.name, raw(d.dtype), d.ndim, d.shape, nullptr, raw(d.memory), d.device).spec);
      }
    }
    o.producer_timeout = std::chrono::milliseconds(options->producer_timeout_ms);
    if (has_field(*options, options->max_model_bytes)) {
      optional_text(options->producer_public_key, "options.producer_public_key", o.producer_public_key);
      optional_text(options->key_file, "options.key_file", o.key_file);
      o.allow_plaintext_remote = options->allow_plaintext_remote != 0;
      if (options->transfer_timeout_ms <= 0) invalid("options.transfer_timeout_ms must be > 0");
      o.transfer_timeout = std::chrono::milliseconds(options->transfer_timeout_ms);
      o.max_model_bytes = options->max_model_bytes;
    }
    if (has_field(*options, options->callback_user_data)) set_callbacks(*options, o);
    if (has_field(*options, options->device)) {
      const int memory = raw(options->memory);
      if (memory != MC_MEMORY_HOST && memory != MC_MEMORY_CUDA) invalid("options.memory is not an mc_memory_kind");
      o.memory = static_cast<modelcast::MemoryKind>(memory);
      o.device = options->device;
    }
    if (has_field(*options, options->path)) {
      if (options->transport_count > 0) require(options->transports, "options.transports");
      for (std::size_t i = 0; i < options->transport_count; ++i) {
        if (options->transports[i] == nullptr) invalid("options.transports[" + std::to_string(i) + "] is NULL");
        o.transports.emplace_back(options->transports[i]);
      }
      if (options->path != nullptr) o.path = options->path;
    }
    if (has_field(*options, options->serve_peers)) o.serve_peers = options->serve_peers != 0;
    if (has_field(*options, options->conversion_count)) {
      if (options->conversion_count > 0) require(options->conversions, "options.conversions");
      for (std::size_t i = 0; i < options->conversion_count; ++i) {
        const auto& c = options->conversions[i];
        const std::string label = "options.conversions[" + std::to_string(i) + "]";
        if (c.tensor == nullptr) invalid(label + ".tensor is NULL");
        if (!valid_dtype(raw(c.to))) invalid(label + ".to is not an mc_dtype: " + std::to_string(raw(c.to)));
        o.conversions.push_back({c.tensor, static_cast<modelcast::DType>(c.to), c.fp8_block});
      }
    }
    if (has_field(*options, options->group_size)) {
      if (options->group != nullptr) o.group = options->group;
      o.group_size = options->group_size;
    }
    if (has_field(*options, options->want_count)) {
      if (options->want_count > 0) require(options->wants, "options.wants");
      for (std::size_t i = 0; i < options->want_count; ++i) {
        const auto& w = options->wants[i];
        const std::string label = "options.wants[" + std::to_string(i) + "]";
        if (w.tensor == nullptr) invalid(label + ".tensor is NULL");
        const int kind = raw(w.kind);
        if (kind < MC_WANT_WHOLE || kind > MC_WANT_NOTHING) invalid(label + ".kind is not an mc_want_kind: " + std::to_string(kind));
        modelcast::TensorWant want{w.tensor, static_cast<modelcast::TensorWant::Kind>(kind), w.dim, w.index, w.count, {}};
        if (kind == MC_WANT_BOXES) {
          // Before the arrays are read: box_count x ndim elements are read from each.
          const std::size_t max_rank = modelcast::ManifestLimits{}.max_rank;
          if (w.box_count > 0 && (w.ndim == 0 || w.ndim > max_rank)) {
            invalid(label + ".ndim is " + std::to_string(w.ndim) + " for " + std::to_string(w.box_count) +
                    " box(es): a box has one offset and extent per dimension, 1 to " + std::to_string(max_rank));
          }
          if (w.box_count > 0 && w.ndim > 0) {
            require(w.box_offsets, (label + ".box_offsets").c_str());
            require(w.box_extents, (label + ".box_extents").c_str());
          }
          for (std::size_t b = 0; b < w.box_count; ++b) {
            want.boxes.push_back({{w.box_offsets + b * w.ndim, w.box_offsets + (b + 1) * w.ndim},
                                  {w.box_extents + b * w.ndim, w.box_extents + (b + 1) * w.ndim}});
          }
        }
        o.wants.push_back(std::move(want));
      }
    }
    auto handle = std::make_unique<mc_consumer>();
    handle->consumer = std::make_unique<modelcast::Consumer>(std::move(o));
    *out = handle.release();
    return MC_OK;
  });
}

void mc_consumer_destroy(mc_consumer_t* consumer) {
  const CancelHeldOff held;  // the destructor joins threads
  try {
    // A callback still running may wait on this consumer: the destructor ends such waits, which
    // must then say so, not time out.
    if (consumer != nullptr) consumer->waits_cancelled = true;
    delete consumer;
  } catch (...) {
  }
}

mc_status mc_consumer_acquire(const mc_consumer_t* consumer, mc_view_t** out) {
  if (out != nullptr) *out = nullptr;
  return guarded(__func__, [&] {
    require(consumer, "consumer");
    require(out, "out");
    *out = make_view(consumer->consumer->acquire());
    return MC_OK;
  });
}

mc_status mc_consumer_wait_for_version(const mc_consumer_t* consumer, uint64_t version, int64_t timeout_ms,
                                       mc_view_t** out) {
  if (out != nullptr) *out = nullptr;
  return guarded_cancellable(__func__, [&] {
    require(consumer, "consumer");
    require(out, "out");
    auto timeout = timeout_of(timeout_ms, "timeout_ms");
    auto view = consumer->consumer->wait_for_version(version, timeout);
    if (!view) {
      if (consumer->waits_cancelled) {
        throw CError{MC_ERR_STATE, "waits on this consumer were cancelled (mc_consumer_cancel_waits, or "
                                   "mc_consumer_destroy under way)"};
      }
      // The consumer's last error goes with the timeout: a C or Fortran caller that only checks
      // statuses would otherwise see "did not arrive" where the cause is a refused join.
      const auto stats = consumer->consumer->stats();
      // Version 0 asks for any version: the first.
      const std::string awaited = version == 0 ? "no version arrived" : "version " + std::to_string(version) + " did not arrive";
      throw CError{MC_ERR_TIMEOUT, awaited + " within " +
                                       std::to_string(timeout_ms) + " ms (current version " +
                                       std::to_string(stats.current_version) +
                                       (stats.last_error.empty() ? "" : "; last error: " + stats.last_error) + ")"};
    }
    *out = make_view(std::move(view));
    return MC_OK;
  });
}

mc_status mc_consumer_cancel_waits(mc_consumer_t* consumer) {
  return guarded(__func__, [&] {
    require(consumer, "consumer");
    consumer->waits_cancelled = true;  // before the wake: a woken wait must see it
    consumer->consumer->cancel_waits();
    return MC_OK;
  });
}

mc_status mc_consumer_get_stats(const mc_consumer_t* consumer, mc_consumer_stats* out) {
  return guarded(__func__, [&] {
    require(consumer, "consumer");
    require(out, "out");
    auto s = consumer->consumer->stats();
    *out = mc_consumer_stats{};
    out->current_version = s.current_version;
    out->versions_installed = s.versions_installed;
    out->versions_rejected = s.versions_rejected;
    out->transfers_aborted = s.transfers_aborted;
    out->bad_messages = s.bad_messages;
    out->reconnects = s.reconnects;
    out->bytes_received = s.bytes_received;
    out->last_update_latency_ns = s.last_update_latency.count();
    out->last_notify_latency_ns = s.last_notify_latency.count();
    copy_text(s.last_error, out->last_error, sizeof(out->last_error));
    return MC_OK;
  });
}

mc_status mc_consumer_get_group(const mc_consumer_t* consumer, mc_group_state* out) {
  return guarded(__func__, [&] {
    require(consumer, "consumer");
    require(out, "out");
    auto s = consumer->consumer->stats();
    *out = mc_group_state{s.group_version, s.prepared_version, s.group_waiting ? 1 : 0};
    return MC_OK;
  });
}

mc_status mc_consumer_get_arriving(const mc_consumer_t* consumer, uint64_t* version, uint64_t* bytes) {
  return guarded(__func__, [&] {
    require(consumer, "consumer");
    const auto s = consumer->consumer->stats();
    if (version) *version = s.arriving_version;
    if (bytes) *bytes = s.arriving_bytes;
    return MC_OK;
  });
}

}  // extern "C"
