// One model version as the repository writes it: tensors in memory somebody else owns, kept
// valid by `keepalive` until the writer is done. Independent of the daemon, so a producer can
// persist its snapshots with the same writer.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "modelcast/types.h"

namespace modelcast::repository {

struct SnapshotTensor {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<std::int64_t> shape;
  const void* data = nullptr;  // `bytes` readable bytes, unchanged while keepalive lives
  std::uint64_t bytes = 0;
};

struct VersionSnapshot {
  std::string model;
  std::uint64_t version = 0;
  std::int64_t step = 0;
  std::uint64_t incarnation = 0;
  std::map<std::string, std::string> metadata;
  std::vector<SnapshotTensor> tensors;  // in registration order; written in this order
  std::shared_ptr<const void> keepalive;
};

}  // namespace modelcast::repository
