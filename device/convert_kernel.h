// The kernels behind DeviceRuntime's device-side shaping on CUDA (convert_kernel.cu): dtype
// conversion and fp8 quantization with device/element_format.h's arithmetic. Host-callable
// launchers, no CUDA type in sight: each returns a cudaError_t as int (0: launched).
#pragma once

#include <cstddef>
#include <cstdint>

struct CUstream_st;

namespace modelcast::device::kernels {

// Element formats the kernels know.
enum class Element : int { kF32 = 0, kF16 = 1, kBF16 = 2 };

// `count` elements at `src` (`from`) into `dst` (`to`).
int launch_convert(void* dst, Element to, const void* src, Element from, std::size_t count, CUstream_st* stream);

// Per scale block of `per` elements: the bits of its largest finite magnitude, max-ed into
// `amax_bits[block]` (zeroed by the caller; magnitudes order as their bit patterns).
int launch_block_amax(const void* src, Element from, std::size_t count, std::size_t per, std::uint32_t* amax_bits,
                      CUstream_st* stream);

// fp8 e4m3 codes of `count` elements with the scale of each block (fp8_scale of its amax), and
// each block's scale into `scales`.
int launch_quantize_fp8(std::uint8_t* dst, const void* src, Element from, std::size_t count, std::size_t per,
                        const std::uint32_t* amax_bits, float* scales, CUstream_st* stream);

}  // namespace modelcast::device::kernels
