// The manifest: what a version contains and where each tensor sits in a snapshot slot.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "modelcast/tensor.h"

namespace modelcast {

// Tensors start on this boundary inside a slot: keeps every tensor aligned for any dtype and
// for vectorised digest and copy code.
inline constexpr std::size_t kTensorAlignment = 256;

struct TensorEntry {
  TensorSpec spec;
  std::uint64_t offset = 0;  // from the start of the slot
  std::uint64_t size = 0;    // bytes
  std::uint64_t digest = 0;  // XXH3-64 of the bytes, when the manifest says integrity
};

struct Manifest {
  std::string model;
  std::uint64_t incarnation = 0;  // random per producer process
  std::uint64_t version = 0;
  std::int64_t step = 0;
  std::int64_t publish_time_ns = 0;  // CLOCK_REALTIME at the publish() call
  std::map<std::string, std::string> metadata;
  bool integrity = true;
  std::uint64_t total_bytes = 0;
  std::vector<TensorEntry> tensors;
};

// Lays tensors out back to back (aligned) in the given order. Throws Error(kInvalidArgument)
// naming the tensor for an empty or duplicate name, a negative extent or an unknown dtype.
std::vector<TensorEntry> plan_layout(const std::vector<TensorSpec>& specs, std::uint64_t* total_bytes);

// Checks a received manifest is self-consistent (sizes match shapes, tensors inside
// total_bytes, names unique). Throws Error(kProtocol) saying what is wrong.
void validate_manifest(const Manifest& manifest);

// Throws Error(kLayoutMismatch) listing the first differences between what a consumer expects
// and what the producer sent (missing, unexpected, dtype or shape differences).
void check_expected_layout(const std::vector<TensorSpec>& expected, const Manifest& manifest);

}  // namespace modelcast
