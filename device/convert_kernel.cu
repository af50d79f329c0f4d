// Device-side dtype conversion and fp8 quantization (convert_kernel.h). The element arithmetic
// is device/element_format.h's, as on a host consumer, so the results are the same bits.
#include <cuda_runtime.h>

#include "device/element_format.h"
#include "device/convert_kernel.h"

namespace modelcast::device::kernels {
namespace {

constexpr unsigned kThreads = 256;
constexpr std::size_t kChunk = std::size_t{kThreads} * 16;  // elements one amax block reduces

template <Element From>
__device__ __forceinline__ float load(const void* src, std::size_t i) {
  if constexpr (From == Element::kF32) return static_cast<const float*>(src)[i];
  if constexpr (From == Element::kF16) return element::f16_to_f32(static_cast<const std::uint16_t*>(src)[i]);
  return element::bf16_to_f32(static_cast<const std::uint16_t*>(src)[i]);
}

template <Element To>
__device__ __forceinline__ void store(void* dst, std::size_t i, float value) {
  if constexpr (To == Element::kF32) {
    static_cast<float*>(dst)[i] = value;
  } else if constexpr (To == Element::kF16) {
    static_cast<std::uint16_t*>(dst)[i] = element::f32_to_f16(value);
  } else {
    static_cast<std::uint16_t*>(dst)[i] = element::f32_to_bf16(value);
  }
}

template <Element From, Element To>
__global__ void __launch_bounds__(kThreads) convert_kernel(void* dst, const void* src, std::size_t count) {
  const std::size_t stride = std::size_t{gridDim.x} * blockDim.x;
  for (std::size_t i = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < count; i += stride) {
    store<To>(dst, i, load<From>(src, i));
  }
}

// Grid: (chunks per scale block, scale blocks). Each CUDA block reduces one chunk of one scale
// block and max-es it into that block's amax.
template <Element From>
__global__ void __launch_bounds__(kThreads) amax_kernel(const void* src, std::size_t count, std::size_t per,
                                                         std::uint32_t* amax_bits) {
  const std::size_t block = blockIdx.y;
  const std::size_t begin = block * per + std::size_t{blockIdx.x} * kChunk;
  std::size_t end = block * per + per;
  if (end > count) end = count;
  if (begin + kChunk < end) end = begin + kChunk;
  std::uint32_t m = 0;
  for (std::size_t i = begin + threadIdx.x; i < end; i += kThreads) {
    const std::uint32_t bits = element::bits_of(element::finite_magnitude(load<From>(src, i)));
    m = bits > m ? bits : m;
  }
  for (int offset = 16; offset > 0; offset >>= 1) {
    const std::uint32_t other = __shfl_down_sync(0xffffffffu, m, offset);
    m = other > m ? other : m;
  }
  if ((threadIdx.x & 31u) == 0 && m != 0) atomicMax(amax_bits + block, m);
}

template <Element From>
__global__ void __launch_bounds__(kThreads) quantize_kernel(std::uint8_t* dst, const void* src, std::size_t count,
                                                             std::size_t per, const std::uint32_t* amax_bits,
                                                             float* scales) {
  const std::size_t stride = std::size_t{gridDim.x} * blockDim.x;
  for (std::size_t i = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < count; i += stride) {
    const std::size_t block = i / per;
    const float scale = element::fp8_scale(element::float_of(amax_bits[block]));
    if (i == block * per) scales[block] = scale;
    dst[i] = element::f8e4m3_quantize(load<From>(src, i), scale);
  }
}

unsigned grid_for(std::size_t count) {
  const std::size_t blocks = (count + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65536 ? (blocks == 0 ? 1 : blocks) : 65536);  // grid-stride beyond
}

template <Element From>
int convert_from(void* dst, Element to, const void* src, std::size_t count, CUstream_st* stream) {
  const unsigned grid = grid_for(count);
  switch (to) {
    case Element::kF32: convert_kernel<From, Element::kF32><<<grid, kThreads, 0, stream>>>(dst, src, count); break;
    case Element::kF16: convert_kernel<From, Element::kF16><<<grid, kThreads, 0, stream>>>(dst, src, count); break;
    case Element::kBF16: convert_kernel<From, Element::kBF16><<<grid, kThreads, 0, stream>>>(dst, src, count); break;
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int launch_convert(void* dst, Element to, const void* src, Element from, std::size_t count, CUstream_st* stream) {
  if (count == 0) return static_cast<int>(cudaSuccess);
  switch (from) {
    case Element::kF32: return convert_from<Element::kF32>(dst, to, src, count, stream);
    case Element::kF16: return convert_from<Element::kF16>(dst, to, src, count, stream);
    case Element::kBF16: return convert_from<Element::kBF16>(dst, to, src, count, stream);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

int launch_block_amax(const void* src, Element from, std::size_t count, std::size_t per, std::uint32_t* amax_bits,
                      CUstream_st* stream) {
  if (count == 0) return static_cast<int>(cudaSuccess);
  const std::size_t blocks = count / per + (count % per != 0);
  const std::size_t span = per < count ? per : count;  // elements of the largest scale block
  const std::size_t chunks = (span + kChunk - 1) / kChunk;
  if (blocks > 65535 * 65535ull || chunks > 0x7fffffffull) return static_cast<int>(cudaErrorInvalidConfiguration);
  // gridDim.y is at most 65535: more scale blocks go in several launches.
  for (std::size_t first = 0; first < blocks; first += 65535) {
    const std::size_t n = blocks - first < 65535 ? blocks - first : 65535;
    const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>(n));
    const auto* base = static_cast<const unsigned char*>(src);
    const std::size_t element = from == Element::kF32 ? 4 : 2;
    const std::size_t skip = first * per;
    switch (from) {
      case Element::kF32:
        amax_kernel<Element::kF32><<<grid, kThreads, 0, stream>>>(base + skip * element, count - skip, per, amax_bits + first);
        break;
      case Element::kF16:
        amax_kernel<Element::kF16><<<grid, kThreads, 0, stream>>>(base + skip * element, count - skip, per, amax_bits + first);
        break;
      case Element::kBF16:
        amax_kernel<Element::kBF16><<<grid, kThreads, 0, stream>>>(base + skip * element, count - skip, per, amax_bits + first);
        break;
    }
    if (const cudaError_t status = cudaGetLastError(); status != cudaSuccess) return static_cast<int>(status);
  }
  return static_cast<int>(cudaSuccess);
}

int launch_quantize_fp8(std::uint8_t* dst, const void* src, Element from, std::size_t count, std::size_t per,
                        const std::uint32_t* amax_bits, float* scales, CUstream_st* stream) {
  if (count == 0) return static_cast<int>(cudaSuccess);
  const unsigned grid = grid_for(count);
  switch (from) {
    case Element::kF32:
      quantize_kernel<Element::kF32><<<grid, kThreads, 0, stream>>>(dst, src, count, per, amax_bits, scales);
      break;
    case Element::kF16:
      quantize_kernel<Element::kF16><<<grid, kThreads, 0, stream>>>(dst, src, count, per, amax_bits, scales);
      break;
    case Element::kBF16:
      quantize_kernel<Element::kBF16><<<grid, kThreads, 0, stream>>>(dst, src, count, per, amax_bits, scales);
      break;
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace modelcast::device::kernels
