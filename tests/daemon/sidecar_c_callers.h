// C callers of the sidecar C ABI (compiled as C, so the header is checked as a C header).
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Attaches (retrying for connect_timeout_ms), waits for `version`, and reports the version, tensor count and a byte sum of every
// tensor, then releases everything. Returns the first failing mc_status (0 on success) and
// copies mcs_last_error() into `error`.
int sidecar_c_sum(const char* socket, const char* model, int64_t connect_timeout_ms, uint64_t version, uint64_t* version_out,
                  size_t* tensors_out, uint64_t* sum_out, char* error, size_t error_size);

#ifdef __cplusplus
}
#endif
