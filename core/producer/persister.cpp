#include "core/producer/persister.h"

#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/log.h"
#include "common/shown_text.h"
#include "core/repository/repository.h"
#include "modelcast/error.h"

namespace modelcast::producer {
namespace {

const std::string kHolder = "(persist writer)";

// Refuses, at construction, what would make every write fail later: a bad option should stop
// the trainer at start, not after a day of training without checkpoints.
void check(const ProducerOptions& options) {
  const auto& p = options.persist;
  if (p.every == 0) throw Error(ErrorCode::kInvalidArgument, "persist.every must be >= 1, got 0");
  if (p.keep == 0) throw Error(ErrorCode::kInvalidArgument, "persist.keep must be >= 1, got 0");
  if (options.snapshot_slots < 3) {
    throw Error(ErrorCode::kInvalidArgument,
                "persist needs snapshot_slots >= 3 (one is held while a version is written), got " +
                    std::to_string(options.snapshot_slots));
  }
  if (auto why = repository::model_directory_problem(options.model_name)) {
    throw Error(ErrorCode::kInvalidArgument, "persist: model_name " + shown_text(options.model_name) + " " + *why);
  }
  // A NUL ends a path for the system: the versions would go to another directory than named.
  if (p.directory.find('\0') != std::string::npos) {
    throw Error(ErrorCode::kInvalidArgument,
                "persist.directory " + shown_text(p.directory, 200) + " has a NUL byte, which no path holds");
  }
  std::error_code ec;
  // Not std::filesystem::create_directories: under umask 002 it made them group-writable, which
  // modelcastd (and the repository's own rule) refuses for a repository.
  repository::make_directories(p.directory, ec);
  if (ec) {
    throw Error(ErrorCode::kInvalidArgument,
                "persist.directory '" + p.directory + "' cannot be created: " + ec.message());
  }
  // Permission bits do not tell (root, read-only mounts): create and remove a file.
  std::string probe = p.directory + "/.probe-XXXXXX";
  int fd = mkstemp(probe.data());
  if (fd < 0) {
    throw Error(ErrorCode::kInvalidArgument,
                "persist.directory '" + p.directory + "' is not writable: " + std::strerror(errno));
  }
  close(fd);
  unlink(probe.c_str());
}

// Keeps the slot pinned for as long as the writer holds the snapshot.
class SlotPin {
 public:
  SlotPin(SnapshotStore& store, std::uint64_t lease_id) : store_(store), lease_id_(lease_id) {}
  ~SlotPin() { store_.unpin(lease_id_); }
  SlotPin(const SlotPin&) = delete;
  SlotPin& operator=(const SlotPin&) = delete;

