#include "core/model/manifest.h"

#include <cstdio>
#include <limits>
#include <optional>
#include <set>
#include <sstream>

#include <utf8.h>

#include "common/shown_text.h"
#include "modelcast/error.h"

namespace modelcast {
namespace {

std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::ostringstream out;
  out << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) out << (i ? "," : "") << shape[i];
  out << ']';
  return out.str();
}

std::uint64_t align_up(std::uint64_t value, std::uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}


}  // namespace

void check_spec(const TensorSpec& spec, ErrorCode code) {
  if (spec.name.empty()) throw Error(code, "tensor with an empty name");
  const ManifestLimits limits;
  if (auto why = name_problem(spec.name)) throw Error(code, "tensor name " + shown_text(spec.name) + " " + *why);
  // Delivered, such a tensor could never be persisted: a daemon's repository and a producer's
  // checkpoints failed on every version of the model.
  if (spec.name == "__metadata__") {
    throw Error(code, "tensor name '__metadata__' is reserved: safetensors files (checkpoints, repositories) keep "
                      "their metadata under it");
  }
  // "*" is every tensor to wants and conversions (and to modelcastd's [model.wants]): a tensor of
  // that name could never be wanted or converted alone.
  if (spec.name == "*") {
    throw Error(code, "tensor name '*' is reserved: wants and conversions take it for every tensor");
  }
  if (spec.shape.size() > limits.max_rank) {
    throw Error(code, "tensor '" + spec.name + "' has rank " + std::to_string(spec.shape.size()) + "; the limit is " +
                          std::to_string(limits.max_rank));
  }
  if (spec.memory != MemoryKind::kHost && spec.memory != MemoryKind::kCuda) {
    throw Error(code, "tensor '" + spec.name + "' has an unknown memory kind " +
                          std::to_string(static_cast<int>(spec.memory)));
  }
  if (dtype_size(spec.dtype) == 0) {
    throw Error(code, "tensor '" + spec.name + "' has an unknown dtype " +
                          std::to_string(static_cast<int>(spec.dtype)));
  }
  for (auto extent : spec.shape) {
    if (extent < 0) {
      throw Error(code, "tensor '" + spec.name + "' has a negative extent in shape " +
                            shape_string(spec.shape));
    }
  }
  if (!spec.checked_size_bytes()) {
    throw Error(code, "tensor '" + spec.name + "' with shape " + shape_string(spec.shape) +
                          " has extents whose product (in bytes, or of the nonzero ones) does not fit in 64 bits");
  }
}

// The limit is ManifestLimits'. UTF-8 as RFC 3629 has it (no overlong forms, surrogates or values
// past U+10FFFF), by utfcpp: consumers, and readers in C and Python, could not take other bytes.
// NUL is UTF-8 too, but a C or Fortran caller's name ends there: refused as well.
std::optional<std::string> name_problem(std::string_view name) {
  if (const auto limit = ManifestLimits{}.max_name_bytes; name.size() > limit) {
    return "is " + std::to_string(name.size()) + " bytes; the limit is " + std::to_string(limit);
  }
  if (const auto nul = name.find('\0'); nul != std::string_view::npos) {
    return "contains a NUL byte at " + std::to_string(nul);
  }
  // A newline or an escape sequence in a name would forge or garble the log lines and errors
  // that show it, on every host it reaches.
  if (const auto at = control_character_at(name); at != std::string_view::npos) {
    return "contains a control character at byte " + std::to_string(at);
  }
  if (const auto bad = utf8::find_invalid(name.begin(), name.end()); bad != name.end()) {
    return "is not valid UTF-8 (byte " + std::to_string(bad - name.begin()) + ")";
  }
  return std::nullopt;
}

std::optional<std::string> metadata_problem(const std::map<std::string, std::string>& metadata,
                                            const ManifestLimits& limits) {
  if (metadata.size() > limits.max_metadata_entries) {
    return "has " + std::to_string(metadata.size()) + " entries; the limit is " +
           std::to_string(limits.max_metadata_entries);
  }
  std::size_t bytes = 0;
  for (const auto& [key, value] : metadata) bytes += key.size() + value.size();
  if (bytes > limits.max_metadata_bytes) {
    return "holds " + std::to_string(bytes) + " bytes of keys and values; the limit is " +
           std::to_string(limits.max_metadata_bytes);
  }
  for (const auto& [key, value] : metadata) {
    if (auto why = name_problem(key)) return "key " + shown_text(key) + " " + *why;
    if (const auto nul = value.find('\0'); nul != std::string::npos) {
      return "value of " + shown_text(key) + " contains a NUL byte at " + std::to_string(nul);
    }
    if (const auto bad = utf8::find_invalid(value.begin(), value.end()); bad != value.end()) {
      return "value of " + shown_text(key) + " is not valid UTF-8 (byte " + std::to_string(bad - value.begin()) + ")";
    }
  }
  return std::nullopt;
}

