#include "sidecar_c_callers.h"

#include <stdio.h>

#include "modelcast/sidecar_c.h"

int sidecar_c_sum(const char* socket, const char* model, int64_t connect_timeout_ms, uint64_t version, uint64_t* version_out,
                  size_t* tensors_out, uint64_t* sum_out, char* error, size_t error_size) {
  mcs_client_t* client = NULL;
  mcs_view_t* view = NULL;
  mc_status status = mcs_client_open(socket, model, connect_timeout_ms, &client);
  if (status == MC_OK) status = mcs_wait_for_version(client, version, 30000, &view);
  if (status == MC_OK) {
    *version_out = mcs_view_version(view);
    *tensors_out = mcs_view_tensor_count(view);
    *sum_out = 0;
    for (size_t i = 0; i < *tensors_out && status == MC_OK; ++i) {
      mc_tensor_info info;
      status = mcs_view_tensor_at(view, i, &info);
      for (size_t b = 0; status == MC_OK && b < info.size_bytes; ++b) *sum_out += ((const unsigned char*)info.data)[b];
    }
  }
  if (status != MC_OK) snprintf(error, error_size, "%s", mcs_last_error());
  mcs_view_release(view);
  mcs_client_close(client);
  return (int)status;
}
