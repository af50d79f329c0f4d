// ModelView: an immutable, consistent version of a model, like LevelDB's Snapshot.
#pragma once

#include "modelcast/export.h"

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "modelcast/tensor.h"

namespace modelcast {

namespace detail {
struct InstalledVersion;
}

// Cheap to copy; every copy shares one version. The tensors' bytes stay valid and unchanged
// while any copy is alive, whatever arrives later. Safe to use from any thread.
class MODELCAST_API ModelView {
 public:
  ModelView() = default;  // empty: no version yet
  explicit ModelView(std::shared_ptr<const detail::InstalledVersion> state);

  bool empty() const noexcept { return state_ == nullptr; }
  explicit operator bool() const noexcept { return !empty(); }

  // Accessors below require !empty().
  std::uint64_t version() const;
  std::int64_t step() const;
  std::uint64_t producer_incarnation() const;  // changes when the producer restarts
  const std::map<std::string, std::string>& metadata() const;
  // Producer's publish() call until this consumer installed the version (same-host clocks).
  std::chrono::nanoseconds update_latency() const;

  // One view per tensor, or per part of a tensor a consumer keeps in parts
  // (ConsumerOptions::wants), in the producer's registration order; tensors the consumer
  // wants none of are absent.
  std::size_t tensor_count() const;
  std::vector<TensorView> tensors() const;
  // The first view of the tensor (its only one unless the consumer asked for several boxes).
  std::optional<TensorView> find(std::string_view name) const;
  // Every view of the tensor, in the order its boxes were asked for; empty if it has none.
  std::vector<TensorView> parts(std::string_view name) const;
  // Throws Error(kInvalidArgument) naming the tensor if it is absent.
  TensorView tensor(std::string_view name) const;

 private:
  std::shared_ptr<const detail::InstalledVersion> state_;
};

}  // namespace modelcast
