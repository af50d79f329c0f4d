// What a consumer's views hold of each tensor of a verified version: the tensors and parts it
// wants (ConsumerOptions::wants, resolved into a TensorSelection) in the dtypes it asks for
// (ConsumerOptions::conversions). A whole tensor, or a part that is one contiguous run of it, in
// the producer's dtype stays where it arrived (the receive buffer, or a device consumer's copy of
// the version); every other part is gathered (and converted) into memory of the version's own:
// host memory, or, for a device consumer, device memory, the work done on the device
// (DeviceRuntime's gather, convert and quantize, whose arithmetic is the host's: the same bits).
// The received bytes stay the producer's, so deltas, relays and digests work on what it signed.
//
// Threads: the consumer's service thread only. Shaped memory is shared with installed versions;
// a piece is reused for a later version only when no view holds it.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "common/host_buffer.h"
#include "device/device_runtime.h"
#include "core/model/installed_version.h"
#include "core/model/manifest.h"
#include "core/model/tensor_selection.h"
#include "modelcast/consumer.h"

namespace modelcast::consumer {

// Converts `count` elements of dtype `from` (f32, f16 or bf16) at `src` into `dst` as
// `conversion` asks; an f8e4m3 target sets `scales` and `scale_block` (view.scales' meaning).
void convert_elements(DType from, const std::byte* src, const TensorConversion& conversion, std::byte* dst,
                      std::size_t count, std::vector<float>& scales, std::size_t& scale_block);

class TensorShaper {
 public:
  // Throws Error(kInvalidArgument) for a conversion that can never apply: no tensor name, a
  // target other than f32, f16, bf16 or f8e4m3, fp8_block without f8e4m3, a name given twice.
  explicit TensorShaper(std::vector<TensorConversion> conversions);

  // Whether views are always the manifest's tensors as they arrived (no conversions, and a
  // selection that keeps everything whole).
  bool leaves_as_is(const TensorSelection& selection) const noexcept {
    return conversions_.empty() && selection.everything();
  }

  // Fills `version`'s views (and shaped memory) with what `selection` keeps of `manifest`
  // (bytes at `base`), converted as asked. Throws Error(kLayoutMismatch) naming the tensor when a
  // named conversion's tensor is absent or is not f32, f16 or bf16; std::bad_alloc when memory
  // for the result cannot be had. `version` is untouched then.
  void apply(const Manifest& manifest, const TensorSelection& selection, const std::byte* base,
             detail::InstalledVersion& version);

  // Where a device consumer's versions are shaped: its device and the stream its copies of the
  // version are ordered on.
  struct OnDevice {
    device::DeviceRuntime* runtime = nullptr;
    int device = 0;
    device::StreamHandle stream = nullptr;
  };
  // The same for a version whose bytes are device memory at `base`; the shaped memory is device
  // memory too (version.shaped_device). Returns once the device has done the work. Also throws
  // Error(kTransport or kResource) for a device failure.
  void apply(const Manifest& manifest, const TensorSelection& selection, const std::byte* base,
             detail::InstalledVersion& version, const OnDevice& on);

  // The conversion that applies to a tensor of `spec` (named, or "*" for a float), or nullptr.
  const TensorConversion* conversion_for(const TensorSpec& spec) const;
  // The conversions as given (checked at construction).
  const std::vector<TensorConversion>& conversions() const noexcept { return conversions_; }

 private:
  struct Planned;
  // The views of `manifest` that `selection` keeps and where their bytes go (the shaped memory's
  // size in `bytes`); throws for conversions that cannot apply, before any work.
  std::vector<Planned> plan(const Manifest& manifest, const TensorSelection& selection, std::size_t& bytes) const;
  static void install(std::vector<Planned>& planned, detail::InstalledVersion& version);
  std::shared_ptr<HostBuffer> free_memory(std::size_t bytes);
  std::shared_ptr<detail::DeviceBuffer> free_device_memory(const OnDevice& on, std::size_t bytes);

  std::vector<TensorConversion> conversions_;
  const TensorConversion* wildcard_ = nullptr;  // the "*" conversion, if any
  std::vector<std::shared_ptr<HostBuffer>> pool_;  // free when only the pool refers to one
  std::vector<std::byte> gathered_;  // a part of several runs, gathered before fp8 scaling
  std::vector<std::shared_ptr<detail::DeviceBuffer>> device_pool_;  // as pool_, for device consumers
  std::shared_ptr<detail::DeviceBuffer> device_gathered_;           // as gathered_, on the device
};

}  // namespace modelcast::consumer
