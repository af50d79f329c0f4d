// The safetensors format (as the reference `safetensors` library reads it): an 8-byte
// little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets: [begin,
// end]}, "__metadata__": {string: string}} padded with spaces to a multiple of 8, then the
// tensors' bytes back to back (offsets relative to the end of the header).
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <stop_token>
#include <string>
#include <vector>

#include "core/repository/version_snapshot.h"

namespace modelcast::repository {

// The longest header read or written: the reference library's (safetensors' MAX_HEADER_SIZE),
// so that a file written here is one an inference server's reader takes.
inline constexpr std::uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

// Writes `snapshot` as safetensors to `fd` (positioned at 0) and fsyncs it. Throws
// modelcast::Error(kResource) naming `path` and the errno text on a failed write or fsync,
// Error(kInvalidArgument) for a tensor named "__metadata__" or one whose size disagrees with
// its shape, or a header over kMaxSafetensorsHeaderBytes (before anything is written),
// Error(kState) if `stop` is requested before the last 64 MiB piece is written.
void write_safetensors(int fd, const std::string& path, const VersionSnapshot& snapshot, std::stop_token stop = {});

struct StoredTensor {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0, end = 0;  // relative to data_start
};

struct SafetensorsLayout {
  std::uint64_t data_start = 0;  // 8 + header length
  std::uint64_t data_bytes = 0;
  std::map<std::string, std::string> metadata;
  std::vector<StoredTensor> tensors;  // by offset, i.e. in the order they were written
};

// Reads and checks the header of the file at `path`: dtypes, shapes against byte ranges,
// ranges contiguous from 0 and ending at the end of the file. Throws Error(kIntegrity) naming
// the file and the problem, Error(kResource) if it cannot be read.
SafetensorsLayout read_safetensors_layout(const std::string& path);

std::string safetensors_dtype(DType dtype);  // "F32", "BF16", "BOOL", ...

}  // namespace modelcast::repository
