/* Calls into the C ABI the way only C can: with int values outside the C enums' enumerators
 * (legal in C, undefined if written as an enum cast in C++). Also proves modelcast.h compiles
 * as C inside the test binary. */
#include "c_callers.h"

mc_status abi_register_with_dtype(mc_producer_t* producer, const char* name, int dtype, size_t ndim,
                                  const int64_t* shape, const void* data) {
  return mc_producer_register_tensor(producer, name, (mc_dtype)dtype, ndim, shape, data);
}

mc_status abi_register_desc_with_memory(mc_producer_t* producer, const char* name, int memory, size_t ndim,
                                        const int64_t* shape, const void* data) {
  mc_tensor_desc desc;
  mc_tensor_desc_init(&desc);
  desc.name = name;
  desc.ndim = ndim;
  desc.shape = shape;
  desc.data = data;
  desc.memory = (mc_memory_kind)memory;
  return mc_producer_register_tensor_desc(producer, &desc);
}

void abi_set_desc_dtype(mc_tensor_desc* desc, int dtype) { desc->dtype = (mc_dtype)dtype; }

const char* abi_dtype_name(int dtype) { return mc_dtype_name((mc_dtype)dtype); }

size_t abi_dtype_size(int dtype) { return mc_dtype_size((mc_dtype)dtype); }

const char* abi_status_name(int status) { return mc_status_name((mc_status)status); }
