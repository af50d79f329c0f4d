// A versioned model repository on disk in Triton's layout: <root>/<model>/<version>/ holding
// model.safetensors and metadata.json. A version directory appears only complete: it is built
// under a temporary name, fsynced, renamed into place, and the model directory fsynced; an old
// version is renamed away before it is deleted. Leftovers of a crash (".tmp-*", ".del-*") are
// never served and are removed by clean().
//
// Threads: not synchronised; one writer per model directory (the RepositoryWriter's thread; a
// daemon holds a ModelDirectoryLock so that no other process writes there), plus list(),
// damaged() and clean() from others: list() may then skip a version being pruned, and clean()
// leaves this process's own entries, which a write in progress may still use.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "core/repository/version_snapshot.h"

namespace modelcast::repository {

inline constexpr const char* kTensorFile = "model.safetensors";
inline constexpr const char* kMetadataFile = "metadata.json";

// A 64-bit value (a producer incarnation, a digest) as the daemon writes it in JSON
// (metadata.json, /v1/models): 16 hex digits, as the logs show it. Not a JSON number: most JSON
// readers (JavaScript, jq, pandas) hold numbers as doubles, and a random 64-bit value above 2^53
// would reach them rounded.
std::string hex64(std::uint64_t value);

// What names this process's ".tmp-" and ".del-" entries (its pid and 64 random bits, the same for
// the process's life): clean() removes only entries that do not carry it.
const std::string& process_tag();

// A complete version found on disk (from its metadata.json).
struct StoredVersion {
  std::string directory;
  std::uint64_t number = 0;   // the directory's name: rises across producer restarts (Repository::write)
  std::uint64_t version = 0;  // the producer's version number
  std::int64_t step = 0;
  std::uint64_t incarnation = 0;
  std::int64_t written_at_ns = 0;  // wall clock when it was written (shown only: numbers give the order)
  std::map<std::string, std::string> metadata;
  std::vector<std::string> tensor_order;  // registration order
  // XXH3-64 of each tensor's bytes as written (metadata.json's "tensor_xxh3"); empty for a
  // version written before digests were kept, whose bytes nothing can check.
  std::map<std::string, std::uint64_t> tensor_digests;
  // Each tensor's dtype (as safetensors names it) and shape as written (metadata.json's
  // "tensor_layout"): the digests cover bytes only, and a header whose "F32" became "I32" served
  // the same bytes as integers. Empty for a version written before layouts were kept.
  struct Layout {
    std::string dtype;
    std::vector<std::int64_t> shape;
  };
  std::map<std::string, Layout> tensor_layouts;
};

// Throws modelcast::Error(kIntegrity) naming the tensor and the version's directory when `data`
// (`bytes` bytes read back from model.safetensors) is not what was written. Any thread.
void check_tensor_bytes(const StoredVersion& version, const std::string& tensor, const void* data,
                        std::uint64_t bytes);

// Throws modelcast::Error(kIntegrity) naming the tensor and the version's directory when the
// safetensors header gives `tensor` another dtype or shape than metadata.json recorded. Any thread.
void check_tensor_layout(const StoredVersion& version, const std::string& tensor, DType dtype,
                         const std::vector<std::int64_t>& shape);

// Why `model` cannot name a model's directory (it holds '/' or '\\', starts with '.', which
// includes ".." and hidden names, or is longer than a file name may be), or nullopt. A model
// named "../x" wrote its versions outside the repository.
std::optional<std::string> model_directory_problem(std::string_view model);

// Makes `directory` and each missing one above it with mode 0755 (less the umask), so that no
// umask (systemd's UMask=0007 for one) leaves a repository directory writable by the group:
// whoever can write there chooses what a restarted daemon serves. Each one made is fsynced into
// its parent. Sets `error` on failure.
void make_directories(const std::string& directory, std::error_code& error);

class Repository {
 public:
  explicit Repository(std::string root) : root_(std::move(root)) {}

  // Writes `snapshot` as <root>/<model>/<number>/, where the number is the producer's version
  // number plus an offset kept per producer incarnation, so that numbers rise across producer
  // restarts (Triton loads the highest). The same version of the same incarnation written again
  // replaces its directory in one atomic exchange. Returns the directory. Throws
  // modelcast::Error(kResource) naming the path on any I/O failure, Error(kState) when `stop`
  // is requested part-way (checked every 64 MiB); the temporary directory is removed and nothing
  // partial becomes visible.
  std::string write(const VersionSnapshot& snapshot, std::stop_token stop = {});

  // Removes all but the `keep` most recently written versions of `model` (the highest numbers),
  // less those whose directory `in_use` names (they stay for a later prune), and what this
  // process's earlier writes and prunes failed to remove. Returns those leftovers that still
  // cannot be removed, each named with why. Throws Error(kResource) on I/O failure.
  [[nodiscard]] std::vector<std::string> prune(const std::string& model, std::size_t keep,
             const std::function<bool(const std::string& directory)>& in_use = {});

  // Complete versions of `model`, most recently written (highest number) first. Directories
  // whose name is not a number or whose metadata.json cannot be read are skipped (they are not
  // ours or are damaged).
  std::vector<StoredVersion> list(const std::string& model) const;
  // The numbered directories list() skips as damaged, each as "directory: why" (for a log:
  // nothing there is served).
  std::vector<std::string> damaged(const std::string& model) const;

  // Removes what interrupted writes and deletions of other processes left behind (a crashed
  // one's; hold a ModelDirectoryLock so that none is still working): how many entries went, and
  // each one that could not be removed as "path: why" (a read-only disk keeps them; none is
  // served).
  struct Cleaned {
    std::size_t removed = 0;
    std::vector<std::string> left;
  };
  Cleaned clean(const std::string& model);

  std::string model_directory(const std::string& model) const { return root_ + "/" + model; }

 private:
  std::uint64_t directory_number(const VersionSnapshot& snapshot) const;
  std::string root_;
};

}  // namespace modelcast::repository
