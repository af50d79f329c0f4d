/* C ABI of the sidecar client (modelcast/sidecar.h): attach to modelcastd from C or Fortran.
 * Same conventions as modelcast.h: every call that can fail returns an mc_status and leaves the
 * reason in mcs_last_error() (per thread); views are released with mcs_view_release. Link
 * libmodelcast_sidecar. Of modelcast.h, included for mc_status and mc_dtype, that library has
 * mc_status_name, mc_dtype_name and mc_dtype_size; the rest (mc_last_error, mc_set_log_level,
 * the producer and consumer) is libmodelcast's, which a sidecar client need not link. */
#ifndef MODELCAST_SIDECAR_C_H
#define MODELCAST_SIDECAR_C_H

#include <stddef.h>
#include <stdint.h>

#include "modelcast/modelcast.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mcs_client mcs_client_t; /* opaque: one connection to the daemon */
typedef struct mcs_view mcs_view_t;     /* opaque: one held, immutable, read-only version */

/* Text of this thread's last failed mcs_ call ("" if none). Valid until the thread's next call. */
MODELCAST_API const char* mcs_last_error(void);

/* Connects to the daemon at `socket_path` for `model`, retrying for up to connect_timeout_ms
 * (0: once; a daemon whose queue of connections to accept is full, for a second at least).
 * *out gets a client the caller owns (mcs_client_close). Errors (*out NULL):
 * MC_ERR_INVALID_ARGUMENT, MC_ERR_TRANSPORT, MC_ERR_AUTHENTICATION (the listener is another user's:
 * see modelcast::sidecar::Client). Thread-safe. */
MODELCAST_API mc_status mcs_client_open(const char* socket_path, const char* model, int64_t connect_timeout_ms,
                                        mcs_client_t** out);
/* Closes the client; views it handed out stay valid until released. Calls already under way
 * on other threads end as they would have (a wait at its version or its timeout); a call begun
 * as or after the client is closed is the caller's error (as with free). NULL is a no-op. */
MODELCAST_API void mcs_client_close(mcs_client_t* client);

/* *out gets the newest version (caller owns: mcs_view_release), or NULL before the first.
 * A restarted daemon is reconnected to (for up to 10 s, as ClientOptions::reconnect_timeout);
 * views held from before stay valid. Errors: MC_ERR_TRANSPORT (daemon gone for longer),
 * MC_ERR_INVALID_ARGUMENT (no model of that name configured; one whose start failed and is
 * tried again gives NULL, as before its first version). */
MODELCAST_API mc_status mcs_acquire(const mcs_client_t* client, mcs_view_t** out);
/* Waits for a version >= `version`: MC_OK with *out set, or MC_ERR_TIMEOUT with *out NULL.
 * Reconnects like mcs_acquire. Other threads' calls on the same client do not wait for it (each
 * call in flight has a connection of its own). Unlike modelcast.h's waits, it is no place for
 * pthread_cancel: cancellation is held off in every mcs_ call (the answer must be read from the
 * daemon's connection), so a cancel acts once the wait has returned: after timeout_ms, plus up
 * to about 10 s more while the daemon restarts or does not answer (mcs_client_open: after
 * connect_timeout_ms), counted from when each call began to reconnect, so calls waiting
 * when the daemon went give up together. */
MODELCAST_API mc_status mcs_wait_for_version(const mcs_client_t* client, uint64_t version, int64_t timeout_ms,
                                             mcs_view_t** out);

/* Releases the hold; pointers from this view become invalid. NULL is a no-op. */
MODELCAST_API void mcs_view_release(mcs_view_t* view);
MODELCAST_API uint64_t mcs_view_version(const mcs_view_t* view);
MODELCAST_API int64_t mcs_view_step(const mcs_view_t* view);
MODELCAST_API size_t mcs_view_tensor_count(const mcs_view_t* view);
/* Tensor by position or name; pointers in *out are owned by the view. MC_ERR_INVALID_ARGUMENT
 * for an index out of range or an unknown name. */
MODELCAST_API mc_status mcs_view_tensor_at(const mcs_view_t* view, size_t index, mc_tensor_info* out);
MODELCAST_API mc_status mcs_view_find_tensor(const mcs_view_t* view, const char* name, mc_tensor_info* out);
/* As mc_view_tensor_scales and mc_view_tensor_box, for a model the daemon converts or keeps parts
 * of ([model.convert], [model.wants]). MC_ERR_INVALID_ARGUMENT for a NULL argument or an index
 * out of range. */
MODELCAST_API mc_status mcs_view_tensor_scales(const mcs_view_t* view, size_t index, const float** scales,
                                               size_t* count, size_t* scale_block);
MODELCAST_API mc_status mcs_view_tensor_box(const mcs_view_t* view, size_t index, const int64_t** offset,
                                            const int64_t** whole_shape, size_t* ndim);
/* The value of metadata `key`, or NULL if absent; owned by the view. A NULL argument, or memory
 * that ran out, also gives NULL, with the last error set. */
MODELCAST_API const char* mcs_view_metadata_get(const mcs_view_t* view, const char* key);

#ifdef __cplusplus
}
#endif

#endif