void check_placement(const TensorEntry& entry, ErrorCode code) {
  if (entry.global_shape.empty() && entry.global_offset.empty()) return;
  const auto& shape = entry.spec.shape;
  const std::string what = "tensor '" + entry.spec.name + "' of shape " + shape_string(shape);
  if (entry.global_shape.size() != shape.size() || entry.global_offset.size() != shape.size()) {
    throw Error(code, what + " is placed with a global shape of " + std::to_string(entry.global_shape.size()) +
                          " dimensions and an offset of " + std::to_string(entry.global_offset.size()));
  }
  for (std::size_t d = 0; d < shape.size(); ++d) {
    const auto g = entry.global_shape[d], o = entry.global_offset[d];
    if (g < 0 || o < 0 || o > g || shape[d] > g - o) {
      throw Error(code, what + " at offset " + shape_string(entry.global_offset) + " does not fit in its global shape " +
                            shape_string(entry.global_shape));
    }
  }
}

std::vector<TensorEntry> plan_layout(const std::vector<TensorSpec>& specs, std::uint64_t* total_bytes) {
  std::vector<TensorEntry> entries;
  entries.reserve(specs.size());
  std::set<std::string> names;
  std::uint64_t offset = 0;
  for (const auto& spec : specs) {
    check_spec(spec, ErrorCode::kInvalidArgument);
    if (!names.insert(spec.name).second) {
      throw Error(ErrorCode::kInvalidArgument, "duplicate tensor name '" + spec.name + "'");
    }
    TensorEntry entry;
    entry.spec = spec;
    entry.offset = offset;
    entry.size = *spec.checked_size_bytes();
    std::uint64_t end = 0;
    if (__builtin_add_overflow(offset, entry.size, &end) || end > std::numeric_limits<std::uint64_t>::max() - kTensorAlignment) {
      throw Error(ErrorCode::kInvalidArgument, "tensor '" + spec.name + "' takes the model past 2^64 bytes");
    }
    offset = align_up(end, kTensorAlignment);
    entries.push_back(std::move(entry));
  }
  if (total_bytes) *total_bytes = offset;
  return entries;
}

