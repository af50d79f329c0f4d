#include "daemon/recovery.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <vector>

#include <spdlog/spdlog.h>

#include "core/model/manifest.h"
#include "core/repository/regular_file.h"
#include "core/repository/repository.h"
#include "core/repository/safetensors.h"
#include "common/clock.h"
#include "common/shown_text.h"
#include "core/wire/socket_directory.h"
#include "modelcast/types.h"
#include "modelcast/error.h"

namespace modelcastd {
namespace {

namespace repo = modelcast::repository;

// Each tensor at the producer's alignment (its slots'): the file packs them, and a reader taking
// a float (or a SIMD load) at an odd address has undefined behaviour.
std::uint64_t aligned(std::uint64_t offset) {
  constexpr std::uint64_t kAlignment = modelcast::kTensorAlignment;
  return (offset + kAlignment - 1) / kAlignment * kAlignment;
}

// Reads `bytes` bytes at `from` (in the file) of `path` to `to`.
void read_exactly(int fd, const std::string& path, std::byte* to, std::uint64_t bytes, std::uint64_t from) {
  std::uint64_t done = 0;
  while (done < bytes) {
    auto piece = static_cast<std::size_t>(std::min<std::uint64_t>(bytes - done, 64u << 20));
    ssize_t n = pread(fd, to + done, piece, static_cast<off_t>(from + done));
    if (n < 0 && errno == EINTR) continue;
    // A read that fails is the disk's (said as such, with its cause); one that ends early, the file's.
    if (n < 0) {
      throw modelcast::Error(modelcast::ErrorCode::kResource,
                             "cannot read " + modelcast::shown_text(path, 4096) + ": " + std::strerror(errno));
    }
    if (n == 0) {
      throw modelcast::Error(modelcast::ErrorCode::kIntegrity,
                             "cannot read " + modelcast::shown_text(path, 4096) + " to its end");
    }
    done += static_cast<std::uint64_t>(n);
  }
}

}  // namespace

void check_repository_directory(const std::string& directory) {
  modelcast::wire::check_private_directory(
      directory, "repository '" + modelcast::printable_text(directory, 4096) + "': ",
      ": whoever can write it chooses the weights served after a restart, signed producers or not. Let only the "
      "daemon's user write it (chmod go-w), as systemd's StateDirectory (/var/lib/modelcastd) is",
      "repository");
}

ServedPtr recover_newest(const std::string& root, const std::string& model, std::uint64_t max_bytes, bool locked) {
  auto log = spdlog::get("modelcastd");
  repo::Repository repository(root);
  const std::string model_directory = repository.model_directory(model);
  if (std::error_code ec; std::filesystem::is_directory(model_directory, ec)) {
    try {
      check_repository_directory(model_directory);
    } catch (const modelcast::Error& e) {
      log->error("model {}: nothing recovered: {}", model, e.what());
      return nullptr;
    }
  }
  const auto cleaned = locked ? repository.clean(model) : repo::Repository::Cleaned{};
  if (cleaned.removed > 0) {
    log->warn("model {}: removed {} unfinished repository entr{} left by an interrupted write", model, cleaned.removed,
              cleaned.removed == 1 ? "y" : "ies");
  }
  for (const auto& why : cleaned.left) {
    log->warn("model {}: cannot remove an unfinished repository entry (it is not served): {}", model,
              modelcast::printable_text(why, 1000));
  }
  for (const auto& why : repository.damaged(model)) {
    log->warn("model {}: not served: {}", model, modelcast::printable_text(why, 1000));
  }
  for (const auto& stored : repository.list(model)) {
    std::string path = stored.directory + "/" + repo::kTensorFile;
    try {
      auto layout = repo::read_safetensors_layout(path);
      if (layout.data_bytes > max_bytes) {
        log->warn("model {}: {} holds {} bytes, more than max_model_bytes; not served", model, path, layout.data_bytes);
        continue;
      }
      if (layout.tensors.size() != stored.tensor_order.size()) {
        throw modelcast::Error(modelcast::ErrorCode::kIntegrity, "metadata.json and " + path + " list different tensors");
      }
      // Names and metadata keys are shown in logs and handed to clients as the consumer's are:
      // held to its rule, as a producer's would be.
      for (const auto& [key, value] : stored.metadata) {
        if (auto why = modelcast::name_problem(key)) {
          throw modelcast::Error(modelcast::ErrorCode::kIntegrity, "metadata.json has a key " + modelcast::shown_text(key) + " that " + *why);
        }
        // C readers of a value stop at a NUL: the consumer refuses one, and so does recovery.
        if (value.find('\0') != std::string::npos) {
          throw modelcast::Error(modelcast::ErrorCode::kIntegrity,
                                 "metadata.json has a value of key " + modelcast::shown_text(key) + " with a NUL byte");
        }
      }
      std::map<std::string, const repo::StoredTensor*> by_name;
      for (const auto& t : layout.tensors) by_name.emplace(t.name, &t);
      // Placed in the producer's order, each aligned as the producer aligns them.
      std::vector<std::pair<const repo::StoredTensor*, std::uint64_t>> placed;
      std::set<const repo::StoredTensor*> used;  // with the counts equal: every tensor once
      std::uint64_t end = 0;
      for (const auto& name : stored.tensor_order) {
        if (auto why = modelcast::name_problem(name)) {
          throw modelcast::Error(modelcast::ErrorCode::kIntegrity, "metadata.json names a tensor " + modelcast::shown_text(name) + " that " + *why);
        }
        const auto t = by_name.find(name);
        if (t == by_name.end()) {
          throw modelcast::Error(modelcast::ErrorCode::kIntegrity, "tensor " + modelcast::shown_text(name) + " missing from " + path);
        }
        if (!used.insert(t->second).second) {
          throw modelcast::Error(modelcast::ErrorCode::kIntegrity,
                                 "metadata.json of " + stored.directory + " names tensor " + modelcast::shown_text(name) + " twice");
        }
        const std::uint64_t at = aligned(end);
        placed.emplace_back(t->second, at);
        end = at + (t->second->end - t->second->begin);
      }
      if (end > max_bytes) {  // the packed size fit; placed as the producer places them, it does not
        log->warn("model {}: {} takes {} bytes with its tensors aligned, more than max_model_bytes; not served", model,
                  path, end);
        continue;
      }
      auto served = std::make_shared<ServedVersion>();
      served->model = model;
      served->buffer = std::make_shared<ShmBuffer>("modelcastd:" + model + ":recovered", std::max<std::uint64_t>(end, 1));
      const repo::RegularFile file(path);
      auto& m = served->manifest;
      m.buffer_id = served->buffer->id();
      m.buffer_bytes = served->buffer->size();
      m.version = stored.version;
      m.step = stored.step;
      m.incarnation = stored.incarnation;
      m.source = "repository";
      m.metadata = stored.metadata;
      for (const auto& [t, at] : placed) {
        const std::uint64_t bytes = t->end - t->begin;
        std::byte* to = served->buffer->memory().data() + at;
        read_exactly(file.fd(), path, to, bytes, layout.data_start + t->begin);
        repo::check_tensor_layout(stored, t->name, t->dtype, t->shape);
        repo::check_tensor_bytes(stored, t->name, to, bytes);
        m.tensors.push_back({t->name, t->dtype, t->shape, at, bytes, {}, {}, {}, 0});
      }
      if (stored.tensor_digests.empty()) {
        log->warn("model {}: {} was written without digests (by an older modelcastd): its bytes are served unchecked",
                  model, stored.directory);
      }
      // When it was first installed, as far as the repository says (its write): age_seconds
      // restarting at 0 made a version hours old look fresh after every restart.
      // Not after now, nor before the epoch: a damaged or hand-edited time near INT64_MIN made
      // the age's subtraction overflow.
      const std::int64_t written_ns = std::clamp<std::int64_t>(stored.written_at_ns, 0, modelcast::realtime_ns());
      served->installed_at = std::chrono::system_clock::time_point(
          std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::nanoseconds(written_ns)));
      served->repository_path = stored.directory;
      return served;
    } catch (const modelcast::Error& e) {
      // The daemon's own memory failing is no fault of the version (shm_buffer.cpp's errors start
      // so); a read error's text names a path, which may hold any word.
      if (e.code() == modelcast::ErrorCode::kResource && std::string(e.what()).rfind("shared-memory buffer:", 0) == 0) {
        throw;
      }
      log->warn("model {}: skipping {}: {}", model, stored.directory, modelcast::printable_text(e.what(), 1000));
    }
  }
  return nullptr;
}

}  // namespace modelcastd
