/* modelcast C ABI: the producer/consumer API for C and Fortran (ISO_C_BINDING) codes.
 *
 * Pure C11. Handles are opaque; every call that can fail returns an mc_status and leaves a
 * text naming the problem in mc_last_error() (per thread). No C++ exception crosses this
 * boundary, but for one: a thread cancelled (pthread_cancel, deferred) in
 * mc_consumer_wait_for_version or mc_producer_wait_for_consumers ends there (the forced unwind
 * passes through), its handles left usable; in any other call the cancel acts at the caller's
 * next cancellation point once the call has returned. Structs passed *in* carry `struct_size` (set by their _init macro to the size
 * the caller was built with: see mc_producer_options_init) so that later releases can append fields without breaking binaries built against this header;
 * structs modelcast fills (results, stats, tensor info) keep their layout for the library's
 * SOVERSION, and new fields there come with new functions.
 * Unless a function says otherwise, strings are NUL-terminated UTF-8 and are copied by
 * modelcast before the call returns.
 */
#ifndef MODELCAST_MODELCAST_H
#define MODELCAST_MODELCAST_H

#include <stddef.h>
#include <stdint.h>

#include "modelcast/export.h" /* plain preprocessor macros: C-compatible */

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status codes, element types, memory kinds ------------------------------------------ */

/* Mirrors modelcast::ErrorCode numerically; 0 is success. */
typedef enum mc_status {
  MC_OK = 0,
  MC_ERR_INVALID_ARGUMENT = 1, /* the caller passed something wrong (names, shapes, options, NULL) */
  MC_ERR_LAYOUT_MISMATCH = 2,  /* producer and consumer disagree on tensors, dtypes or shapes */
  MC_ERR_PROTOCOL = 3,         /* a malformed, truncated or unknown-version message */
  MC_ERR_TRANSPORT = 4,        /* UCX or ZeroMQ failed (peer gone, address unusable, ...) */
  MC_ERR_TIMEOUT = 5,          /* a bounded wait ran out */
  MC_ERR_INTEGRITY = 6,        /* a digest did not match */
  MC_ERR_STATE = 7,            /* the call is not allowed now (e.g. publish with nothing registered) */
  MC_ERR_RESOURCE = 8,         /* memory or another resource could not be had */
  MC_ERR_AUTHENTICATION = 9,   /* a key, handshake or signature did not check out */
  MC_ERR_UNKNOWN = 99          /* any other failure inside modelcast (a bug: please report it) */
} mc_status;

/* Mirrors modelcast::DType numerically (the values are part of the wire protocol). */
typedef enum mc_dtype {
  MC_DTYPE_F64 = 0,
  MC_DTYPE_F32 = 1,
  MC_DTYPE_F16 = 2,
  MC_DTYPE_BF16 = 3,
  MC_DTYPE_I64 = 4,
  MC_DTYPE_I32 = 5,
  MC_DTYPE_I16 = 6,
  MC_DTYPE_I8 = 7,
  MC_DTYPE_U8 = 8,
  MC_DTYPE_BOOL = 9, /* one byte per element */
  MC_DTYPE_F8E4M3 = 10 /* since 0.5: fp8 e4m3 (OCP E4M3FN), one byte per element */
} mc_dtype;

/* Mirrors modelcast::MemoryKind numerically. */
typedef enum mc_memory_kind { MC_MEMORY_HOST = 0, MC_MEMORY_CUDA = 1 } mc_memory_kind;

typedef struct mc_producer mc_producer_t; /* opaque */
typedef struct mc_consumer mc_consumer_t; /* opaque */
typedef struct mc_view mc_view_t;         /* opaque: one held, immutable model version */

/* ---- errors and small helpers ----------------------------------------------------------- */

/* Text of the last failure on the calling thread ("" if none); never NULL.
 * Owned by modelcast, valid until the next failing modelcast call on this thread. */
MODELCAST_API const char* mc_last_error(void);

/* Records `text` (NULL: "") as the calling thread's last error and returns `status`: for a
 * binding that finds a failure itself (the Fortran module's argument checks), so that
 * mc_last_error reports it per thread, as the library's own. Thread-safe; never fails. */
MODELCAST_API mc_status mc_set_last_error(mc_status status, const char* text);

/* Stable short name of a status ("ok", "invalid_argument", ...; "?" if out of range).
 * Static storage; thread-safe; never fails. */
MODELCAST_API const char* mc_status_name(mc_status status);

/* Short lowercase dtype name ("f32", "bf16", ...), or NULL for a value outside mc_dtype.
 * Static storage; thread-safe; never fails. */
