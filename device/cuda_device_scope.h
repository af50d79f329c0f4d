// Makes a CUDA device current for one call and restores the caller's: the trainer's current
// device is its business. Include only where MODELCAST_HAVE_CUDA (it needs the CUDA runtime).
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "modelcast/error.h"

namespace modelcast::device {

class CudaDeviceScope {
 public:
  explicit CudaDeviceScope(int device) {
    fail_unless(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != device) fail_unless(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")");
  }
  ~CudaDeviceScope() { cudaSetDevice(previous_); }
  CudaDeviceScope(const CudaDeviceScope&) = delete;
  CudaDeviceScope& operator=(const CudaDeviceScope&) = delete;

 private:
  static void fail_unless(cudaError_t status, const std::string& what) {
    if (status != cudaSuccess) {
      throw Error(ErrorCode::kTransport, "CUDA: " + what + " failed: " + cudaGetErrorName(status) + ": " +
                                             cudaGetErrorString(status));
    }
  }
  int previous_ = 0;
};

}  // namespace modelcast::device
