// Per-tensor integrity digests: XXH3-64 from libxxhash (fast enough to run at memory speed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/model/manifest.h"

namespace modelcast {

std::uint64_t digest_bytes(const void* data, std::size_t size) noexcept;

// Per-tensor digests of a buffer that fills from the front, so hashing overlaps the transfer:
// call advance() whenever the contiguous received prefix grows. Each tensor's digest equals
// digest_bytes() of its bytes, however the prefix advances. Tensors must be in offset order
// (plan_layout's order). Not thread-safe.
class StreamingDigests {
 public:
  explicit StreamingDigests(const std::vector<TensorEntry>& tensors);
  ~StreamingDigests();
  StreamingDigests(StreamingDigests&&) noexcept;
  StreamingDigests& operator=(StreamingDigests&&) noexcept;

  // Hashes what lies in [previous prefix, prefix) of `base`.
  void advance(const std::byte* base, std::uint64_t prefix);
  bool complete() const { return next_ == tensors_.size(); }
  // Valid once complete(): one digest per tensor, in the given order.
  const std::vector<std::uint64_t>& digests() const { return digests_; }

 private:
  struct State;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> tensors_;  // offset, size
  std::vector<std::uint64_t> digests_;
  std::size_t next_ = 0;          // first tensor not yet final
  std::uint64_t hashed_ = 0;      // bytes of tensor next_ already fed
  std::unique_ptr<State> state_;  // XXH3 state of tensor next_
};

}  // namespace modelcast