MODELCAST_API const char* mc_dtype_name(mc_dtype dtype);

/* Bytes per element of `dtype`, or 0 for a value outside mc_dtype.
 * Thread-safe; never fails. */
MODELCAST_API size_t mc_dtype_size(mc_dtype dtype);

/* ---- producer (trainer side) ------------------------------------------------------------ */

typedef struct mc_producer_options {
  size_t struct_size;           /* set by mc_producer_options_init; do not change */
  const char* model_name;       /* default "model" */
  /* ROUTER endpoint consumers connect to: "tcp://HOST:PORT" (PORT 0 = pick a free one) or
   * "ipc://PATH". Default "tcp://127.0.0.1:0"; read the bound one with mc_producer_endpoint. */
  const char* control_endpoint;
  size_t snapshot_slots;        /* >= 2; default 3 */
  int integrity;                /* nonzero: XXH3 digest per block, checked by consumers; default 1 */
  uint64_t first_version;       /* 1 to 2^64 - 2; default 1 (a restarted trainer may continue its numbering) */
  int64_t lease_timeout_ms;     /* a consumer's hold on a slot lapses after this long without progress; default 10000 */
  int64_t heartbeat_interval_ms;/* default 200 */
  size_t transfer_chunk_bytes;  /* default 32 MiB; >= 64 KiB */
  /* Since 0.2 (read only when struct_size covers them; _init sets the defaults). Security: with
   * a key file (modelcast-keygen or mc_write_key_pair) the control plane is CurveZMQ and
   * versions are signed; without one, plaintext is allowed on loopback/ipc:// endpoints only
   * unless allow_plaintext_remote, and ipc:// only in a directory no other user can write. */
  const char* key_file;                       /* default NULL: no key ("" is refused) */
  const char* const* allowed_consumer_keys;   /* Z85 public keys of admitted consumers */
  size_t allowed_consumer_key_count;
  int allow_any_consumer;                     /* nonzero: admit any consumer key; default 0 */
  int allow_plaintext_remote;                 /* default 0 */
  size_t max_consumers;                       /* joins beyond this are refused; default 256 */
  /* Since 0.3 (read only when struct_size covers them). Checkpoints written off the hot path
   * (ProducerOptions::persist in producer.h): every persist_every-th version, once verified, to
   * <persist_directory>/<model_name>/<version>/ as safetensors + metadata.json, newest
   * persist_keep kept. Needs snapshot_slots >= 3; a version due while a write is going is skipped. */
  const char* persist_directory;              /* default NULL: off ("" is refused) */
  uint64_t persist_every;                     /* >= 1; default 1 */
  size_t persist_keep;                        /* >= 1; default 3 */
  /* Since 0.4 (read only when struct_size covers it). Device tensors: the device-to-host copy
   * of a version runs in pieces of this size, and chunks are sent as the pieces under them
   * complete (ProducerOptions::device_stage_bytes). Default 8 MiB; >= 64 KiB. */
  size_t device_stage_bytes;
  /* Since 0.5 (read only when struct_size covers it). Consumers relay versions to each other
   * (ProducerOptions::relay_fanout in producer.h): each serves at most this many others; the
   * producer sends each block about once. Default 0: off, the producer sends to every consumer. */
  size_t relay_fanout;
  /* Since 0.7 (read only when struct_size covers them). A model trained sharded
   * (ProducerOptions::rank in producer.h): this producer is rank `rank` of `rank_count`; rank 0
   * of several also gets every rank's control endpoint, `rank_endpoint_count` of them in rank
   * order, and tells consumers. Pieces: mc_producer_register_piece. */
  uint32_t rank;
  uint32_t rank_count;
  const char* const* rank_endpoints;
  size_t rank_endpoint_count;
  /* Since 0.10 (read only when struct_size covers it). With rank_count > 1, which run of the
   * trainer this is: the same on every rank of a run, new at each restart (e.g. the job id and
   * restart count). Consumers never put pieces of two run ids together
   * (ProducerOptions::run_id in producer.h). Default NULL: none ("" is refused). */
  const char* run_id;
} mc_producer_options;

