#include "core/repository/repository.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <climits>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <random>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "common/shown_text.h"
#include "core/repository/io_error.h"
#include "core/repository/regular_file.h"
#include "common/digest.h"
#include "core/repository/safetensors.h"
#include "modelcast/error.h"

namespace modelcast::repository {
namespace fs = std::filesystem;
namespace {

// A 64-bit value metadata.json holds as hex text (hex64()); `what` names it in the error.
std::uint64_t hex_value(const nlohmann::json& value, const std::string& what) {
  if (!value.is_string()) throw std::invalid_argument(what + " is not hexadecimal text");
  const auto& text = value.get_ref<const std::string&>();
  std::uint64_t out = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out, 16);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) {
    throw std::invalid_argument(what + " is not hexadecimal: '" + text + "'");
  }
  return out;
}

// metadata.json's producer_incarnation: hex text, or a number as written before it was text.
std::uint64_t incarnation_of(const nlohmann::json& value) {
  if (!value.is_string()) return value.get<std::uint64_t>();
  return hex_value(value, "producer_incarnation");
}

[[noreturn]] void io_error(const std::string& what, const std::string& path) {
  const int saved = errno;
  throw IoError(saved, "repository: " + what + " " + shown_text(path, 4096) + ": " + std::strerror(saved));
}

// Makes a directory's entries (a rename, a new file) durable.
void fsync_directory(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) io_error("cannot open directory", path);
  int rc = fsync(fd);
  close(fd);
  if (rc != 0) io_error("cannot fsync directory", path);
}

int create_file(const std::string& path) {
  int fd = open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0) io_error("cannot create", path);
  return fd;
}

// As large as metadata.json may be to be read back (list(), recovery): a repository refuses to
// write a larger one. It lists each tensor's name three times, so a model of many long names can
// reach it (65,536 names of 800 bytes): written, every such version was unreadable, never
// pruned, and the disk filled.
constexpr std::size_t kMaxMetadataBytes = 100u << 20;

// metadata.json but for the time it is written at (set once the tensors are on disk). Throws
// Error(kInvalidArgument) where it would be over kMaxMetadataBytes, before anything is written.
nlohmann::json metadata_doc(const VersionSnapshot& s, std::uint64_t number) {
  nlohmann::json doc = {{"model", s.model},           {"version", s.version}, {"repository_version", number},
                        {"step", s.step},             {"producer_incarnation", hex64(s.incarnation)},
                        {"written_at_ns", std::numeric_limits<std::int64_t>::max()}, {"metadata", s.metadata},
                        {"tensors", nlohmann::json::array()}};
  for (const auto& t : s.tensors) doc["tensors"].push_back(t.name);
  // Per tensor rather than the producer's block digests: blocks do not follow tensor bounds, a
  // device snapshot has none of XXH3, and recovery reads the file tensor by tensor. Hashing
  // memory costs little beside writing and fsyncing the same bytes.
  auto& digests = doc["tensor_xxh3"] = nlohmann::json::object();
  for (const auto& t : s.tensors) digests[t.name] = hex64(digest_bytes(t.data, t.bytes));
  auto& layouts = doc["tensor_layout"] = nlohmann::json::object();
  for (const auto& t : s.tensors) layouts[t.name] = {{"dtype", safetensors_dtype(t.dtype)}, {"shape", t.shape}};
  // Measured with the longest time there is: the one written can only be shorter.
  if (const auto bytes = doc.dump().size() + 1; bytes > kMaxMetadataBytes) {
    throw Error(ErrorCode::kInvalidArgument,
                "repository: version " + std::to_string(s.version) + " of model '" + s.model + "' would have a " +
                    std::to_string(bytes) + "-byte " + kMetadataFile + " (its " + std::to_string(s.tensors.size()) +
                    " tensors' names, three times each), over the " + std::to_string(kMaxMetadataBytes) +
                    " bytes a repository reads back: nothing was written (fewer tensors, or shorter names)");
  }
  return doc;
}

void write_metadata(const std::string& path, nlohmann::json doc, std::int64_t written_at_ns) {
  doc["written_at_ns"] = written_at_ns;
  std::string text = doc.dump() + "\n";
  int fd = create_file(path);
  const char* p = text.data();
  std::size_t left = text.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int saved = errno;
      close(fd);
      errno = saved;
      io_error("cannot write", path);
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  if (fsync(fd) != 0) {
    close(fd);
    io_error("cannot fsync", path);
  }
  close(fd);
}


std::string unique_suffix() {
  static std::atomic<std::uint64_t> counter{0};
  return process_tag() + "-" + std::to_string(counter++);
}

