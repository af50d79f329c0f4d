// The C ABI's producer entry points (include/modelcast/modelcast.h).
#include "core/c_api/c_boundary.h"

#include <map>
#include <cstdio>
#include <string>

using namespace modelcast::c_api;

namespace {
// Made when the library loads: ProducerOptions holds strings, and one made in
// mc_producer_options_init allocated, which out of memory threw std::bad_alloc through a
// function the header says never fails.
const modelcast::ProducerOptions kProducerDefaults;
}  // namespace

extern "C" {

// ---- producer ------------------------------------------------------------------------------

// The name in parentheses: modelcast.h's macro of that name would expand here.
void (mc_producer_options_init)(mc_producer_options* options) {
  if (options == nullptr) return;
  const modelcast::ProducerOptions& defaults = kProducerDefaults;
  *options = mc_producer_options{};
  options->struct_size = sizeof(mc_producer_options);
  options->model_name = "model";
  options->control_endpoint = "tcp://127.0.0.1:0";
  options->snapshot_slots = defaults.snapshot_slots;
  options->integrity = defaults.integrity ? 1 : 0;
  options->first_version = defaults.first_version;
  options->lease_timeout_ms = defaults.lease_timeout.count();
  options->heartbeat_interval_ms = defaults.heartbeat_interval.count();
  options->transfer_chunk_bytes = defaults.transfer_chunk_bytes;
  options->max_consumers = defaults.max_consumers;
  options->persist_directory = nullptr;
  options->persist_every = defaults.persist.every;
  options->persist_keep = defaults.persist.keep;
  options->device_stage_bytes = defaults.device_stage_bytes;
  options->relay_fanout = defaults.relay_fanout;
  options->rank = defaults.rank;
  options->rank_count = defaults.rank_count;
}

void mc_producer_options_init_sized(mc_producer_options* options, size_t size) {
  init_sized(options, size, &(mc_producer_options_init));
}

mc_status mc_write_key_pair(const char* path, int overwrite, char public_key_out[41]) {
  return guarded(__func__, [&] {
    require(path, "path");
    auto keys = modelcast::generate_key_pair();
    modelcast::save_key_pair(keys, path, overwrite != 0);
    if (public_key_out != nullptr) std::snprintf(public_key_out, 41, "%s", keys.public_key.c_str());
    return MC_OK;
  });
}

mc_status mc_load_public_key(const char* path, char public_key_out[41]) {
  return guarded(__func__, [&] {
    require(path, "path");
    require(public_key_out, "public_key_out");
    auto key = modelcast::load_public_key(path);
    std::snprintf(public_key_out, 41, "%s", key.c_str());
    return MC_OK;
  });
}

// The name in parentheses: modelcast.h's macro of that name would expand here.
void (mc_tensor_desc_init)(mc_tensor_desc* desc) {
  if (desc == nullptr) return;
  *desc = mc_tensor_desc{};
  desc->struct_size = sizeof(mc_tensor_desc);
  desc->dtype = MC_DTYPE_F32;
  desc->memory = MC_MEMORY_HOST;
  desc->device = 0;
}

void mc_tensor_desc_init_sized(mc_tensor_desc* desc, size_t size) {
  init_sized(desc, size, &(mc_tensor_desc_init));
}

mc_status mc_producer_create(const mc_producer_options* options, mc_producer_t** out) {
  if (out != nullptr) *out = nullptr;
  return guarded(__func__, [&] {
    require(out, "out");
    mc_producer_options defaults;
    if (options == nullptr) {
      mc_producer_options_init(&defaults);
      options = &defaults;
    }
    if (options->struct_size < kProducerOptionsV1) {
      invalid("options.struct_size is " + std::to_string(options->struct_size) +
              ": call mc_producer_options_init first");
    }
    require(options->model_name, "options.model_name");
    require(options->control_endpoint, "options.control_endpoint");
    if (options->lease_timeout_ms <= 0) invalid("options.lease_timeout_ms must be > 0");
    if (options->heartbeat_interval_ms <= 0) invalid("options.heartbeat_interval_ms must be > 0");
    modelcast::ProducerOptions o;
    o.model_name = options->model_name;
    o.control_endpoint = options->control_endpoint;
    o.snapshot_slots = options->snapshot_slots;
    o.integrity = options->integrity != 0;
    o.first_version = options->first_version;
    o.lease_timeout = std::chrono::milliseconds(options->lease_timeout_ms);
    o.heartbeat_interval = std::chrono::milliseconds(options->heartbeat_interval_ms);
    o.transfer_chunk_bytes = options->transfer_chunk_bytes;
    if (has_field(*options, options->max_consumers)) {
      optional_text(options->key_file, "options.key_file", o.key_file);
      if (options->allowed_consumer_key_count > 0) require(options->allowed_consumer_keys, "options.allowed_consumer_keys");
      for (std::size_t i = 0; i < options->allowed_consumer_key_count; ++i) {
        if (options->allowed_consumer_keys[i] == nullptr) {
          invalid("options.allowed_consumer_keys[" + std::to_string(i) + "] is NULL");
        }
        o.allowed_consumer_keys.emplace_back(options->allowed_consumer_keys[i]);
      }
      o.allow_any_consumer = options->allow_any_consumer != 0;
      o.allow_plaintext_remote = options->allow_plaintext_remote != 0;
      o.max_consumers = options->max_consumers;
    }
    if (has_field(*options, options->persist_keep)) {
      optional_text(options->persist_directory, "options.persist_directory", o.persist.directory);
      o.persist.every = options->persist_every;
      o.persist.keep = options->persist_keep;
    }
    if (has_field(*options, options->device_stage_bytes)) o.device_stage_bytes = options->device_stage_bytes;
    if (has_field(*options, options->relay_fanout)) o.relay_fanout = options->relay_fanout;
    if (has_field(*options, options->rank_endpoint_count)) {
      o.rank = options->rank;
      o.rank_count = options->rank_count;
      if (options->rank_endpoint_count > 0) require(options->rank_endpoints, "options.rank_endpoints");
      for (std::size_t i = 0; i < options->rank_endpoint_count; ++i) {
        // Rank 0's own entry is not read: NULL there is fine.
        const char* e = options->rank_endpoints[i];
        o.rank_endpoints.emplace_back(e != nullptr ? e : "");
      }
    }
    if (has_field(*options, options->run_id)) optional_text(options->run_id, "options.run_id", o.run_id);
    auto handle = std::make_unique<mc_producer>();
    handle->producer = std::make_unique<modelcast::Producer>(std::move(o));
    handle->endpoint = handle->producer->control_endpoint();
    *out = handle.release();
    return MC_OK;
  });
}

void mc_producer_destroy(mc_producer_t* producer) {
  const CancelHeldOff held;  // the destructor joins threads
  try {
    // As mc_consumer_destroy: a wait its destructor ends says so.
    if (producer != nullptr) producer->waits_cancelled = true;
    delete producer;
  } catch (...) {
    // Destructors do not throw; nothing may cross the ABI regardless.
  }
}

const char* mc_producer_endpoint(const mc_producer_t* producer) {
  if (producer == nullptr) {
    fail(__func__, MC_ERR_INVALID_ARGUMENT, "producer is NULL");
    return nullptr;
  }
  return producer->endpoint.c_str();
}

mc_status mc_producer_register_tensor(mc_producer_t* producer, const char* name, mc_dtype dtype, size_t ndim,
                                      const int64_t* shape, const void* data) {
  return guarded(__func__, [&] {
    require(producer, "producer");
    producer->producer->register_tensor(tensor_ref(name, raw(dtype), ndim, shape, data, MC_MEMORY_HOST, 0));
    return MC_OK;
  });
}

mc_status mc_producer_register_tensor_desc(mc_producer_t* producer, const mc_tensor_desc* desc) {
  return guarded(__func__, [&] {
    require(producer, "producer");
    require(desc, "desc");
    if (desc->struct_size < kTensorDescV1) invalid("desc.struct_size is not set: call mc_tensor_desc_init first");
    producer->producer->register_tensor(
        tensor_ref(desc->name, raw(desc->dtype), desc->ndim, desc->shape, desc->data, raw(desc->memory), desc->device));
    return MC_OK;
  });
}

mc_status mc_producer_register_piece(mc_producer_t* producer, const char* name, mc_dtype dtype, size_t ndim,
                                     const int64_t* shape, const int64_t* global_shape, const int64_t* global_offset,
                                     const void* data) {
  return guarded(__func__, [&] {
    require(producer, "producer");
    if (ndim > 0) {
      require(global_shape, "global_shape");
      require(global_offset, "global_offset");
    }
    auto ref = tensor_ref(name, raw(dtype), ndim, shape, data, MC_MEMORY_HOST, 0);
    ref.global_shape.assign(global_shape, global_shape + ndim);
    ref.global_offset.assign(global_offset, global_offset + ndim);
    producer->producer->register_tensor(ref);
    return MC_OK;
  });
}

mc_status mc_producer_prepare(mc_producer_t* producer) {
  return guarded(__func__, [&] {
    require(producer, "producer");
    producer->producer->prepare();
    return MC_OK;
  });
}

}  // extern "C"

