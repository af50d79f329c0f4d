#include "core/transfer/chunk_plan.h"

#include <string>

#include "modelcast/error.h"

namespace modelcast::transfer {

std::vector<std::uint32_t> changed_blocks(const std::vector<std::uint64_t>& base, const std::vector<std::uint64_t>& next) {
  std::vector<std::uint32_t> changed;
  for (std::size_t i = 0; i < next.size() && i < base.size(); ++i) {
    if (base[i] != next[i]) changed.push_back(static_cast<std::uint32_t>(i));
  }
  return changed;
}

void check_plan(const ChunkPlan& plan) {
  if (plan.chunk_bytes == 0) throw Error(ErrorCode::kProtocol, "fetch reply with a zero chunk size");
  if (plan.chunk_bytes < std::min(plan.total_bytes, kMinChunkBytes)) {
    throw Error(ErrorCode::kProtocol, "fetch reply with " + std::to_string(plan.chunk_bytes) +
                                          "-byte chunks; at least " + std::to_string(kMinChunkBytes) + " expected");
  }
  // Past a gibibyte an offset plus a chunk could wrap, and a chunk of nearly 2^64 bytes would
  // make a one-chunk plan that digests and chunk counts disagree on.
  if (plan.chunk_bytes > kMaxChunkBytes) {
    throw Error(ErrorCode::kProtocol, "fetch reply with " + std::to_string(plan.chunk_bytes) + "-byte chunks; at most " +
                                          std::to_string(kMaxChunkBytes) + " expected");
  }
  if (plan.count() > kMaxChunks) {
    throw Error(ErrorCode::kProtocol, "fetch reply splits the model into more chunks than a tag can number");
  }
}

}  // namespace modelcast::transfer
