// Writes versions to a Repository on its own thread, off the update path. submit() never
// blocks on the disk: each model has one pending slot, and a newer version replaces a pending
// one that has not started, so a slow disk makes the writer skip to the newest version.
//
// It also holds the locks of the model directories it writes (hold()), so that no other process
// writes them: a lock is checked before each write of its model, and taken again on a directory
// made anew after the held one was removed (else another writer could lock the new one and both
// would write there, each removing the other's unfinished versions).
//
// Threads: submit(), offer(), hold(), release() and stats() from any thread; the writer thread
// owns the Repository and runs the callbacks (on_notice also runs on hold()'s caller) (keep them short: the next write waits for them). A callback runs after
// the version's bytes are released (its tensors' data pointers are null) and the writer counts
// as idle, so offer() accepts the next version while a callback still runs.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stop_token>
#include <string>
#include <thread>

#include "core/repository/model_directory_lock.h"
#include "core/repository/repository.h"

namespace modelcast::repository {

struct WriterOptions {
  std::string root;       // the repository's root directory (created if missing)
  std::size_t keep = 3;   // newest versions kept per model (>= 1)
  std::size_t every = 1;  // write every Nth version submitted per model (>= 1)
  // What the destructor does with the write in progress: finish it (a trainer's last checkpoint
  // is what it stops for), or abandon it within one 64 MiB piece (a daemon stopping: its versions
  // come back from the producer, and tens of GiB on a slow disk outlast systemd's stop timeout).
  bool abandon_on_stop = false;
  // A write that finds no room on the file system (ENOSPC, EDQUOT) removes every stored version
  // of its model but the newest (and those in_use), when that frees room enough, and is tried once more (said
  // through on_notice). For a daemon: the newest version on disk is what a restart serves and
  // Triton loads; with the disk full the repository otherwise stayed on an old one for good.
  // Off by default: a trainer's checkpoints (ProducerOptions::persist) are rollback points.
  bool make_room_when_full = false;
  std::function<void(const VersionSnapshot&, const std::string& directory, std::chrono::nanoseconds took)> on_written;
  std::function<void(const VersionSnapshot&, const std::string& error)> on_failed;
  // A version taken after its model was released (release(): a daemon's reload that dropped the
  // model, with a version on its way): its owner's choice, no failure. Counted in `skipped`. (A
  // version still pending at release() is dropped there, as release() says, without a call.)
  std::function<void(const VersionSnapshot&, const std::string& why)> on_dropped;
  // The version was written (on_written came first), but older ones beyond `keep` could not be
  // removed; they stay until a later prune succeeds. Not a failed write: nothing was lost.
  std::function<void(const VersionSnapshot&, const std::string& error)> on_prune_failed;
  // To be logged; the write goes on: a held directory was found removed and locked again,
  // older versions were removed before `keep` says to make room for the newest (make_room), or
  // what an earlier write or prune left cannot be removed (said after each write while it stays).
  std::function<void(const std::string& model, const std::string& notice)> on_notice;
  // Whether a stored version's directory is still being read (a daemon's hook given its path):
  // not pruned until a later prune finds it free. Called on the writer thread; null: none is.
  std::function<bool(const std::string& directory)> in_use;
};

struct WriterStats {
  std::uint64_t written = 0;
  std::uint64_t failed = 0;
  std::uint64_t skipped = 0;       // replaced while pending (the disk was slower than updates), or on_dropped
  std::uint64_t bytes_written = 0;
  std::chrono::nanoseconds total_duration{0};
  // The newest failure of a model held whose latest write (and prune) failed; empty once every
  // held model's latest write went through (a model released takes its failure with it).
  std::string last_error;
};

class RepositoryWriter {
 public:
  // Starts the writer thread. Throws modelcast::Error(kInvalidArgument) for keep/every of 0.
  explicit RepositoryWriter(WriterOptions options);
  // Finishes the write in progress, or with abandon_on_stop abandons it within one 64 MiB piece
  // (its temporary directory removed, on_failed called with why); pending versions are dropped.
  ~RepositoryWriter();
  RepositoryWriter(const RepositoryWriter&) = delete;
  RepositoryWriter& operator=(const RepositoryWriter&) = delete;

