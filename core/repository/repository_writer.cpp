#include "core/repository/repository_writer.h"

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "common/shown_text.h"
#include "common/library_thread.h"
#include "core/repository/io_error.h"
#include "modelcast/error.h"

namespace modelcast::repository {

RepositoryWriter::RepositoryWriter(WriterOptions options) : options_(std::move(options)) {
  if (options_.keep == 0 || options_.every == 0) {
    throw Error(ErrorCode::kInvalidArgument, "repository writer: keep and every must be >= 1");
  }
  thread_ = library_thread("repository writer", [this] { run(); });
}

RepositoryWriter::~RepositoryWriter() {
  // Its own thread cannot join itself: std::thread::join throws out of this destructor and the
  // process ends on "Resource deadlock avoided", which names nothing. Said, then ended.
  if (std::this_thread::get_id() == thread_.get_id()) {
    std::fprintf(stderr,
                 "modelcast: the checkpoint writer was destroyed from its own thread: a persist callback "
                 "(PersistOptions::on_persisted or on_persist_failed) must not destroy its Producer\n");
    std::abort();
  }
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  if (options_.abandon_on_stop) stop_write_.request_stop();
  wake_.notify_all();
  thread_.join();
}

void RepositoryWriter::submit(std::shared_ptr<const VersionSnapshot> snapshot) {
  {
    std::lock_guard lock(mutex_);
    if (submitted_[snapshot->model]++ % options_.every != 0) return;
    auto& slot = pending_[snapshot->model];
    if (slot) ++stats_.skipped;
    slot = std::move(snapshot);  // the replaced one's bytes are released here
  }
  wake_.notify_one();
}

bool RepositoryWriter::offer(std::shared_ptr<const VersionSnapshot> snapshot) {
  {
    std::lock_guard lock(mutex_);
    if (writing_ || !pending_.empty()) return false;
    pending_[snapshot->model] = std::move(snapshot);
  }
  wake_.notify_one();
  return true;
}

std::string RepositoryWriter::relock(std::shared_ptr<ModelDirectoryLock>& held) {
  auto fresh = std::make_shared<ModelDirectoryLock>(held->directory());  // throws as the constructor does
  std::string notice = "model directory '" + held->directory() + "' was removed while this writer held it; " +
                       (fresh->unlocked().empty() ? "locked again as it was made anew" : fresh->unlocked());
  held = std::move(fresh);  // `held` is the map's entry: the lost lock is let go here
  return notice;
}

std::string RepositoryWriter::hold(const std::string& model) {
  std::lock_guard call(calls_);
  std::string notice;
  std::string unlocked;
  {
    std::lock_guard lock(mutex_);
    let_go_.erase(model);  // as released_ below, whatever comes of the lock
  }
  {
    std::lock_guard lock(locking_);
    released_.erase(model);
    if (auto found = locks_.find(model); found != locks_.end()) {
      // Checked as before a write: recovery reads and cleans the directory once this returns.
      if (found->second->lost()) notice = relock(found->second);
      unlocked = found->second->unlocked();
    } else {
      unmade_.insert(model);  // until a lock is made: here, or before a write (check_held)
      std::shared_ptr<ModelDirectoryLock> made;
      try {
        made = std::make_shared<ModelDirectoryLock>(Repository(options_.root).model_directory(model));
      } catch (const Error& e) {
        if (e.code() != ErrorCode::kResource) unmade_.erase(model);  // another writer's: refused, not held
        throw;
      }
      unmade_.erase(model);
      unlocked = made->unlocked();
      locks_.emplace(model, std::move(made));
    }
  }
  if (!notice.empty() && options_.on_notice) options_.on_notice(model, notice);
  return unlocked;
}

void RepositoryWriter::release(const std::string& model) {
  std::shared_ptr<ModelDirectoryLock> gone;  // let go outside the mutexes, calls_ included
  std::shared_ptr<const VersionSnapshot> dropped;
  std::lock_guard call(calls_);
  {
    std::lock_guard lock(locking_);
    if (auto found = locks_.find(model); found != locks_.end()) {
      gone = std::move(found->second);
      locks_.erase(found);
    } else if (unmade_.erase(model) == 0) {
      return;  // not held
    }
    released_.insert(model);
  }
  std::lock_guard lock(mutex_);
  if (auto pending = pending_.find(model); pending != pending_.end()) {
    dropped = std::move(pending->second);
    pending_.erase(pending);
  }
  // A model removed from its owner's configuration is no standing problem of the repository's:
  // its failure would otherwise be shown as last_error until the process restarts.
  let_go_.insert(model);
  forget_failure(model);
}

void RepositoryWriter::forget_failure(const std::string& model) {
  failing_.erase(model);
  if (failed_last_ == model) failed_last_ = failing_.empty() ? std::string() : failing_.begin()->first;
  stats_.last_error = failing_.empty() ? std::string() : failing_[failed_last_];
}

RepositoryWriter::HeldCheck RepositoryWriter::check_held(const std::string& model) {
  std::string notice;
  {
    std::lock_guard lock(locking_);
    if (released_.contains(model)) {
      return {"model '" + model + "' was released (its owner stopped writing it) before this version was written", true};
    }
    // Held while its directory could not be made or opened (a read-only mount): without a lock a
    // write that now succeeds would share the directory with a writer that locked it since.
    if (unmade_.contains(model)) {
      try {
        auto made = std::make_shared<ModelDirectoryLock>(Repository(options_.root).model_directory(model));
        notice = "model directory '" + made->directory() + "' could be made and " +
                 (made->unlocked().empty() ? "is locked now" : "is written unlocked: " + made->unlocked());
        locks_.emplace(model, std::move(made));
        unmade_.erase(model);
      } catch (const Error& e) {
        return {std::string("the directory of model '") + model + "' has no lock held by this writer: " + e.what()};
      }
    }
    auto found = locks_.find(model);
    if (found == locks_.end() || !found->second->lost()) {
      if (notice.empty()) return {};
    } else {
      const std::string directory = found->second->directory();
      try {
        notice = relock(found->second);
      } catch (const Error& e) {
        return {"model directory " + shown_text(directory, 4096) +
                " was removed while this writer held it, and cannot be locked again: " + e.what()};
      }
    }
  }
  if (options_.on_notice) options_.on_notice(model, notice);
  return {};
}

std::optional<std::string> RepositoryWriter::make_room(Repository& repository, const VersionSnapshot& snapshot,
                                                      int error_number) const {
  if (!options_.make_room_when_full || (error_number != ENOSPC && error_number != EDQUOT)) return std::nullopt;
  std::uint64_t needed = 0;
  for (const auto& t : snapshot.tensors) needed += t.bytes;
  struct statvfs fs{};
  if (statvfs(repository.model_directory(snapshot.model).c_str(), &fs) != 0) return std::nullopt;
  const std::uint64_t available = static_cast<std::uint64_t>(fs.f_bavail) * fs.f_frsize;
  // The tensors' bytes and a margin: the safetensors header and metadata.json (each lists every
  // tensor), and the last block of each of the two files.
  const std::uint64_t margin = 2 * static_cast<std::uint64_t>(fs.f_bsize) + 1024 + 512 * snapshot.tensors.size();
  std::vector<StoredVersion> stored;
  std::uint64_t freed = 0;  // what removing all but the newest frees, as du would count it
  std::size_t removed = 0;  // those versions, less any a hook still reads (in_use)
  try {
    stored = repository.list(snapshot.model);
    if (stored.size() <= 1) return std::nullopt;  // the newest complete version always stays
    for (std::size_t i = 1; i < stored.size(); ++i) {
      if (options_.in_use && options_.in_use(stored[i].directory)) continue;
      ++removed;
      for (const auto& entry : std::filesystem::recursive_directory_iterator(stored[i].directory)) {
        struct stat st{};
        if (::lstat(entry.path().c_str(), &st) == 0) freed += static_cast<std::uint64_t>(st.st_blocks) * 512;
      }
    }
    // Removing them would not let this version in (a disk filled by others; a quota, which the
    // file system's free space does not show: there only what they free counts): they stay, and
    // the write's own error says why.
    if (removed == 0 || (error_number == EDQUOT ? 0 : available) + freed < needed + margin) return std::nullopt;
  } catch (const std::exception&) {
    return std::nullopt;  // what could not be measured is left as it is: the write's own error says why
  }
  // Throws: the caller says it with the write's error. Leftovers that stay are said with the
  // notice (the prune after the write says them only where the write succeeds).
  const auto stuck = repository.prune(snapshot.model, 1, options_.in_use);
  std::string left;
  for (const auto& s : stuck) left += "; cannot remove what an earlier write or prune left: " + s;
  return "no room for version " + std::to_string(snapshot.version) + " (" + std::to_string(needed) + " bytes, " +
         std::to_string(available) + " free): removed the " + std::to_string(removed) +
         " older stored versions (" + std::to_string(freed) + " bytes), keeping the newest (directory " +
         stored.front().directory + "), and tries it again; keep = " + std::to_string(options_.keep) +
         " versions of this size do not fit on this file system" + left;
}

WriterStats RepositoryWriter::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void RepositoryWriter::run() {
  Repository repository(options_.root);
  std::string last_model;
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || !pending_.empty(); });
    if (stop_) return;
    // Round robin over models, so one that updates constantly cannot starve the others.
    auto next = pending_.upper_bound(last_model);
    if (next == pending_.end()) next = pending_.begin();
    last_model = next->first;
    auto snapshot = std::move(next->second);
    pending_.erase(next);
    writing_ = true;
    lock.unlock();
    auto start = std::chrono::steady_clock::now();
    std::string directory;
    auto [error, released] = check_held(snapshot->model);
    for (bool retried = false; error.empty();) {
      int error_number = 0;
      try {
        directory = repository.write(*snapshot, stop_write_.get_token());
        break;
      } catch (const IoError& e) {
        error = e.what();
        error_number = e.error_number();
      } catch (const std::exception& e) {
        error = e.what();
      }
      if (retried || stop_write_.stop_requested()) break;
      std::optional<std::string> notice;
      try {
        notice = make_room(repository, *snapshot, error_number);
      } catch (const std::exception& e) {
        // Versions renamed away before the failure are gone from the listing: said, not dropped.
        error += "; removing the older versions to make room failed: " + std::string(e.what());
        break;
      }
      if (!notice) break;
      if (options_.on_notice) options_.on_notice(snapshot->model, *notice);
      error.clear();
      retried = true;
    }
    auto took = std::chrono::steady_clock::now() - start;
    std::string prune_error;
    std::vector<std::string> stuck;  // leftovers of this process that still cannot be removed
    try {
      if (error.empty()) stuck = repository.prune(snapshot->model, options_.keep, options_.in_use);
    } catch (const std::exception& e) {
      prune_error = e.what();  // the new version is in place; old ones stay until the next prune
    }
    std::uint64_t bytes = 0;
    for (const auto& t : snapshot->tensors) bytes += t.bytes;
    // The callbacks see the version's description only: its bytes are released first, and the
    // writer counts as idle, so a callback that takes long holds no snapshot memory and a
    // caller of offer() that sees it return can hand over its next version at once.
    VersionSnapshot done = *snapshot;
    done.keepalive.reset();
    for (auto& t : done.tensors) t.data = nullptr;
    snapshot.reset();
    lock.lock();
    writing_ = false;
    if (error.empty()) {
      ++stats_.written;
      stats_.bytes_written += bytes;
      stats_.total_duration += took;
    } else if (released) {
      ++stats_.skipped;
    } else {
      ++stats_.failed;
    }
    // A model whose write went through (and pruned) is over its problem; another's may not be.
    // One refused as released keeps none (release() forgot it).
    if (const std::string& failure = error.empty() ? prune_error : error;
        !failure.empty() && !released && !let_go_.contains(done.model)) {
      failing_[done.model] = failure;
      failed_last_ = done.model;
      stats_.last_error = failure;
    } else if (failure.empty()) {
      forget_failure(done.model);
    }
    lock.unlock();
    if (error.empty() && options_.on_written) options_.on_written(done, directory, took);
    if (released) {
      if (options_.on_dropped) options_.on_dropped(done, error);
    } else if (!error.empty() && options_.on_failed) {
      options_.on_failed(done, error);
    }
    if (!prune_error.empty() && options_.on_prune_failed) options_.on_prune_failed(done, prune_error);
    if (!stuck.empty() && options_.on_notice) {
      std::string notice = "what earlier writes or prunes of this process left cannot be removed (its disk stays "
                           "used; tried again at each write):";
      for (std::size_t i = 0; i < stuck.size(); ++i) notice += (i == 0 ? " " : "; ") + stuck[i];
      options_.on_notice(done.model, notice);
    }
    lock.lock();
  }
}

}  // namespace modelcast::repository