 private:
  SnapshotStore& store_;
  std::uint64_t lease_id_;
};

}  // namespace

Persister::Persister(const ProducerOptions& options, std::uint64_t incarnation, SnapshotStore& store,
                     StatsBox& stats, std::shared_ptr<spdlog::logger> log)
    : options_(options.persist),
      model_(options.model_name),
      first_version_(options.first_version),
      incarnation_(incarnation),
      store_(store),
      stats_(stats),
      log_(std::move(log)) {
  check(options);
  repository::WriterOptions writer;
  writer.root = options_.directory;
  writer.keep = options_.keep;
  writer.every = 1;  // consider() decides which versions are due
  writer.on_written = [this](const repository::VersionSnapshot& s, const std::string& directory,
                             std::chrono::nanoseconds took) {
    log_->info("version {} persisted to {} in {} ms", s.version, directory,
               std::chrono::duration_cast<std::chrono::milliseconds>(took).count());
    newest_written_ = "version " + std::to_string(s.version) + " in " + directory;
    stats_.update([](ProducerStats& st) {
      st.persisted_versions++;
      st.persist_last_error.clear();  // the disk took a write: an earlier failure is over (a prune's is set next)
    });
    if (options_.on_persisted) options_.on_persisted(s.version, directory);
  };
  writer.on_failed = [this](const repository::VersionSnapshot& s, const std::string& error) {
    const std::string line = "persisting version " + std::to_string(s.version) +
                             " failed (training and delivery go on; the newest checkpoint is " +
                             (newest_written_.empty() ? "none of this run's" : newest_written_) + "): " + error;
    if (auto note = failures_logged_.admit(model_, line)) log_->error("{}{}", line, *note);
    stats_.update([&](ProducerStats& st) {
      st.persist_failures++;
      st.persist_last_error = error;
    });
    if (options_.on_persist_failed) options_.on_persist_failed(s.version, error);
  };
  writer.on_prune_failed = [this](const repository::VersionSnapshot& s, const std::string& error) {
    const std::string line =
        "version " + std::to_string(s.version) + " persisted, but older versions past persist.keep stay: " + error;
    if (auto note = failures_logged_.admit(model_, line)) log_->warn("{}{}", line, *note);
    stats_.update([&](ProducerStats& st) { st.persist_last_error = error; });
  };
  writer.on_notice = [this](const std::string&, const std::string& notice) { log_->warn("persist.directory: {}", notice); };
  writer_ = std::make_unique<repository::RepositoryWriter>(std::move(writer));
  std::string unlocked;  // why the directory could not be locked ("" when it is)
  try {
    unlocked = writer_->hold(model_);
    if (!unlocked.empty()) log_->warn("persist.directory: {}", unlocked);
  } catch (const Error& e) {
    // Not one for later: every write would fail (or clobber the other writer's), unseen for hours.
    throw Error(e.code() == ErrorCode::kState ? ErrorCode::kState : ErrorCode::kInvalidArgument,
                std::string("persist.directory: ") + e.what());
  }
  // What a run that crashed mid-write or mid-prune left (locked now: no other process works
  // there). Left, a whole model's unfinished copy took the room of a version on a disk sized for
  // `keep` of them, and every write after failed for want of space. Not on a file system that
  // took no lock: another writer's entries there may be in use.
  const auto cleaned = unlocked.empty() ? repository::Repository(options_.directory).clean(model_)
                                        : repository::Repository::Cleaned{};
  if (cleaned.removed > 0) {
    log_->warn("persist.directory: removed {} unfinished entr{} left by an interrupted run", cleaned.removed,
               cleaned.removed == 1 ? "y" : "ies");
  }
  for (const auto& why : cleaned.left) log_->warn("persist.directory: cannot remove an unfinished entry: {}", why);
  log_->info("persisting every {} version(s) to {}/{}, keeping {}", options_.every, options_.directory, model_,
             options_.keep);
}

Persister::~Persister() = default;

void Persister::consider(std::uint64_t version) {
  if (version < first_version_ || (version - first_version_) % options_.every != 0) return;
  auto pinned = store_.pin(version, kHolder);
  if (!pinned) {  // already replaced by newer versions: nothing to write from
    stats_.update([](ProducerStats& st) { st.persist_skipped++; });
    return;
  }
  auto snapshot = std::make_shared<repository::VersionSnapshot>();
  snapshot->keepalive = std::make_shared<SlotPin>(store_, pinned->lease_id);
  snapshot->model = model_;
  snapshot->version = version;
  snapshot->step = pinned->manifest.step;
  snapshot->incarnation = incarnation_;
  snapshot->metadata = pinned->manifest.metadata;
  for (const auto& t : pinned->manifest.tensors) {
    snapshot->tensors.push_back({t.spec.name, t.spec.dtype, t.spec.shape, pinned->base + t.offset, t.size});
  }
  if (!writer_->offer(std::move(snapshot))) {
    log_->debug("version {} not persisted: the previous write is still going", version);
    stats_.update([](ProducerStats& st) { st.persist_skipped++; });
  }
}

}  // namespace modelcast::producer
