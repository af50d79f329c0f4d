// A host consumer's conversions (ConsumerOptions::conversions): after a version is verified,
// the tensors it names are converted into memory of their own, which the installed version then
// holds beside its receive buffer. The receive buffer keeps the producer's bytes, so deltas,
// relays and digests work on what the producer signed.
//
// Threads: the consumer's service thread only. Converted memory is shared with installed
// versions; a piece is reused for a later version only when no view holds it.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "common/host_buffer.h"
#include "core/model/installed_version.h"
#include "core/model/manifest.h"
#include "modelcast/consumer.h"

namespace modelcast::consumer {

class TensorConverter {
 public:
  // Throws Error(kInvalidArgument) for a conversion that can never apply: no tensor name, a
  // target other than f32, f16, bf16 or f8e4m3, fp8_block without f8e4m3, a name given twice.
  explicit TensorConverter(std::vector<TensorConversion> conversions);

  bool empty() const noexcept { return conversions_.empty(); }

  // Converts the tensors of `manifest` (bytes at `base`) that a conversion names into
  // `version` (its `converted` and `converted_memory`). Throws Error(kLayoutMismatch) naming
  // the tensor when a named one is absent or is not f32, f16 or bf16; std::bad_alloc when
  // memory for the result cannot be had. `version` is untouched then.
  void apply(const Manifest& manifest, const std::byte* base, detail::InstalledVersion& version);

 private:
  const TensorConversion* conversion_for(const TensorSpec& spec) const;
  std::shared_ptr<HostBuffer> free_memory(std::size_t bytes);

  std::vector<TensorConversion> conversions_;
  const TensorConversion* wildcard_ = nullptr;  // the "*" conversion, if any
  std::vector<std::shared_ptr<HostBuffer>> pool_;  // free when only the pool refers to one
};

}  // namespace modelcast::consumer