  // Queues `snapshot` (its keepalive pins the bytes until written or replaced). Never blocks
  // on I/O; thread-safe.
  void submit(std::shared_ptr<const VersionSnapshot> snapshot);
  // Queues `snapshot` only if the writer is idle (nothing pending, nothing being written or in
  // a callback) and returns true; otherwise drops it (its keepalive too) and returns false.
  bool offer(std::shared_ptr<const VersionSnapshot> snapshot);
  WriterStats stats() const;

  // Locks `model`'s directory (creating it) for this writer until release(model) or the writer
  // ends. Returns "" when locked, else why the file system took no lock (writes go on). Throws
  // Error(kState) while another process (or lock) holds it, kResource when it cannot be made or
  // opened: then each write of the model first tries to lock it, and fails while it cannot. A
  // model already held is not locked twice, but locked again if its directory was removed
  // meanwhile (its caller may read and clean the directory next).
  std::string hold(const std::string& model);
  // Lets the lock go and drops the model's pending version and its failure (WriterStats::last_error
  // no longer names it); a version of it already being written is finished, and one taken after
  // this is dropped (on_dropped, counted in `skipped`) until hold() again.
  void release(const std::string& model);

 private:
  void run();
  // Writer thread: an empty refusal when `model` is not held or its lock still holds its
  // directory (taking it again on a directory made anew, or first on one hold() could not make or
  // open), else why the version must not be written (a model released, its directory locked by
  // another writer, or still not lockable). Takes locking_.
  struct HeldCheck {
    std::string refusal;
    bool released = false;  // refused because the model was released: its owner's choice, not a failing disk
  };
  HeldCheck check_held(const std::string& model);
  // Writer thread, after a write of `snapshot` failed with `error_number`: with
  // make_room_when_full, for a full file system (ENOSPC, EDQUOT) where removing every stored
  // version but the newest frees room enough, removes them and returns the notice (the write is
  // then tried once more); else nullopt. Without it a disk that holds fewer than `keep` versions
  // stops the repository for good (prune follows a successful write). Throws as prune() does.
  std::optional<std::string> make_room(Repository& repository, const VersionSnapshot& snapshot, int error_number) const;
  // Under locking_: locks the directory of `held` (a lost lock, an entry of locks_) anew in its
  // place; returns the notice for on_notice. Throws as ModelDirectoryLock's constructor does.
  std::string relock(std::shared_ptr<ModelDirectoryLock>& held);

  const WriterOptions options_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;                                                   // mutex_
  bool writing_ = false;  // a snapshot taken from pending_ is being written; mutex_
  std::map<std::string, std::shared_ptr<const VersionSnapshot>> pending_;  // by model; mutex_
  std::map<std::string, std::uint64_t> submitted_;                      // by model; mutex_
  std::stop_source stop_write_;  // requested by the destructor (abandon_on_stop); the write polls it
  WriterStats stats_;                                                   // mutex_
  // The models held whose latest write or prune failed, with why, and which one failed last: one
  // model's write going through says nothing of another's disk (mutex_).
  std::map<std::string, std::string> failing_;
  std::string failed_last_;
  // Released and not held again (released_'s copy under mutex_): a write of it that was under way
  // at its release and failed is not its failure either.
  std::set<std::string> let_go_;
  // Under mutex_: `model`'s write went through, or it was released; last_error follows.
  void forget_failure(const std::string& model);
  // Held through each hold() and release(), so that their changes to released_ (under locking_)
  // and let_go_ (under mutex_) are seen in the same order; the writer thread never takes it.
  std::mutex calls_;
  // The locks, made and replaced under locking_ only, so that one process never opens a second
  // lock on a directory it holds (flock refuses that as it refuses another process). Never
  // taken together with mutex_.
  std::mutex locking_;
  std::map<std::string, std::shared_ptr<ModelDirectoryLock>> locks_;  // by model; locking_
  std::set<std::string> released_;  // held once, released since, not held again; locking_
  std::set<std::string> unmade_;  // held, but no lock could be made on its directory yet; locking_
  std::thread thread_;
};

}  // namespace modelcast::repository
