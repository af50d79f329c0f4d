#include "daemon/recovery.h"

#include <unistd.h>

#include <algorithm>
#include <set>
#include <cerrno>

#include <spdlog/spdlog.h>

#include "core/repository/regular_file.h"
#include "core/repository/repository.h"
#include "core/repository/safetensors.h"
#include "modelcast/error.h"

namespace modelcastd {
namespace {

namespace repo = modelcast::repository;

// Reads the tensor bytes of `path` into `buffer`.
void load(const std::string& path, const repo::SafetensorsLayout& layout, ShmBuffer& buffer) {
  const repo::RegularFile file(path);
  const int fd = file.fd();
  std::uint64_t done = 0;
  while (done < layout.data_bytes) {
    auto piece = static_cast<std::size_t>(std::min<std::uint64_t>(layout.data_bytes - done, 64u << 20));
    ssize_t n = pread(fd, buffer.memory().data() + done, piece, static_cast<off_t>(layout.data_start + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw modelcast::Error(modelcast::ErrorCode::kIntegrity, "cannot read '" + path + "' to its end");
    done += static_cast<std::uint64_t>(n);
  }
}

}  // namespace

ServedPtr recover_newest(const std::string& root, const std::string& model, std::uint64_t max_bytes) {
  auto log = spdlog::get("modelcastd");
  repo::Repository repository(root);
  const auto cleaned = repository.clean(model);
  if (cleaned.removed > 0) {
    log->warn("model {}: removed {} unfinished repository entr{} left by an interrupted write", model, cleaned.removed,
              cleaned.removed == 1 ? "y" : "ies");
  }
  for (const auto& why : cleaned.left) {
    log->warn("model {}: cannot remove an unfinished repository entry (it is not served): {}", model, why);
  }
  for (const auto& why : repository.damaged(model)) log->warn("model {}: not served: {}", model, why);
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
      auto served = std::make_shared<ServedVersion>();
      served->model = model;
      served->buffer = std::make_shared<ShmBuffer>("modelcastd:" + model + ":recovered", std::max<std::uint64_t>(layout.data_bytes, 1));
      load(path, layout, *served->buffer);
      auto& m = served->manifest;
      m.buffer_id = served->buffer->id();
      m.buffer_bytes = served->buffer->size();
      m.version = stored.version;
      m.step = stored.step;
      m.incarnation = stored.incarnation;
      m.source = "repository";
      m.metadata = stored.metadata;
      std::set<std::string> named;  // with the counts equal, distinct names are every tensor once
      for (const auto& name : stored.tensor_order) {
        if (!named.insert(name).second) {
          throw modelcast::Error(modelcast::ErrorCode::kIntegrity,
                                 "metadata.json of " + stored.directory + " names tensor '" + name + "' twice");
        }
        auto t = std::find_if(layout.tensors.begin(), layout.tensors.end(), [&](auto& x) { return x.name == name; });
        if (t == layout.tensors.end()) {
          throw modelcast::Error(modelcast::ErrorCode::kIntegrity, "tensor '" + name + "' missing from " + path);
        }
        repo::check_tensor_bytes(stored, name, served->buffer->memory().data() + t->begin, t->end - t->begin);
        m.tensors.push_back({t->name, t->dtype, t->shape, t->begin, t->end - t->begin, {}, {}, {}, 0});
      }
      if (stored.tensor_digests.empty()) {
        log->warn("model {}: {} was written without digests (by an older modelcastd): its bytes are served unchecked",
                  model, stored.directory);
      }
      served->installed_at = std::chrono::system_clock::now();
      served->repository_path = stored.directory;
      return served;
    } catch (const modelcast::Error& e) {
      if (e.code() == modelcast::ErrorCode::kResource && std::string(e.what()).find("shared-memory") != std::string::npos) throw;
      log->warn("model {}: skipping {}: {}", model, stored.directory, e.what());
    }
  }
  return nullptr;
}

}  // namespace modelcastd
