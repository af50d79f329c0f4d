// safetensors is a few lines of framing around a JSON header; the header goes through
// nlohmann-json (Debian's nlohmann-json3-dev) so quoting and escaping are a library's job.
#include "core/repository/safetensors.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <nlohmann/json.hpp>

#include "core/repository/regular_file.h"
#include "common/shown_text.h"
#include "core/repository/io_error.h"
#include "modelcast/error.h"
#include "modelcast/tensor.h"

namespace modelcast::repository {
namespace {

[[noreturn]] void io_error(const std::string& what, const std::string& path) {
  const int saved = errno;
  throw IoError(saved, what + " " + shown_text(path, 4096) + ": " + std::strerror(saved));
}

// `what` may quote the file (a tensor's name, a dtype, the JSON parser's "last read"): shown
// printable and capped, as whoever wrote the file could otherwise forge the daemon's log lines.
[[noreturn]] void bad_file(const std::string& path, const std::string& what) {
  throw Error(ErrorCode::kIntegrity, "safetensors file " + shown_text(path, 4096) + ": " + printable_text(what, 1024, Backslash::kKept));
}

void write_all(int fd, const std::string& path, const void* data, std::uint64_t bytes, std::stop_token stop) {
  const auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    // A model of tens of GiB on a slow disk takes minutes, past systemd's stop timeout: a writer
    // that stops abandons the file between pieces.
    if (stop.stop_requested()) throw Error(ErrorCode::kState, "write of " + shown_text(path, 4096) + " abandoned: the writer is stopping");
    // Pieces of at most 64 MiB: one write of several GiB is split by the kernel anyway.
    ssize_t n = ::write(fd, p, static_cast<std::size_t>(std::min<std::uint64_t>(bytes, 64u << 20)));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) io_error("cannot write", path);
    p += n;
    bytes -= static_cast<std::uint64_t>(n);
  }
}

struct DTypeName {
  DType dtype;
  const char* name;
};
constexpr DTypeName kNames[] = {{DType::kF64, "F64"}, {DType::kF32, "F32"}, {DType::kF16, "F16"},
                                {DType::kBF16, "BF16"}, {DType::kI64, "I64"}, {DType::kI32, "I32"},
                                {DType::kI16, "I16"}, {DType::kI8, "I8"}, {DType::kU8, "U8"},
                                {DType::kBool, "BOOL"}, {DType::kF8E4M3, "F8_E4M3"}};

}  // namespace

std::string safetensors_dtype(DType dtype) {
  for (const auto& n : kNames) {
    if (n.dtype == dtype) return n.name;
  }
  throw Error(ErrorCode::kInvalidArgument, "no safetensors name for dtype " + std::to_string(static_cast<int>(dtype)));
}

