// CopyEngine on a CUDA stream, for the staged path: device->pinned host (producer's fill) and
// pinned host->device (consumer's drain). Compiled with the host compiler against the CUDA
// runtime; without CUDA (MODELCAST_HAVE_CUDA=0) the constructor throws Error(kState).
//
// Each copy is cudaMemcpyAsync(cudaMemcpyDefault) on the engine's stream followed by
// cudaStreamAddCallback, whose callback runs exactly once, also when the stream failed (then
// with the error) -- unlike cudaLaunchHostFunc, which is skipped after a device error and would
// leave the pipeline waiting forever. The callback only calls `done` (which queues an event):
// no CUDA call happens in it.
#pragma once

#include <memory>

#include "transports/staging/staging_pipeline.h"

struct CUstream_st;  // cudaStream_t without including the CUDA headers

namespace modelcast::staging {

class CudaCopyEngine final : public CopyEngine {
 public:
  // Copies run on `device`. With `stream` == nullptr the engine creates its own non-blocking
  // stream (destroyed with it); otherwise it uses the caller's, which must outlive it.
  explicit CudaCopyEngine(int device, CUstream_st* stream = nullptr);
  ~CudaCopyEngine() override;  // synchronises its stream: no callback runs after it
  CudaCopyEngine(const CudaCopyEngine&) = delete;
  CudaCopyEngine& operator=(const CudaCopyEngine&) = delete;

  void copy(void* dst, const void* src, std::size_t size, Done done) override;
  CUstream_st* stream() const { return stream_; }

 private:
  int device_;
  CUstream_st* stream_ = nullptr;
  bool owns_stream_ = false;
};

}  // namespace modelcast::staging
