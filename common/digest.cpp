#include "common/digest.h"

#include <algorithm>
#include <stdexcept>

#include <xxhash.h>

namespace modelcast {

std::uint64_t digest_bytes(const void* data, std::size_t size) noexcept { return XXH3_64bits(data, size); }

struct StreamingDigests::State {
  XXH3_state_t* xxh = XXH3_createState();
  State() {
    if (!xxh) throw std::bad_alloc();
  }
  ~State() { XXH3_freeState(xxh); }
};

StreamingDigests::StreamingDigests(const std::vector<TensorEntry>& tensors)
    : digests_(tensors.size(), 0), state_(std::make_unique<State>()) {
  for (const auto& t : tensors) tensors_.emplace_back(t.offset, t.size);
  XXH3_64bits_reset(state_->xxh);
}
StreamingDigests::~StreamingDigests() = default;
StreamingDigests::StreamingDigests(StreamingDigests&&) noexcept = default;
StreamingDigests& StreamingDigests::operator=(StreamingDigests&&) noexcept = default;

void StreamingDigests::advance(const std::byte* base, std::uint64_t prefix) {
  while (next_ < tensors_.size()) {
    auto [offset, size] = tensors_[next_];
    std::uint64_t start = offset + hashed_;
    std::uint64_t end = std::min(offset + size, prefix);
    if (end > start) {
      XXH3_64bits_update(state_->xxh, base + start, end - start);
      hashed_ += end - start;
    }
    if (hashed_ < size) return;  // the prefix ends inside this tensor
    digests_[next_++] = XXH3_64bits_digest(state_->xxh);
    XXH3_64bits_reset(state_->xxh);
    hashed_ = 0;
  }
}

}  // namespace modelcast