namespace {

// Both publish calls; `function` names the one the caller made in its errors.
mc_status publish_as(const char* function, mc_producer_t* producer, int64_t step, const char* const* keys,
                     const char* const* values, size_t count, void* cuda_stream, void* cuda_event,
                     mc_publish_result* out) {
  if (out != nullptr) *out = mc_publish_result{};
  return guarded(function, [&] {
    require(producer, "producer");
    modelcast::Metadata metadata;
    if (count > 0) {
      require(keys, "keys");
      require(values, "values");
      for (std::size_t i = 0; i < count; ++i) {
        if (keys[i] == nullptr) invalid("metadata key " + std::to_string(i) + " is NULL");
        if (values[i] == nullptr) invalid(std::string("metadata value for key '") + keys[i] + "' is NULL");
        metadata[keys[i]] = values[i];
      }
    }
    auto ticket = producer->producer->publish(step, metadata, modelcast::DeviceOrder{cuda_stream, cuda_event});
    if (out != nullptr) {
      out->version = ticket.version;
      out->step = ticket.step;
      out->stall_ns = ticket.stall.count();
      out->bytes = ticket.bytes;
    }
    return MC_OK;
  });
}

}  // namespace

extern "C" {

mc_status mc_producer_publish(mc_producer_t* producer, int64_t step, const char* const* keys,
                              const char* const* values, size_t count, mc_publish_result* out) {
  return publish_as(__func__, producer, step, keys, values, count, nullptr, nullptr, out);
}

mc_status mc_producer_publish_device(mc_producer_t* producer, int64_t step, const char* const* keys,
                                     const char* const* values, size_t count, void* cuda_stream, void* cuda_event,
                                     mc_publish_result* out) {
  return publish_as(__func__, producer, step, keys, values, count, cuda_stream, cuda_event, out);
}

mc_status mc_producer_wait_for_consumers(const mc_producer_t* producer, size_t count, int64_t timeout_ms) {
  return guarded_cancellable(__func__, [&] {
    require(producer, "producer");
    auto timeout = timeout_of(timeout_ms, "timeout_ms");
    if (!producer->producer->wait_for_consumers(count, timeout)) {
      if (producer->waits_cancelled) {
        throw CError{MC_ERR_STATE, "waits on this producer were cancelled (mc_producer_cancel_waits, or "
                                   "mc_producer_destroy under way)"};
      }
      throw CError{MC_ERR_TIMEOUT, std::to_string(count) + " consumer(s) did not join within " +
                                       std::to_string(timeout_ms) + " ms"};
    }
    return MC_OK;
  });
}

mc_status mc_producer_cancel_waits(mc_producer_t* producer) {
  return guarded(__func__, [&] {
    require(producer, "producer");
    producer->waits_cancelled = true;  // before the wake: a woken wait must see it
    producer->producer->cancel_waits();
    return MC_OK;
  });
}

mc_status mc_producer_get_stats(const mc_producer_t* producer, mc_producer_stats* out) {
  return guarded(__func__, [&] {
    require(producer, "producer");
    require(out, "out");
    auto s = producer->producer->stats();
    *out = mc_producer_stats{};
    out->latest_version = s.latest_version;
    out->versions_published = s.versions_published;
    out->deliveries = s.deliveries;
    out->failed_deliveries = s.failed_deliveries;
    out->leases_expired = s.leases_expired;
    out->bad_messages = s.bad_messages;
    out->bytes_sent = s.bytes_sent;
    out->consumers = s.consumers;
    out->last_stall_ns = s.last_stall.count();
    copy_text(s.transport, out->transport, sizeof(out->transport));
    return MC_OK;
  });
}

mc_status mc_producer_get_copy_stats(const mc_producer_t* producer, uint64_t* snapshot_bytes_copied) {
  return guarded(__func__, [&] {
    require(producer, "producer");
    require(snapshot_bytes_copied, "snapshot_bytes_copied");
    *snapshot_bytes_copied = producer->producer->stats().snapshot_bytes_copied;
    return MC_OK;
  });
}

mc_status mc_producer_get_refusal_stats(const mc_producer_t* producer, uint64_t* refused_joins,
                                        uint64_t* refused_peers) {
  return guarded(__func__, [&] {
    require(producer, "producer");
    auto s = producer->producer->stats();
    if (refused_joins != nullptr) *refused_joins = s.refused_joins;
    if (refused_peers != nullptr) *refused_peers = s.refused_peers;
    return MC_OK;
  });
}

mc_status mc_producer_get_persist_stats(const mc_producer_t* producer, uint64_t* persisted, uint64_t* failures,
                                        uint64_t* skipped) {
  return guarded(__func__, [&] {
    require(producer, "producer");
    auto s = producer->producer->stats();
    if (persisted != nullptr) *persisted = s.persisted_versions;
    if (failures != nullptr) *failures = s.persist_failures;
    if (skipped != nullptr) *skipped = s.persist_skipped;
    return MC_OK;
  });
}

}  // extern "C"
