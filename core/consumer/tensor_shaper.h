// What a consumer's views hold of each tensor of a verified version: the tensors and parts it
// wants (ConsumerOptions::wants, resolved into a TensorSelection) in the dtypes it asks for
// (ConsumerOptions::conversions). A whole tensor, or a part that is one contiguous run of it, in
// the producer's dtype stays where it arrived (the receive buffer, or a device consumer's copy of
// the version); every other part is gathered (and converted) into memory of the version's own,
// which a ShapingTarget provides: host memory, or a device consumer's device memory with the
// work done on the device. The received bytes stay the producer's, so deltas, relays and
// digests work on what it signed.
//
// Threads: the consumer's service thread only.
#pragma once

#include <cstddef>
#include <memory>
#include <unordered_map>
#include <vector>

#include "core/consumer/shaping_target.h"
#include "core/model/installed_version.h"
#include "core/model/manifest.h"
#include "core/model/tensor_selection.h"
#include "modelcast/consumer.h"

namespace modelcast::consumer {

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

  // Fills `version`'s views (and shaped memory, from `target`) with what `selection` keeps of
  // `manifest` (bytes at `base`, in the target's memory), converted as asked; returns once done.
  // Throws Error(kLayoutMismatch) naming the tensor when a named conversion's tensor is absent or
  // is not f32, f16 or bf16; std::bad_alloc or Error(kResource) when memory for the result
  // cannot be had; Error(kTransport) for a device failure. `version` is untouched then.
  void apply(const Manifest& manifest, const TensorSelection& selection, const std::byte* base,
             detail::InstalledVersion& version, ShapingTarget& target) const;

  // Throws Error(kLayoutMismatch) naming the tensor when a named conversion's tensor is absent
  // from `manifest` or is not f32, f16 or bf16: a version refused on its manifest, before its bytes.
  void check(const Manifest& manifest) const;

  // The conversion that applies to a tensor of `spec` (named, or "*" for a float), or nullptr.
  const TensorConversion* conversion_for(const TensorSpec& spec) const;
  // The conversions as given (checked at construction).
  const std::vector<TensorConversion>& conversions() const noexcept { return conversions_; }

 private:
  struct Planned;
  // The views of `manifest` that `selection` keeps and where their bytes go (the shaped memory's
  // size in `bytes`); throws for conversions that cannot apply, before any work.
  std::vector<Planned> plan(const Manifest& manifest, const TensorSelection& selection, std::size_t& bytes) const;

  std::vector<TensorConversion> conversions_;
  const TensorConversion* wildcard_ = nullptr;  // the "*" conversion, if any
  // Each named conversion's place in conversions_: a search per tensor was quadratic (6.8 s a
  // version for 32,768 converted tensors).
  std::unordered_map<std::string, std::size_t> named_;
};

}  // namespace modelcast::consumer