/* Description of one tensor for mc_producer_register_tensor_desc: host or device memory. */
typedef struct mc_tensor_desc {
  size_t struct_size;           /* set by mc_tensor_desc_init; do not change */
  const char* name;
  mc_dtype dtype;
  size_t ndim;                  /* 0 = scalar */
  const int64_t* shape;         /* ndim extents, each >= 0; may be NULL when ndim is 0 */
  const void* data;             /* caller-owned; must stay valid and unmoved while the producer lives */
  mc_memory_kind memory;        /* default MC_MEMORY_HOST; MC_MEMORY_CUDA: `data` is a device pointer */
  int device;                   /* device ordinal for MC_MEMORY_CUDA; default 0 */
} mc_tensor_desc;

/* What mc_producer_publish reports once the snapshot is taken. */
typedef struct mc_publish_result {
  uint64_t version;             /* the version number assigned to this publish */
  int64_t step;                 /* the step passed in */
  int64_t stall_ns;             /* time the caller was blocked in publish */
  uint64_t bytes;               /* size of the snapshot (the tensors plus alignment padding) */
} mc_publish_result;

typedef struct mc_producer_stats {
  uint64_t latest_version;      /* newest version offered to consumers, 0 before the first
                                   publish; may lag versions_published for moments after
                                   mc_producer_publish returns (the service thread takes it) */
  uint64_t versions_published;
  uint64_t deliveries;          /* verified acks from consumers */
  uint64_t failed_deliveries;
  uint64_t leases_expired;
  uint64_t bad_messages;        /* malformed or unknown-version requests dropped */
  uint64_t bytes_sent;
  uint64_t consumers;           /* consumers that joined and are not known dead */
  int64_t last_stall_ns;
  char transport[32];           /* e.g. "ucx", NUL-terminated (truncated if longer) */
} mc_producer_stats;

/* Fills `options` with the defaults above (and struct_size). Call before setting fields.
 * No-op on NULL; thread-safe; never fails.
 * mc_producer_options_init (and mc_tensor_desc_init, mc_consumer_options_init,
 * mc_scheduler_options_init) is a macro: it passes sizeof *(options), the size of the struct the
 * caller was built with, to the _init_sized function, which writes the defaults into that many
 * bytes at most and sets struct_size to it. A binary built against this header, run with a later
 * library whose structs have grown, gets no write past its struct, and an array of descs is
 * stepped through at the caller's size (binaries built against headers before this one call the
 * function, which writes this library's size). The function of the macro's name (what Fortran
 * binds, or a pointer to it) writes this library's size. A NULL pointer is a no-op either way; the
 * macro takes only a pointer to the struct (a void pointer or a literal NULL does not compile). */
MODELCAST_API void mc_producer_options_init(mc_producer_options* options);
MODELCAST_API void mc_producer_options_init_sized(mc_producer_options* options, size_t size);
#define mc_producer_options_init(options) \
  mc_producer_options_init_sized((options), sizeof *(options) + 0 * sizeof((options)->struct_size))

/* Writes a fresh key pair to `path` (mode 0600) and its public key to `path`.pub; copies the
 * public key (40 Z85 characters and a NUL) to `public_key_out` if not NULL. Refuses to replace
 * existing files unless `overwrite`. Errors: MC_ERR_INVALID_ARGUMENT (NULL path, file exists
 * or cannot be written), MC_ERR_RESOURCE. Thread-safe. */
MODELCAST_API mc_status mc_write_key_pair(const char* path, int overwrite, char public_key_out[41]);

/* Since 0.5. Reads the public key from a `.pub` file (or the public half of a key pair file)
 * into `public_key_out` (40 Z85 characters and a NUL): what mc_consumer_options'
 * producer_public_key and mc_producer_options' allowed_consumer_keys take. Errors:
 * MC_ERR_INVALID_ARGUMENT naming the file (NULL path or output, missing or malformed file).
 * Thread-safe. */
MODELCAST_API mc_status mc_load_public_key(const char* path, char public_key_out[41]);

/* Fills `desc` with defaults (dtype MC_DTYPE_F32, host memory, device 0, everything else
 * zero/NULL): set dtype for any other element type, or its bytes are read as f32.
 * No-op on NULL; thread-safe; never fails. */
MODELCAST_API void mc_tensor_desc_init(mc_tensor_desc* desc);
MODELCAST_API void mc_tensor_desc_init_sized(mc_tensor_desc* desc, size_t size);
#define mc_tensor_desc_init(desc) \
  mc_tensor_desc_init_sized((desc), sizeof *(desc) + 0 * sizeof((desc)->struct_size))

/* Binds the control endpoint and starts background threads; *out gets a producer the caller
 * owns (free with mc_producer_destroy). options NULL = defaults. On error *out is NULL:
 * MC_ERR_INVALID_ARGUMENT (bad options, out NULL, endpoint not tcp:// or ipc://),
 * MC_ERR_TRANSPORT (cannot bind the endpoint, UCX unusable). */