// Whether a ".tmp-" or ".del-" entry was made by this process (its unique_suffix): a write or a
// prune of this process's may still be working in it.
bool made_by_this_process(const std::string& name) {
  const auto counter_dash = name.rfind('-');
  if (counter_dash == std::string::npos || counter_dash == 0) return false;
  const auto tag_dash = name.rfind('-', counter_dash - 1);
  if (tag_dash == std::string::npos) return false;
  return name.compare(tag_dash + 1, counter_dash - tag_dash - 1, process_tag()) == 0;
}

// A directory name write() could have made: a number as std::to_string writes it (any uint64,
// 20 digits included; no sign, no leading zero).
bool is_number(const std::string& name) {
  std::uint64_t value = 0;
  auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), value);
  return !name.empty() && ec == std::errc() && end == name.data() + name.size() && std::to_string(value) == name;
}

// Calls `visit` for each entry of `dir` (none when it cannot be opened). The error_code forms
// throughout: an entry that cannot be read (a symlink loop, a directory another user's mode
// closes) must not end the caller, a daemon starting or a writer's thread.
template <typename Visit>
void for_each_entry(const std::string& dir, Visit&& visit) {
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  for (const fs::directory_iterator end; !ec && it != end; it.increment(ec)) visit(*it);
}

// One numbered directory of a model: the version it holds, or why it holds none it can serve
// (empty why and no version: not a version directory at all, so not ours to report).
struct StoredEntry {
  std::optional<StoredVersion> version;
  std::string why;
};

StoredEntry read_entry(const fs::directory_entry& entry);

}  // namespace

// The pid alone repeats across restarts in a container (each incarnation is pid 1), so a crashed
// incarnation's leftovers passed for this one's: never cleaned, and the first write's name was
// already taken ("File exists").
const std::string& process_tag() {
  static const std::string tag = [] {
    std::random_device entropy;
    const std::uint64_t bits = (static_cast<std::uint64_t>(entropy()) << 32) ^ entropy();
    return std::to_string(getpid()) + "." + hex64(bits);
  }();
  return tag;
}

