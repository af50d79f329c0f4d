/* See c_callers.c. */
#ifndef MODELCAST_TESTS_ABI_C_CALLERS_H
#define MODELCAST_TESTS_ABI_C_CALLERS_H

#include "modelcast/modelcast.h"

#ifdef __cplusplus
extern "C" {
#endif

mc_status abi_register_with_dtype(mc_producer_t* producer, const char* name, int dtype, size_t ndim,
                                  const int64_t* shape, const void* data);
mc_status abi_register_desc_with_memory(mc_producer_t* producer, const char* name, int memory, size_t ndim,
                                        const int64_t* shape, const void* data);
void abi_set_desc_dtype(mc_tensor_desc* desc, int dtype);
const char* abi_dtype_name(int dtype);
size_t abi_dtype_size(int dtype);
const char* abi_status_name(int status);

#ifdef __cplusplus
}
#endif

#endif