MODELCAST_API mc_status mc_producer_create(const mc_producer_options* options, mc_producer_t** out);

/* Stops the producer's threads and frees it; transfers in flight are abandoned.
 * NULL is a no-op. Do not call while another thread uses the producer. */
MODELCAST_API void mc_producer_destroy(mc_producer_t* producer);

/* The control endpoint actually bound (with the chosen port if PORT was 0), for consumers.
 * Owned by the producer, valid until mc_producer_destroy; NULL (and last error) if producer is NULL. */
MODELCAST_API const char* mc_producer_endpoint(const mc_producer_t* producer);

/* Registers a host tensor the caller owns: modelcast reads `data` during publish only, so it
 * must stay valid and unmoved while the producer lives. Only before the first publish; one
 * thread at a time. Errors: MC_ERR_INVALID_ARGUMENT (NULL producer/name, empty or duplicate
 * name, unknown dtype, negative extent, NULL shape with ndim > 0, NULL data for a non-empty
 * tensor), MC_ERR_STATE (after mc_producer_prepare or the first publish). */
MODELCAST_API mc_status mc_producer_register_tensor(mc_producer_t* producer, const char* name, mc_dtype dtype,
                                                    size_t ndim, const int64_t* shape, const void* data);

/* Same as mc_producer_register_tensor from a descriptor (memory kind, device ordinal).
 * Errors as there; device memory gives MC_ERR_STATE in a process without a device (a build
 * without GPU support, or no device on the machine). */
MODELCAST_API mc_status mc_producer_register_tensor_desc(mc_producer_t* producer, const mc_tensor_desc* desc);

/* Since 0.7. Registers a host tensor that is this rank's piece of a tensor of `ndim` dimensions:
 * the whole tensor is `global_shape`, the piece starts at `global_offset` in it and spans
 * `shape` (each `ndim` entries, read during the call). Errors as mc_producer_register_tensor,
 * and MC_ERR_INVALID_ARGUMENT (naming the tensor) for a piece outside its global shape. */
MODELCAST_API mc_status mc_producer_register_piece(mc_producer_t* producer, const char* name, mc_dtype dtype,
                                                   size_t ndim, const int64_t* shape, const int64_t* global_shape,
                                                   const int64_t* global_offset, const void* data);

/* Allocates and registers the snapshot slots now so the first publish does not pay for it.
 * Optional; one thread at a time. Errors: MC_ERR_STATE (nothing registered), MC_ERR_RESOURCE. */
MODELCAST_API mc_status mc_producer_prepare(mc_producer_t* producer);

/* Copies every registered tensor into a snapshot slot and returns; delivery runs in the
 * background. Blocks beyond the copy only while readers hold every slot (at most the lease).
 * Metadata: `count` key/value pairs, copied (keys/values may be NULL when count is 0); a
 * repeated key keeps its last value. `out` may be NULL (zeroed on error). One thread at a time.
 * Errors: MC_ERR_STATE (nothing registered; another publish of this producer running; from a
 * callback, every slot in use: it never waits there), MC_ERR_INVALID_ARGUMENT (NULL producer, NULL
 * key/value arrays or entries; with rank_count > 1, a step not above the last published),
 * MC_ERR_RESOURCE; previous versions stay served. */
MODELCAST_API mc_status mc_producer_publish(mc_producer_t* producer, int64_t step, const char* const* keys,
                                            const char* const* values, size_t count, mc_publish_result* out);

/* mc_producer_publish for device tensors, with their copies ordered against the caller's GPU
 * work: `cuda_stream` (a cudaStream_t, or NULL): the copies start after the work queued on it and
 * its later work waits for them, so the call does not wait for the copies; `cuda_event` (a
 * cudaEvent_t the caller recorded, or NULL): the copies start after it and the call waits for
 * them; both NULL: as mc_producer_publish. Errors as mc_producer_publish. */
MODELCAST_API mc_status mc_producer_publish_device(mc_producer_t* producer, int64_t step, const char* const* keys,
                                                   const char* const* values, size_t count, void* cuda_stream,
                                                   void* cuda_event, mc_publish_result* out);

/* Blocks until at least `count` consumers have joined, at most timeout_ms (>= 0).
 * Thread-safe. Errors: MC_ERR_TIMEOUT, MC_ERR_STATE (waits cancelled: mc_producer_cancel_waits;
 * from a callback of modelcast's, where the wait would block), MC_ERR_INVALID_ARGUMENT (NULL
 * producer, negative timeout). */