void validate_manifest(const Manifest& manifest, const ManifestLimits& limits) {
  auto fail = [](const std::string& what) { throw Error(ErrorCode::kProtocol, what); };
  if (manifest.total_bytes > limits.max_total_bytes) {
    fail("manifest declares a " + std::to_string(manifest.total_bytes) + "-byte model; this consumer takes at most " +
         std::to_string(limits.max_total_bytes));
  }
  if (manifest.tensors.size() > limits.max_tensors) {
    fail("manifest lists " + std::to_string(manifest.tensors.size()) + " tensors; the limit is " +
         std::to_string(limits.max_tensors));
  }
  if (manifest.model.size() > limits.max_name_bytes) fail("manifest's model name is longer than the limit");
  if (auto why = name_problem(manifest.model)) fail("manifest's model name " + shown_text(manifest.model) + " " + *why);
  if (auto why = metadata_problem(manifest.metadata, limits)) fail("manifest metadata " + *why);
  std::set<std::string> names;
  std::uint64_t end_of_previous = 0;
  for (const auto& entry : manifest.tensors) {
    if (entry.spec.name.size() > limits.max_name_bytes) {
      fail("manifest names a tensor with " + std::to_string(entry.spec.name.size()) + " bytes; the limit is " +
           std::to_string(limits.max_name_bytes));
    }
    if (auto why = name_problem(entry.spec.name)) {
      fail("manifest names tensor " + shown_text(entry.spec.name) + ", which " + *why);
    }
    if (entry.spec.shape.size() > limits.max_rank) {
      fail("tensor '" + entry.spec.name + "' has rank " + std::to_string(entry.spec.shape.size()) +
           "; the limit is " + std::to_string(limits.max_rank));
    }
    check_spec(entry.spec, ErrorCode::kProtocol);
    if (!names.insert(entry.spec.name).second) {
      throw Error(ErrorCode::kProtocol, "manifest names tensor '" + entry.spec.name + "' twice");
    }
    // Overflow-safe bounds check: a hostile manifest must not make us read or write outside
    // the receive buffer.
    if (entry.size != *entry.spec.checked_size_bytes()) {
      throw Error(ErrorCode::kProtocol, "manifest size of tensor '" + entry.spec.name + "' is " +
                                            std::to_string(entry.size) + " bytes but its shape " +
                                            shape_string(entry.spec.shape) + " needs " +
                                            std::to_string(*entry.spec.checked_size_bytes()));
    }
    if (entry.offset > manifest.total_bytes || entry.size > manifest.total_bytes - entry.offset) {
      throw Error(ErrorCode::kProtocol, "tensor '" + entry.spec.name + "' lies outside the " +
                                            std::to_string(manifest.total_bytes) + "-byte model");
    }
    // Receivers hash tensors front to back as bytes arrive: they must be in order, disjoint.
    if (entry.offset < end_of_previous) {
      throw Error(ErrorCode::kProtocol, "tensor '" + entry.spec.name + "' overlaps or precedes the tensor before it");
    }
    end_of_previous = entry.offset + entry.size;
    check_placement(entry, ErrorCode::kProtocol);
  }
  if (manifest.rank_count == 0 || manifest.rank >= manifest.rank_count) {
    fail("manifest is rank " + std::to_string(manifest.rank) + " of " + std::to_string(manifest.rank_count));
  }
  if (!manifest.run_id.empty()) {
    if (auto why = name_problem(manifest.run_id)) fail("manifest's run id " + shown_text(manifest.run_id) + " " + *why);
  }
  // Buffers are sized by total_bytes: a total beyond what the tensors need (plus the last
  // tensor's alignment padding) would make a consumer allocate memory that carries nothing.
  if (manifest.total_bytes > align_up(end_of_previous, kTensorAlignment)) {
    fail("manifest declares " + std::to_string(manifest.total_bytes) + " bytes but its tensors end at byte " +
         std::to_string(end_of_previous));
  }
  // Block digests may follow the manifest (with the tensor digests); when present, one a block.
  if (manifest.block_bytes == 0 && !manifest.block_digests.empty()) fail("manifest has block digests but no block size");
  if (!manifest.block_digests.empty() && manifest.block_digests.size() != block_count(manifest)) {
    fail("manifest has " + std::to_string(manifest.block_digests.size()) + " block digests for " +
         std::to_string(block_count(manifest)) + " blocks");
  }
}

std::size_t block_count(const Manifest& manifest) {
  if (manifest.block_bytes == 0) return 0;
  // Not (total + block - 1) / block: that wraps to 0 blocks for a hostile block size near 2^64.
  return static_cast<std::size_t>(manifest.total_bytes / manifest.block_bytes +
                                  (manifest.total_bytes % manifest.block_bytes != 0));
}

bool checked_by_block(const Manifest& manifest) {
  return manifest.integrity && manifest.digest_kind == DigestKind::kXxh3_64 && manifest.block_bytes != 0;
}

void check_expected_layout(const std::vector<TensorSpec>& expected, const Manifest& manifest) {
  if (expected.empty()) return;
  std::map<std::string, const TensorSpec*> sent;
  for (const auto& entry : manifest.tensors) sent[entry.spec.name] = &entry.spec;
  std::ostringstream problems;
  int count = 0;
  auto note = [&](const std::string& text) {
    if (count++ < 5) problems << (count > 1 ? "; " : "") << text;
  };
  std::set<std::string> expected_names;
  for (const auto& want : expected) {
    expected_names.insert(want.name);
    auto it = sent.find(want.name);
    if (it == sent.end()) {
      note("missing tensor '" + want.name + "'");
      continue;
    }
    const TensorSpec& got = *it->second;
    if (got.dtype != want.dtype) {
      note("tensor '" + want.name + "' is " + std::string(dtype_name(got.dtype)) + ", expected " +
           std::string(dtype_name(want.dtype)));
    }
    if (got.shape != want.shape) {
      note("tensor '" + want.name + "' has shape " + shape_string(got.shape) + ", expected " +
           shape_string(want.shape));
    }
  }
  for (const auto& [name, spec] : sent) {
    if (!expected_names.count(name)) note("unexpected tensor '" + name + "'");
  }
  if (count > 0) {
    if (count > 5) problems << "; and " << (count - 5) << " more";
    throw Error(ErrorCode::kLayoutMismatch, "model '" + manifest.model + "' version " +
                                                std::to_string(manifest.version) +
                                                " does not match the expected layout: " + problems.str());
  }
}

}  // namespace modelcast