std::string hex64(std::uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

// Directory numbers are what Triton's default policy ("latest") orders by, so they must rise
// across producer restarts, whose version numbers start again at 1 (a repository holding 1 2 6,
// the 6 from the previous run, made Triton load the stale 6). A producer incarnation keeps one
// offset from its version numbers to the directory numbers: the one its stored versions show,
// or for a new incarnation whatever puts its first version above every number on disk (none on
// a fresh repository, so there directory numbers are version numbers). An offset that no longer
// lands above every number (a model switched to another producer and back: that producer's
// versions were written above this one's) is given up for a new one above them: reused, it wrote
// over the other producer's versions and left the newest number to the older model.
// Above every numbered entry, not only the versions it can read: a directory another tool put
// there (an existing Triton repository's "1/model.onnx"), a damaged version or a stray file
// named "4" took the number, and writing under it replaced the first two and failed on the
// third at every version, for good.
std::uint64_t Repository::directory_number(const VersionSnapshot& snapshot) const {
  std::uint64_t highest = 0;
  std::optional<std::uint64_t> offset_number;
  // An entry of this producer run with a newer version than this one was not written from it in
  // order (a daemon serves the producer's version over such an entry, which someone else wrote or
  // edited): numbered under it, this version would stay behind it for Triton, recovery and prune.
  bool run_ahead = false;
  const auto stored_versions = list(snapshot.model);
  for (const auto& stored : stored_versions) {
    if (stored.incarnation == snapshot.incarnation) {
      if (!offset_number && stored.number >= stored.version) offset_number = snapshot.version + (stored.number - stored.version);
      run_ahead = run_ahead || stored.version > snapshot.version;
    }
  }
  // The offset's number is this very version's (the producer sending it again): written again in
  // place. Any other entry there, another producer's (a model switched to another producer and
  // back), is never written over: its directory number was that producer's newest.
  const bool again = offset_number && std::any_of(stored_versions.begin(), stored_versions.end(), [&](const StoredVersion& v) {
                       return v.number == *offset_number && v.incarnation == snapshot.incarnation && v.version == snapshot.version;
                     });
  if (again && !run_ahead) return *offset_number;
  for_each_entry(model_directory(snapshot.model), [&](const fs::directory_entry& entry) {
    const std::string name = entry.path().filename().string();
    if (is_number(name)) highest = std::max<std::uint64_t>(highest, std::stoull(name));
  });
  if (offset_number && !run_ahead && *offset_number > highest) return *offset_number;
  if (!offset_number && snapshot.version > highest) return snapshot.version;
  if (highest == std::numeric_limits<std::uint64_t>::max()) {
    throw Error(ErrorCode::kResource, "repository: model directory '" + model_directory(snapshot.model) +
                                          "' holds version number 18446744073709551615, the highest there is: no "
                                          "newer number is left to write under");
  }
  return highest + 1;
}

void make_directories(const std::string& directory, std::error_code& error) {
  error.clear();
  fs::path made;
  for (const auto& part : fs::path(directory)) {
    made /= part;
    if (part.empty() || part == "/" || part == "." || part == "..") continue;
    if (mkdir(made.c_str(), 0755) == 0) {
      // Durable before a version is renamed into it: a power loss could otherwise take the new
      // directory, and with it the version fsynced inside.
      const fs::path above = made.has_parent_path() ? made.parent_path() : fs::path(".");
      const int parent = open(above.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      const bool synced = parent >= 0 && fsync(parent) == 0;
      const int why = errno;
      if (parent >= 0) close(parent);
      if (!synced) {
        error = std::error_code(why, std::generic_category());
        return;
      }
      continue;
    }
    const int why = errno;
    if (why == EEXIST && fs::is_directory(made, error)) continue;  // a link to one counts
    if (!error) error = std::error_code(why == EEXIST ? ENOTDIR : why, std::generic_category());
    return;
  }
}

std::optional<std::string> model_directory_problem(std::string_view model) {
  if (model.find_first_of("/\\") != std::string_view::npos || (!model.empty() && model[0] == '.')) {
    return std::string("must not contain '/' or '\\' or start with '.' (it names a directory)");
  }
  if (model.size() > NAME_MAX) {
    return "is " + std::to_string(model.size()) + " bytes; at most " + std::to_string(NAME_MAX) + " (it names a directory)";
  }
  return std::nullopt;
}

std::string Repository::write(const VersionSnapshot& snapshot, std::stop_token stop) {
  const std::string model_dir = model_directory(snapshot.model);
  std::error_code ec;
  make_directories(model_dir, ec);
  if (ec) {
    errno = ec.value();
    io_error("cannot create directory", model_dir);
  }
  const std::uint64_t number = directory_number(snapshot);
  nlohmann::json metadata = metadata_doc(snapshot, number);  // refused here: before any byte is written
  const std::string final_dir = model_dir + "/" + std::to_string(number);
  const std::string temp_dir = model_dir + "/.tmp-" + std::to_string(number) + "-" + unique_suffix();
  if (mkdir(temp_dir.c_str(), 0755) != 0) io_error("cannot create directory", temp_dir);
  try {
    const std::string tensor_path = temp_dir + "/" + kTensorFile;
    int fd = create_file(tensor_path);
    try {
      write_safetensors(fd, tensor_path, snapshot, stop);
    } catch (...) {
      close(fd);
      throw;
    }
    close(fd);
    auto now = std::chrono::system_clock::now().time_since_epoch();
    write_metadata(temp_dir + "/" + kMetadataFile, std::move(metadata),
                   std::chrono::duration_cast<std::chrono::nanoseconds>(now).count());
    fsync_directory(temp_dir);
    if (::rename(temp_dir.c_str(), final_dir.c_str()) != 0) {
      const int failed = errno;
      // What holds the number: only this very version (the same producer writing it again) is
      // replaced; anything else, another producer's version included, is left as it is and named.
      std::error_code entry_ec;
      const StoredEntry held = read_entry(fs::directory_entry(final_dir, entry_ec));
      const bool same = held.version && held.version->incarnation == snapshot.incarnation &&
                        held.version->version == snapshot.version;
      if (!same) {
        const std::string what = failed == ENOTDIR ? "not a directory"
                                 : held.version ? "version " + std::to_string(held.version->version) + " of producer run " +
                                                      hex64(held.version->incarnation)
                                 : !held.why.empty() ? "not a version written here (" + held.why + ")"
                                                     : "not a version written here";
        throw Error(ErrorCode::kResource, "repository: cannot write version " + std::to_string(snapshot.version) + " of model '" +
                                              snapshot.model + "' as " + shown_text(final_dir, 4096) + ": an entry of that name is in the way, " +
                                              what + "; move it out of the model directory");
      }
      if (failed != ENOTEMPTY && failed != EEXIST) {
        errno = failed;
        io_error("cannot rename into place", final_dir);
      }
      // A version of this number exists (an earlier producer run): swap the two in one step so
      // that one complete version is visible at every moment, then delete the old one.
      if (renameat2(AT_FDCWD, temp_dir.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) != 0) {
        io_error("cannot exchange into place", final_dir);
      }
    }
    fsync_directory(model_dir);
  } catch (...) {
    fs::remove_all(temp_dir, ec);
    throw;
  }
  fs::remove_all(temp_dir, ec);  // the replaced version, after an exchange
  return final_dir;
}

std::vector<std::string> Repository::prune(const std::string& model, std::size_t keep,
                                          const std::function<bool(const std::string& directory)>& in_use) {
  const std::string model_dir = model_directory(model);
  // What this process failed to remove before, tried again at each prune: versions renamed away
  // (a file a reader held open over NFS, a mount inside) and failed writes' temporary directories
  // (whose removal needs descriptors a process at its open-file limit lacks). They stayed until a
  // restart, their space lost. Those that still cannot be removed are returned, each prune while
  // they stay (a write's own temporary directory, the version an exchange replaced included, is
  // said only so); they are no failure of the prune. Only the model's one writer writes and
  // prunes, one after the other, so none of them is in use now.
  std::vector<fs::path> left;
  for_each_entry(model_dir, [&](const fs::directory_entry& entry) {
    const std::string name = entry.path().filename().string();
    if ((name.rfind(".del-", 0) == 0 || name.rfind(".tmp-", 0) == 0) && made_by_this_process(name)) left.push_back(entry.path());
  });
  std::vector<std::string> stuck;
  for (const auto& path : left) {
    std::error_code ec;
    fs::remove_all(path, ec);
    if (ec) stuck.push_back(shown_text(path.string(), 4096) + ": " + ec.message());
  }
  auto versions = list(model);
  std::vector<std::string> doomed;
  for (std::size_t i = keep; i < versions.size(); ++i) {
    if (in_use && in_use(versions[i].directory)) continue;
    // Renamed first, so a crash part-way through deleting never leaves a partial version
    // under a version number.
    std::string name = model_dir + "/.del-" + fs::path(versions[i].directory).filename().string() + "-" + unique_suffix();
    if (::rename(versions[i].directory.c_str(), name.c_str()) != 0) io_error("cannot rename away", versions[i].directory);
    doomed.push_back(name);
  }
  if (!doomed.empty()) fsync_directory(model_dir);
  for (const auto& d : doomed) {
    std::error_code ec;
    fs::remove_all(d, ec);
    if (ec) {
      errno = ec.value();
      io_error("cannot remove", d);
    }
  }
  return stuck;
}

namespace {

// nlohmann-json converts -1 to an unsigned integer without a word (to 2^64 - 1).
std::uint64_t unsigned_at(const nlohmann::json& doc, const char* key) {
  const auto& value = doc.at(key);
  if (!value.is_number_unsigned()) throw std::invalid_argument(std::string("'") + key + "' is not an integer >= 0");
  return value.get<std::uint64_t>();
}

StoredEntry read_entry(const fs::directory_entry& entry) {
  std::string name = entry.path().filename().string();
  if (!is_number(name)) return {};
  std::error_code ec;
  const bool directory = entry.is_directory(ec);
  if (ec) return {std::nullopt, "cannot be read: " + ec.message()};
  if (!directory) return {};
  StoredVersion v;
  v.directory = entry.path().string();
  // Another tool's version (an existing Triton repository's "1/model.onnx") is expected beside
  // ours: said as what it is, not as a damaged version of ours.
  if (!fs::exists(v.directory + "/" + kMetadataFile, ec) && !ec) {
    return {std::nullopt, std::string("no ") + kMetadataFile + ": not a version modelcast wrote (another tool's?); left as it is"};
  }
  try {
    auto doc = nlohmann::json::parse(RegularFile(v.directory + "/" + kMetadataFile).read_all(kMaxMetadataBytes));
    v.version = unsigned_at(doc, "version");
    // Written before numbers were kept apart.
    v.number = doc.contains("repository_version") ? unsigned_at(doc, "repository_version") : v.version;
    v.step = doc.at("step").get<std::int64_t>();
    v.incarnation = incarnation_of(doc.at("producer_incarnation"));
    v.written_at_ns = doc.at("written_at_ns").get<std::int64_t>();
    v.metadata = doc.at("metadata").get<std::map<std::string, std::string>>();
    v.tensor_order = doc.at("tensors").get<std::vector<std::string>>();
    if (doc.contains("tensor_xxh3")) {  // absent in versions written before digests were kept
      const auto& digests = doc.at("tensor_xxh3");
      for (const auto& tensor : v.tensor_order) {
        if (!digests.contains(tensor)) throw std::invalid_argument("tensor_xxh3 has no digest of tensor '" + tensor + "'");
        v.tensor_digests[tensor] = hex_value(digests.at(tensor), "the tensor_xxh3 of tensor '" + tensor + "'");
      }
    }
    if (doc.contains("tensor_layout")) {  // absent in versions written before layouts were kept
      const auto& layouts = doc.at("tensor_layout");
      for (const auto& tensor : v.tensor_order) {
        if (!layouts.contains(tensor)) throw std::invalid_argument("tensor_layout has no entry for tensor '" + tensor + "'");
        const auto& layout = layouts.at(tensor);
        v.tensor_layouts[tensor] = {layout.at("dtype").get<std::string>(), layout.at("shape").get<std::vector<std::int64_t>>()};
      }
    }
  } catch (const std::exception& e) {
    return {std::nullopt, std::string(kMetadataFile) + " cannot be read: " + e.what()};
  }
  if (std::to_string(v.number) != name) {
    return {std::nullopt, std::string(kMetadataFile) + " says repository version " + std::to_string(v.number)};
  }
  if (!fs::exists(v.directory + "/" + kTensorFile, ec)) {
    return {std::nullopt, ec ? std::string(kTensorFile) + " cannot be read: " + ec.message() : std::string("no ") + kTensorFile};
  }
  return {std::move(v), {}};
}

}  // namespace

void check_tensor_bytes(const StoredVersion& version, const std::string& tensor, const void* data,
                        std::uint64_t bytes) {
  auto written = version.tensor_digests.find(tensor);
  if (written == version.tensor_digests.end()) return;
  if (digest_bytes(data, bytes) != written->second) {
    throw Error(ErrorCode::kIntegrity, "the bytes of tensor '" + tensor + "' in " + version.directory + "/" + kTensorFile +
                                           " are not those written (their XXH3 differs from metadata.json's): the file was altered or damaged");
  }
}

void check_tensor_layout(const StoredVersion& version, const std::string& tensor, DType dtype,
                         const std::vector<std::int64_t>& shape) {
  auto written = version.tensor_layouts.find(tensor);
  if (written == version.tensor_layouts.end()) return;
  auto shape_text = [](const std::vector<std::int64_t>& extents) {
    std::string text = "[";
    for (std::size_t i = 0; i < extents.size(); ++i) text += (i ? "," : "") + std::to_string(extents[i]);
    return text + "]";
  };
  if (written->second.dtype != safetensors_dtype(dtype) || written->second.shape != shape) {
    throw Error(ErrorCode::kIntegrity, "the header of " + version.directory + "/" + kTensorFile + " gives tensor '" +
                                           tensor + "' dtype " + safetensors_dtype(dtype) + " and shape " + shape_text(shape) +
                                           ", metadata.json " + written->second.dtype + " and " +
                                           shape_text(written->second.shape) + ": the file was altered or damaged");
  }
}

std::vector<std::string> Repository::damaged(const std::string& model) const {
  std::vector<std::string> out;
  for_each_entry(model_directory(model), [&](const fs::directory_entry& entry) {
    if (auto read = read_entry(entry); !read.why.empty()) out.push_back(entry.path().string() + ": " + read.why);
  });
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<StoredVersion> Repository::list(const std::string& model) const {
  std::vector<StoredVersion> out;
  for_each_entry(model_directory(model), [&](const fs::directory_entry& entry) {
    if (auto read = read_entry(entry); read.version) out.push_back(std::move(*read.version));
  });
  // By number, not by written_at_ns: numbers rise in the order versions are written (write()),
  // and the highest is what Triton loads; a wall clock stepped back, or a repository copied from
  // a host whose clock runs ahead, would otherwise order the version just written last, and
  // prune() delete it at once.
  std::sort(out.begin(), out.end(), [](const StoredVersion& a, const StoredVersion& b) { return a.number > b.number; });
  return out;
}

Repository::Cleaned Repository::clean(const std::string& model) {
  Cleaned cleaned;
  for_each_entry(model_directory(model), [&](const fs::directory_entry& entry) {
    std::string name = entry.path().filename().string();
    if ((name.rfind(".tmp-", 0) == 0 || name.rfind(".del-", 0) == 0) && !made_by_this_process(name)) {
      std::error_code failed;
      fs::remove_all(entry.path(), failed);
      if (failed) {
        cleaned.left.push_back(entry.path().string() + ": " + failed.message());
      } else {
        ++cleaned.removed;
      }
    }
  });
  return cleaned;
}

}  // namespace modelcast::repository