MODELCAST_API mc_status mc_producer_wait_for_consumers(const mc_producer_t* producer, size_t count,
                                                       int64_t timeout_ms);

/* Since 0.6. Ends every mc_producer_wait_for_consumers under way, and every later one at once,
 * with MC_ERR_STATE; nothing else changes. For the thread about to destroy a producer others
 * wait on: they return, then it may destroy it. Thread-safe. Errors: MC_ERR_INVALID_ARGUMENT. */
MODELCAST_API mc_status mc_producer_cancel_waits(mc_producer_t* producer);

/* Copies a snapshot of the producer's counters into *out. Thread-safe.
 * Errors: MC_ERR_INVALID_ARGUMENT (NULL producer or out). */
MODELCAST_API mc_status mc_producer_get_stats(const mc_producer_t* producer, mc_producer_stats* out);

/* The persist option's counters (mc_producer_stats keeps its size for older callers): versions
 * written, writes that failed, versions skipped while a write was going. Any may be NULL.
 * Thread-safe. Errors: MC_ERR_INVALID_ARGUMENT (NULL producer). */
MODELCAST_API mc_status mc_producer_get_persist_stats(const mc_producer_t* producer, uint64_t* persisted,
                                                      uint64_t* failures, uint64_t* skipped);

/* Bytes mc_producer_publish has copied into snapshot slots, all versions together: the whole
 * model per version, or less while little of a host model changes between versions (publish then
 * hashes the tensors and copies only the blocks the slot does not hold already). Since 0.8.
 * Thread-safe. Errors: MC_ERR_INVALID_ARGUMENT (NULL producer or out). */
MODELCAST_API mc_status mc_producer_get_copy_stats(const mc_producer_t* producer, uint64_t* snapshot_bytes_copied);

/* Who the producer turned away: joins it refused (another model, a bad name, no room, no usable
 * transport; each joiner is told why, the log shows at most one every 10 s) and CurveZMQ
 * handshakes refused (keys not on the allow-list). Either may be NULL. Since 0.8. Thread-safe.
 * Errors: MC_ERR_INVALID_ARGUMENT (NULL producer). */
MODELCAST_API mc_status mc_producer_get_refusal_stats(const mc_producer_t* producer, uint64_t* refused_joins,
                                                      uint64_t* refused_peers);

/* ---- consumer (inference side) ---------------------------------------------------------- */

/* A version was installed: `view` is that version, owned by modelcast and valid during the call
 * only (do not release it; mc_consumer_acquire gives one to keep). */
typedef void (*mc_update_fn)(const mc_view_t* view, void* user_data);
/* A version was rejected (digest, signature, layout, limits) or a handshake failed: `status`
 * says which kind, `message` (valid during the call) what exactly; the last good version stays. */
typedef void (*mc_error_fn)(mc_status status, const char* message, void* user_data);

