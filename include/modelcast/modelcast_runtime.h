/* modelcast C ABI: the library version and log routing, for C and Fortran callers. Part of modelcast.h (which includes it); conventions as there. */
#ifndef MODELCAST_MODELCAST_RUNTIME_H
#define MODELCAST_MODELCAST_RUNTIME_H

#include "modelcast/modelcast.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- version ---------------------------------------------------------------------------- */

/* The loaded library's version, e.g. "0.1.0" (compare with MODELCAST_VERSION_STRING from
 * modelcast/version.h, the version a program was compiled against). Static storage;
 * thread-safe; never fails. */
MODELCAST_API const char* mc_version_string(void);

/* The loaded library's version numbers and its ABI version: the SONAME's numbers
 * (libmodelcast.so.<abi_major>.<abi_minor> while the major version is 0, when every minor
 * release may change the ABI; libmodelcast.so.<abi_major> from 1.0 on, abi_minor then 0).
 * Any pointer may be NULL. Thread-safe; never fails. */
MODELCAST_API void mc_version(int* major, int* minor, int* patch, int* abi_major, int* abi_minor);

/* ---- logging ---------------------------------------------------------------------------- */

/* Mirrors spdlog's levels numerically. */
typedef enum mc_log_level {
  MC_LOG_TRACE = 0,
  MC_LOG_DEBUG = 1,
  MC_LOG_INFO = 2,
  MC_LOG_WARN = 3,
  MC_LOG_ERROR = 4,
  MC_LOG_CRITICAL = 5,
  MC_LOG_OFF = 6
} mc_log_level;

/* Receives one log message: `component` ("modelcast.producer", ...) and `message` are
 * NUL-terminated and valid during the call only. */
typedef void (*mc_log_fn)(mc_log_level level, const char* component, const char* message, void* user_data);

/* Routes modelcast's log messages to `handler` (with `user_data`) instead of stderr; NULL goes
 * back to stderr. Threads: the handler runs on whichever modelcast thread logs (the caller's,
 * a service thread, the UCX progress thread), but never on two at once: calls are serialised
 * by a lock held while it runs. So it must return quickly and must not call into modelcast
 * (mc_set_log_handler, or any call that may log, would deadlock): copy the message and hand it
 * to the program's own logging. Once this function returns, the previous handler is not
 * running and is not called again. Thread-safe; never fails (returns MC_OK). */
MODELCAST_API mc_status mc_set_log_handler(mc_log_fn handler, void* user_data);

/* Sets the level of every modelcast logger, present and future (overriding
 * MODELCAST_LOG_LEVEL). Thread-safe. Errors: MC_ERR_INVALID_ARGUMENT (not an mc_log_level). */
MODELCAST_API mc_status mc_set_log_level(mc_log_level level);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* MODELCAST_MODELCAST_RUNTIME_H */
