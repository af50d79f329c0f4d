#include "transports/staging/cuda_copy_engine.h"

#include <string>
#include <utility>

#include "modelcast/error.h"

#if MODELCAST_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace modelcast::staging {

#if MODELCAST_HAVE_CUDA
namespace {

std::string cuda_text(cudaError_t status) {
  return std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status);
}

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw Error(ErrorCode::kTransport, std::string("CUDA ") + what + " failed: " + cuda_text(status));
}

// Keeps the caller's current device unchanged around our calls.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    check(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != device) check(cudaSetDevice(device), "cudaSetDevice");
  }
  ~DeviceScope() { cudaSetDevice(previous_); }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
};

void CUDART_CB on_copied(cudaStream_t, cudaError_t status, void* user) {
  std::unique_ptr<Done> done(static_cast<Done*>(user));
  if (status == cudaSuccess) {
    (*done)(true, {});
  } else {
    // No CUDA call is allowed here, cudaGetErrorName included: the code alone.
    (*done)(false, "CUDA copy failed: cudaError_t " + std::to_string(static_cast<int>(status)));
  }
}

}  // namespace

CudaCopyEngine::CudaCopyEngine(int device, CUstream_st* stream) : device_(device), stream_(stream) {
  if (stream_ == nullptr) {
    DeviceScope scope(device_);
    cudaStream_t created = nullptr;
    check(cudaStreamCreateWithFlags(&created, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    stream_ = created;
    owns_stream_ = true;
  }
}

CudaCopyEngine::~CudaCopyEngine() {
  cudaStreamSynchronize(stream_);
  if (owns_stream_) cudaStreamDestroy(stream_);
}

void CudaCopyEngine::copy(void* dst, const void* src, std::size_t size, Done done) {
  DeviceScope scope(device_);
  check(cudaMemcpyAsync(dst, src, size, cudaMemcpyDefault, stream_), "cudaMemcpyAsync");
  auto holder = std::make_unique<Done>(std::move(done));
  const cudaError_t added = cudaStreamAddCallback(stream_, on_copied, holder.get(), 0);
  if (added != cudaSuccess) {
    // The copy is queued but nobody will hear of its end: let it finish before reporting that
    // nothing was started, so the caller may reuse the buffers at once.
    cudaStreamSynchronize(stream_);
    check(added, "cudaStreamAddCallback");
  }
  holder.release();  // the callback owns it now
}

#else  // !MODELCAST_HAVE_CUDA

CudaCopyEngine::CudaCopyEngine(int device, CUstream_st* stream) : device_(device), stream_(stream) {
  throw Error(ErrorCode::kState, "modelcast was built without CUDA: no CUDA copy engine");
}
CudaCopyEngine::~CudaCopyEngine() = default;
void CudaCopyEngine::copy(void*, const void*, std::size_t, Done) {
  throw Error(ErrorCode::kState, "modelcast was built without CUDA: no CUDA copy engine");
}

#endif

}  // namespace modelcast::staging