typedef struct mc_consumer_options {
  size_t struct_size;            /* set by mc_consumer_options_init; do not change */
  const char* producer_endpoint; /* required: the producer's control endpoint */
  const char* model_name;        /* default "model" */
  const char* consumer_name;     /* NULL (default) = "<hostname>:<pid>" */
  size_t buffers;                /* receive buffers modelcast allocates, >= 2; default 3 */
  /* Caller-owned receive buffers instead (count >= 2, each large enough for the model, valid
   * and unmoved for the consumer's lifetime). Default none (NULL, NULL, 0). */
  void* const* caller_buffers;
  const size_t* caller_buffer_sizes;
  size_t caller_buffer_count;
  /* If count > 0, every version must have exactly these tensors (name, dtype, shape; `data`
   * ignored); another layout is rejected (MC_ERR_LAYOUT_MISMATCH in the consumer's stats).
   * Each element from mc_tensor_desc_init: the library steps through the array by their
   * struct_size, so an array built against another release's header is read right. */
  const mc_tensor_desc* expected_layout;
  size_t expected_layout_count;
  int64_t producer_timeout_ms;   /* producer presumed gone after this silence; default 2000 */
  /* Since 0.2 (read only when struct_size covers them; _init sets the defaults). */
  const char* producer_public_key; /* Z85; pins the producer (CurveZMQ, signed versions); default NULL ("" refused) */
  const char* key_file;          /* this consumer's key pair; NULL = a fresh one per consumer ("" refused) */
  int allow_plaintext_remote;    /* default 0: plaintext only to loopback/ipc:// producers */
  int64_t transfer_timeout_ms;   /* an answered transfer without progress this long is retried; default 30000 */
  uint64_t max_model_bytes;      /* 0 (default) = half the machine's memory */
  /* Callbacks (read only when struct_size covers them; _init sets them to NULL). Both run on
   * a thread of the consumer's (one per producer rank), one at a time, and the next update
   * waits for them: keep them short. They may call mc_consumer_acquire, mc_consumer_get_stats and the mc_view_*
   * getters, but not mc_consumer_destroy. `callback_user_data` is passed back unchanged. */
  mc_update_fn on_update;        /* a version was installed */
  mc_error_fn on_error;          /* a version was rejected, or a handshake failed */
  void* callback_user_data;
  /* Since 0.3 (read only when struct_size covers them). Where views' tensors live: default
   * MC_MEMORY_HOST; MC_MEMORY_CUDA receives into device `device` and views hold device pointers. */
  mc_memory_kind memory;
  int device;
  /* Since 0.3. Transports to offer, in order of preference ("ucx", "cuda_ipc", "loopback");
   * count 0 (default) = every default one. The delivery path to insist on ("host_ucx",
   * "cuda_ipc", "staged", "ucx_cuda"); NULL or "" (default) = the producer chooses. */
  const char* const* transports;
  size_t transport_count;
  const char* path;
  /* Since 0.5 (read only when struct_size covers it). Nonzero: relay blocks of the versions this
   * consumer holds to other consumers when a producer with relay_fanout asks
   * (ConsumerOptions::serve_peers). Default 1. */
  int serve_peers;
  /* Since 0.5 (read only when struct_size covers them). Tensors views hold in another dtype
   * (ConsumerOptions::conversions; on the device for a device consumer): count 0 (default) = none. */
  const struct mc_tensor_conversion* conversions;
  size_t conversion_count;
  /* Since 0.6 (read only when struct_size covers them). A group of `group_size` consumers (a
   * sharded server's ranks) that switch versions together (ConsumerOptions::group; needs
   * buffers >= 3): NULL or "" (default) = none. mc_consumer_get_group says where it stands. */
  const char* group;
  uint32_t group_size;
  /* Since 0.7 (read only when struct_size covers them). What views hold of each tensor
   * (ConsumerOptions::wants; cut on the device for a device consumer): count 0 (default) = every tensor whole.
   * mc_view_tensor_box says where a view's part lies in its tensor. */
  const struct mc_tensor_want* wants;
  size_t want_count;
} mc_consumer_options;

/* Since 0.7. What a consumer keeps of a tensor (ConsumerOptions::wants). */
typedef enum mc_want_kind {
  MC_WANT_WHOLE = 0,
  MC_WANT_SHARD = 1,   /* part `index` of `count` along `dim`, as torch.chunk splits it */
  MC_WANT_BOXES = 2,   /* `box_count` boxes of `ndim` dimensions */
  MC_WANT_NOTHING = 3
} mc_want_kind;

/* Since 0.7. `tensor` is a name, or "*" for every tensor not named. For MC_WANT_BOXES, box b
 * starts at box_offsets[b * ndim + d] and spans box_extents[b * ndim + d] in dimension d; the
 * arrays are read during mc_consumer_create only. Passed in arrays without a struct_size: its
 * layout stays as it is for the library's SOVERSION (as mc_tensor_conversion's). */
typedef struct mc_tensor_want {
  const char* tensor;
  mc_want_kind kind;
  size_t dim;
  size_t index;
  size_t count;
  size_t ndim;
  size_t box_count;
  const int64_t* box_offsets;
  const int64_t* box_extents;
} mc_tensor_want;

/* Since 0.6. Where a group member stands (ConsumerOptions::group): the version its group last
 * switched to, the version it holds verified waiting for the others (0: none), and whether the
 * group lacks members (it then stays on group_version). */
typedef struct mc_group_state {
  uint64_t group_version;
  uint64_t prepared_version;
  int waiting;
} mc_group_state;

/* Since 0.5. A tensor a consumer serves in another dtype, converted once the version is
 * verified: `tensor` is a name, or "*" for every f32, f16 and bf16 tensor not named; `to` is
 * MC_DTYPE_F32, _F16, _BF16 or _F8E4M3; `fp8_block` (f8e4m3 only) is the elements per scale,
 * 0 for one scale per tensor. Rounding: the README's "Serving in another precision". */
typedef struct mc_tensor_conversion {
  const char* tensor;
  mc_dtype to;
  size_t fp8_block;
} mc_tensor_conversion;

