#include "core/manifest.h"

#include <limits>
#include <set>
#include <sstream>

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

void check_spec(const TensorSpec& spec, ErrorCode code) {
  if (spec.name.empty()) throw Error(code, "tensor with an empty name");
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
}

}  // namespace

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
    entry.size = spec.size_bytes();
    offset = align_up(offset + entry.size, kTensorAlignment);
    entries.push_back(std::move(entry));
  }
  if (total_bytes) *total_bytes = offset;
  return entries;
}

void validate_manifest(const Manifest& manifest) {
  std::set<std::string> names;
  std::uint64_t end_of_previous = 0;
  for (const auto& entry : manifest.tensors) {
    check_spec(entry.spec, ErrorCode::kProtocol);
    if (!names.insert(entry.spec.name).second) {
      throw Error(ErrorCode::kProtocol, "manifest names tensor '" + entry.spec.name + "' twice");
    }
    // Overflow-safe bounds check: a hostile manifest must not make us read or write outside
    // the receive buffer.
    if (entry.size != entry.spec.size_bytes()) {
      throw Error(ErrorCode::kProtocol, "manifest size of tensor '" + entry.spec.name + "' is " +
                                            std::to_string(entry.size) + " bytes but its shape " +
                                            shape_string(entry.spec.shape) + " needs " +
                                            std::to_string(entry.spec.size_bytes()));
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
  }
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