void write_safetensors(int fd, const std::string& path, const VersionSnapshot& snapshot, std::stop_token stop) {
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = snapshot.metadata;
  std::uint64_t offset = 0;
  for (const auto& t : snapshot.tensors) {
    TensorSpec spec{t.name, t.dtype, t.shape};
    if (t.name == "__metadata__") throw Error(ErrorCode::kInvalidArgument, "a tensor may not be named __metadata__");
    if (spec.size_bytes() != t.bytes) {
      throw Error(ErrorCode::kInvalidArgument, "tensor '" + t.name + "': " + std::to_string(t.bytes) +
                                                   " bytes, its shape says " + std::to_string(spec.size_bytes()));
    }
    header[t.name] = {{"dtype", safetensors_dtype(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes}}};
    offset += t.bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the reference writer aligns the data to 8 bytes
  if (text.size() > kMaxSafetensorsHeaderBytes) {
    throw Error(ErrorCode::kInvalidArgument,
                "safetensors header of " + shown_text(path, 4096) + " would be " + std::to_string(text.size()) +
                    " bytes (its " + std::to_string(snapshot.tensors.size()) + " tensors' names and shapes), over the " +
                    std::to_string(kMaxSafetensorsHeaderBytes) + " bytes safetensors readers take: fewer tensors, or "
                    "shorter names");
  }
  std::uint64_t length = text.size();
  unsigned char prefix[8];
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<unsigned char>(length >> (8 * i));  // little-endian
  write_all(fd, path, prefix, sizeof prefix, stop);
  write_all(fd, path, text.data(), text.size(), stop);
  for (const auto& t : snapshot.tensors) write_all(fd, path, t.data, t.bytes, stop);
  if (fsync(fd) != 0) io_error("cannot fsync", path);
}

SafetensorsLayout read_safetensors_layout(const std::string& path) {
  const RegularFile file(path);
  const int fd = file.fd();
  const auto file_bytes = static_cast<std::uint64_t>(file.size());
  unsigned char prefix[8];
  if (file_bytes < 8) bad_file(path, "shorter than its 8-byte header length");
  if (const auto n = pread(fd, prefix, 8, 0); n != 8) {
    if (n < 0) io_error("cannot read", path);
    bad_file(path, "shorter than its 8-byte header length");
  }
  std::uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | prefix[i];
  if (length > kMaxSafetensorsHeaderBytes || length > file_bytes - 8) bad_file(path, "header length " + std::to_string(length) + " is out of range");
  std::string text(length, '\0');
  if (const auto n = pread(fd, text.data(), length, 8); n != static_cast<ssize_t>(length)) {
    if (n < 0) io_error("cannot read", path);
    bad_file(path, "header cannot be read");
  }
  SafetensorsLayout layout;
  layout.data_start = 8 + length;
  layout.data_bytes = file_bytes - layout.data_start;
  try {
    auto header = nlohmann::json::parse(text);
    for (const auto& [name, entry] : header.items()) {
      if (name == "__metadata__") {
        layout.metadata = entry.get<std::map<std::string, std::string>>();
        continue;
      }
      StoredTensor t;
      t.name = name;
      std::vector<std::uint64_t> offsets;
      std::string dtype_text;
      try {
        dtype_text = entry.at("dtype").get<std::string>();
        t.shape = entry.at("shape").get<std::vector<std::int64_t>>();
        offsets = entry.at("data_offsets").get<std::vector<std::uint64_t>>();
      } catch (const nlohmann::json::exception& e) {
        bad_file(path, "tensor '" + name + "': " + e.what());
      }
      auto known = std::find_if(std::begin(kNames), std::end(kNames), [&](auto& n) { return dtype_text == n.name; });
      if (known == std::end(kNames)) bad_file(path, "tensor '" + name + "' has unknown dtype " + dtype_text);
      t.dtype = known->dtype;
      if (offsets.size() != 2 || offsets[0] > offsets[1]) bad_file(path, "tensor '" + name + "' has bad data_offsets");
      t.begin = offsets[0];
      t.end = offsets[1];
      // Checked: a shape whose size overflows, or with a negative extent, would otherwise pass
      // with a wrapped or zero size and reach readers that trust the shape.
      auto bytes = TensorSpec{t.name, t.dtype, t.shape}.checked_size_bytes();
      if (!bytes) bad_file(path, "tensor '" + name + "' has a negative extent or a size beyond 2^64 bytes");
      if (*bytes != t.end - t.begin) bad_file(path, "tensor '" + name + "': shape and data_offsets disagree");
      layout.tensors.push_back(std::move(t));
    }
  } catch (const nlohmann::json::exception& e) {
    bad_file(path, std::string("header is not valid: ") + e.what());
  }
  // By end too: an empty tensor shares its offset with the next one, and must come first there
  // (sorted after it by name, it "did not follow" and a version the daemon wrote was never read).
  std::sort(layout.tensors.begin(), layout.tensors.end(),
            [](auto& a, auto& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  std::uint64_t expected = 0;
  for (const auto& t : layout.tensors) {
    if (t.begin != expected) bad_file(path, "tensor '" + t.name + "' does not follow the previous one");
    expected = t.end;
  }
  if (expected != layout.data_bytes) {
    bad_file(path, "tensors cover " + std::to_string(expected) + " bytes, the file holds " +
                       std::to_string(layout.data_bytes) + " (truncated or padded)");
  }
  return layout;
}

}  // namespace modelcast::repository