typedef struct mc_consumer_stats {
  uint64_t current_version;
  uint64_t versions_installed;
  uint64_t versions_rejected;    /* digest or layout failures */
  uint64_t transfers_aborted;
  uint64_t bad_messages;
  uint64_t reconnects;
  uint64_t bytes_received;
  int64_t last_update_latency_ns; /* publish call until installed here (same-host clocks) */
  int64_t last_notify_latency_ns; /* publish call until announced here */
  char last_error[256];          /* NUL-terminated, truncated if longer; "" if none */
} mc_consumer_stats;

/* One tensor of a held view. Pointers are owned by the view: valid and unchanged until
 * mc_view_release of that view. */
typedef struct mc_tensor_info {
  const char* name;
  mc_dtype dtype;
  size_t ndim;
  const int64_t* shape;          /* ndim extents (may be NULL when ndim is 0) */
  const void* data;              /* read-only bytes */
  size_t size_bytes;
  mc_memory_kind memory;
  int device;
} mc_tensor_info;

/* Fills `options` with the defaults above (and struct_size). Call before setting fields.
 * No-op on NULL; thread-safe; never fails. */
MODELCAST_API void mc_consumer_options_init(mc_consumer_options* options);
MODELCAST_API void mc_consumer_options_init_sized(mc_consumer_options* options, size_t size);
#define mc_consumer_options_init(options) \
  mc_consumer_options_init_sized((options), sizeof *(options) + 0 * sizeof((options)->struct_size))

/* Starts the consumer's threads and begins to join the producer (does not wait for it; a
 * producer that starts later is found). *out gets a consumer the caller owns (mc_consumer_destroy).
 * On error *out is NULL: MC_ERR_INVALID_ARGUMENT (NULL options/out, no endpoint, bad buffers or
 * layout), MC_ERR_STATE (device memory in a process without a device), MC_ERR_TRANSPORT (UCX
 * unusable). */
MODELCAST_API mc_status mc_consumer_create(const mc_consumer_options* options, mc_consumer_t** out);

/* Stops the consumer's threads and frees it; views already acquired stay valid until released.
 * A device consumer whose buffer peers are reading (CUDA IPC) first waits for them, up to its
 * producer_timeout_ms; one stopped mid-transfer waits for the bytes under way, as long again,
 * and where its producer died mid-transfer up to 5 s more (UCX 1.13 keeps a receive it matched
 * going after a cancel: see Consumer::~Consumer). NULL is a no-op. Do not call while another
 * thread uses the consumer. */
MODELCAST_API void mc_consumer_destroy(mc_consumer_t* consumer);

/* *out gets the newest installed version (the caller owns it: mc_view_release), or NULL with
 * MC_OK before the first version. Thread-safe, never blocks on transfers.
 * Errors: MC_ERR_INVALID_ARGUMENT (NULL consumer or out). */
MODELCAST_API mc_status mc_consumer_acquire(const mc_consumer_t* consumer, mc_view_t** out);

/* Waits at most timeout_ms (>= 0) until a version >= `version` is installed; *out gets it
 * (caller owns: mc_view_release). Thread-safe. Errors (*out NULL): MC_ERR_TIMEOUT, MC_ERR_STATE
 * (waits cancelled: mc_consumer_cancel_waits; from a callback of modelcast's, where the wait
 * would block), MC_ERR_INVALID_ARGUMENT (NULL consumer or out, negative timeout). */
MODELCAST_API mc_status mc_consumer_wait_for_version(const mc_consumer_t* consumer, uint64_t version,
                                                     int64_t timeout_ms, mc_view_t** out);

/* Since 0.6. Ends every mc_consumer_wait_for_version under way, and every later one at once,
 * with MC_ERR_STATE; nothing else changes (versions still arrive, mc_consumer_acquire works).
 * For the thread about to destroy a consumer others wait on. Thread-safe.
 * Errors: MC_ERR_INVALID_ARGUMENT (NULL consumer). */
MODELCAST_API mc_status mc_consumer_cancel_waits(mc_consumer_t* consumer);

/* Copies a snapshot of the consumer's counters into *out. Thread-safe.
 * Errors: MC_ERR_INVALID_ARGUMENT (NULL consumer or out). */
MODELCAST_API mc_status mc_consumer_get_stats(const mc_consumer_t* consumer, mc_consumer_stats* out);

/* Since 0.6. Copies where the consumer's group stands into *out (zeros for a consumer in no
 * group). Thread-safe. Errors: MC_ERR_INVALID_ARGUMENT (NULL consumer or out). */
