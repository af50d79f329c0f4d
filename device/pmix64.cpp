// Host side of pmix64 (see pmix64.h): the reference, segment planning and the launch wrapper.
// Compiled by the host compiler; CUDA runtime calls only under MODELCAST_HAVE_CUDA.
#include "device/pmix64.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#include "device/pmix64_mix.h"
#include "modelcast/error.h"

#if MODELCAST_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace modelcast::pmix64 {

std::uint64_t digest_host(const void* data, std::size_t size) noexcept {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint64_t sum = 0;
  std::uint64_t index = 0;
  std::size_t at = 0;
  for (; at + 8 <= size; at += 8, ++index) {
    std::uint64_t w;
    std::memcpy(&w, p + at, 8);  // little-endian hosts only (x86-64, aarch64), as the GPU
    sum += term(index, w);
  }
  if (at < size) {
    std::uint64_t w = 0;
    std::memcpy(&w, p + at, size - at);
    sum += term(index, w);
  }
  return finish(sum, size);
}

std::vector<Segment> plan_segments(std::span<const Range> tensors) {
  std::vector<Segment> segments;
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    for (std::uint64_t at = 0; at < tensors[t].size; at += kSegmentBytes) {
      Segment s;
      s.offset = tensors[t].offset + at;
      s.bytes = std::min(kSegmentBytes, tensors[t].size - at);
      s.first_word = at / 8;
      s.tensor = static_cast<std::uint32_t>(t);
      segments.push_back(s);
    }
  }
  return segments;
}

#if MODELCAST_HAVE_CUDA

bool device_digest_available() noexcept { return true; }

namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw Error(ErrorCode::kTransport, std::string("pmix64: ") + what + " failed: " + cudaGetErrorName(status) +
                                           ": " + cudaGetErrorString(status));
  }
}

}  // namespace

std::vector<std::uint64_t> digest_device(int device, const void* base, std::span<const Range> tensors,
                                         CUstream_st* stream) {
  const std::vector<Segment> segments = plan_segments(tensors);
  if (segments.size() > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
    throw Error(ErrorCode::kInvalidArgument, "pmix64: too many segments for one launch");
  }
  std::vector<unsigned long long> sums(tensors.size(), 0);
  if (!segments.empty()) {
    int previous = 0;
    check(cudaGetDevice(&previous), "cudaGetDevice");
    check(cudaSetDevice(device), "cudaSetDevice");
    struct Restore {
      int device;
      ~Restore() { cudaSetDevice(device); }
    } restore{previous};
    // Stream-ordered scratch: no device-wide synchronisation, freed in stream order.
    void* scratch = nullptr;
    const std::size_t segment_bytes = segments.size() * sizeof(Segment);
    const std::size_t sum_bytes = sums.size() * sizeof(unsigned long long);
    check(cudaMallocAsync(&scratch, segment_bytes + sum_bytes, stream), "cudaMallocAsync");
    auto* device_segments = static_cast<Segment*>(scratch);
    auto* device_sums = reinterpret_cast<unsigned long long*>(static_cast<char*>(scratch) + segment_bytes);
    cudaError_t status = cudaMemcpyAsync(device_segments, segments.data(), segment_bytes, cudaMemcpyHostToDevice, stream);
    if (status == cudaSuccess) status = cudaMemsetAsync(device_sums, 0, sum_bytes, stream);
    if (status == cudaSuccess) {
      status = static_cast<cudaError_t>(detail::launch_segments(base, device_segments, segments.size(), device_sums, stream));
    }
    if (status == cudaSuccess) status = cudaMemcpyAsync(sums.data(), device_sums, sum_bytes, cudaMemcpyDeviceToHost, stream);
    cudaFreeAsync(scratch, stream);
    if (status == cudaSuccess) status = cudaStreamSynchronize(stream);
    else cudaStreamSynchronize(stream);  // `sums` and `segments` must not be in use when we throw
    check(status, "digest kernel");
  }
  std::vector<std::uint64_t> digests(tensors.size());
  for (std::size_t t = 0; t < tensors.size(); ++t) digests[t] = finish(sums[t], tensors[t].size);
  return digests;
}

#else  // !MODELCAST_HAVE_CUDA

bool device_digest_available() noexcept { return false; }

std::vector<std::uint64_t> digest_device(int, const void*, std::span<const Range>, CUstream_st*) {
  throw Error(ErrorCode::kState, "modelcast was built without CUDA: no device digest");
}

#endif

}  // namespace modelcast::pmix64