MODELCAST_API mc_status mc_consumer_get_group(const mc_consumer_t* consumer, mc_group_state* out);

/* Since 0.8. The version arriving now into *version (0: none) and, into *bytes, how much of it
 * has landed: the complete part from its start, in bytes. A large transfer's progress (the
 * stats struct has no room for it without breaking callers). Either pointer may be NULL.
 * Thread-safe. Errors: MC_ERR_INVALID_ARGUMENT (NULL consumer). */
MODELCAST_API mc_status mc_consumer_get_arriving(const mc_consumer_t* consumer, uint64_t* version, uint64_t* bytes);

/* ---- views ------------------------------------------------------------------------------ */

/* Releases a view; its tensors' pointers become invalid. The bytes stay unchanged until then,
 * whatever arrives later. NULL is a no-op. Views may be used and released from any thread. */
MODELCAST_API void mc_view_release(mc_view_t* view);

/* The view's version number; 0 if view is NULL. Thread-safe; never fails. */
MODELCAST_API uint64_t mc_view_version(const mc_view_t* view);

/* The step the producer passed to publish; 0 if view is NULL. Thread-safe; never fails. */
MODELCAST_API int64_t mc_view_step(const mc_view_t* view);

/* Number of tensors in the view; 0 if view is NULL. Thread-safe; never fails. */
MODELCAST_API size_t mc_view_tensor_count(const mc_view_t* view);

/* Number of metadata key/value pairs published with this version; 0 if view is NULL.
 * Thread-safe; never fails. */
MODELCAST_API size_t mc_view_metadata_count(const mc_view_t* view);

/* The index-th metadata pair (sorted by key); strings owned by the view, valid until release.
 * Errors: MC_ERR_INVALID_ARGUMENT (NULL view/key/value, index >= count). */
MODELCAST_API mc_status mc_view_metadata_at(const mc_view_t* view, size_t index, const char** key,
                                            const char** value);

/* The value published for `key`, owned by the view (valid until release), or NULL if absent.
 * NULL view or key also give NULL (with last error set). Thread-safe. */
MODELCAST_API const char* mc_view_metadata_get(const mc_view_t* view, const char* key);

/* Fills *out for the tensor called `name` (pointers owned by the view): its first part where the
 * consumer asked for several boxes of it (mc_view_tensor_at lists every part). Thread-safe.
 * Errors: MC_ERR_INVALID_ARGUMENT (NULL view/name/out, no tensor of that name). */
MODELCAST_API mc_status mc_view_find_tensor(const mc_view_t* view, const char* name, mc_tensor_info* out);

/* Fills *out for the index-th tensor in the producer's registration order (pointers owned by
 * the view). Thread-safe. Errors: MC_ERR_INVALID_ARGUMENT (NULL view/out, index >= count). */
MODELCAST_API mc_status mc_view_tensor_at(const mc_view_t* view, size_t index, mc_tensor_info* out);

/* Since 0.5. The fp8 scales of the index-th tensor (an f8e4m3 tensor the consumer converted):
 * element i is its code's value times (*scales)[i / *scale_block], or times (*scales)[0] when
 * *scale_block is 0. Other tensors: *scales NULL, *count 0. Pointers owned by the view.
 * Errors: MC_ERR_INVALID_ARGUMENT (NULL argument, index >= count). */
MODELCAST_API mc_status mc_view_tensor_scales(const mc_view_t* view, size_t index, const float** scales,
                                              size_t* count, size_t* scale_block);

/* Since 0.7. Where the index-th view lies in its tensor, for a consumer that keeps parts
 * (mc_consumer_options.wants): *ndim dimensions, the part starting at (*offset)[d] of a whole
 * tensor of shape (*whole_shape)[d]; the view's own shape is the part's extent. A whole tensor:
 * *offset and *whole_shape NULL, *ndim 0. Pointers owned by the view.
 * Errors: MC_ERR_INVALID_ARGUMENT (NULL argument, index >= count). */
MODELCAST_API mc_status mc_view_tensor_box(const mc_view_t* view, size_t index, const int64_t** offset,
                                           const int64_t** whole_shape, size_t* ndim);

#ifdef __cplusplus
} /* extern "C" */
#endif

/* The rest of the C ABI, in headers of their own. */
#include "modelcast/modelcast_runtime.h"   /* mc_version, mc_set_log_handler, mc_set_log_level */
#include "modelcast/modelcast_scheduler.h" /* the online publish scheduler */

#endif /* MODELCAST_MODELCAST_H */
