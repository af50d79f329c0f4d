// The producer's persist option (ProducerOptions::persist): chooses which versions become
// checkpoints on disk and hands them, still in their snapshot slot, to a RepositoryWriter.
//
// Threads: constructed on the caller's thread; consider() runs on the service thread only; the
// writer thread reads the pinned slot, runs the callbacks and unpins the slot when it is done.
// The slot pin is the only thing the trainer can ever wait for, and only one is held at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/log_rate.h"
#include "core/producer/service.h"
#include "core/producer/snapshot_store.h"
#include "core/repository/repository_writer.h"
#include "modelcast/producer.h"

namespace spdlog {
class logger;
}

namespace modelcast::producer {

class Persister {
 public:
  // Checks options.persist (throws Error(kInvalidArgument) naming the option), locks the model's
  // directory (Error(kState) while another process or producer writes it) and starts the writer
  // thread. `store` and `stats` must outlive the Persister.
  Persister(const ProducerOptions& options, std::uint64_t incarnation, SnapshotStore& store, StatsBox& stats,
            std::shared_ptr<spdlog::logger> log);
  // Finishes the write in progress (its slot is unpinned); nothing else is written.
  ~Persister();
  Persister(const Persister&) = delete;
  Persister& operator=(const Persister&) = delete;

  // Service thread, once `version`'s digests are in (or it has none): writes it if it is due
  // and the writer is idle, else counts it as skipped. Never waits for the disk.
  void consider(std::uint64_t version);

 private:
  const PersistOptions options_;
  const std::string model_;
  const std::uint64_t first_version_;
  const std::uint64_t incarnation_;
  SnapshotStore& store_;
  StatsBox& stats_;
  std::shared_ptr<spdlog::logger> log_;
  // Writer thread only: the newest checkpoint written ("version N in DIR"), which a failure
  // names (a full disk keeps it as the last that fitted); and the failures' rate (a full disk
  // fails every due version, each line the same but for its numbers: one per 10 s).
  std::string newest_written_;
  RepeatedLines failures_logged_;
  // Holds the model directory's lock for its life: two writers of one model directory (another
  // rank or trainer persisting the same model, or a modelcastd serving it from this repository)
  // would each remove the other's unfinished writes as a crash's leftovers and prune its versions.
  std::unique_ptr<repository::RepositoryWriter> writer_;
};

}  // namespace modelcast::producer
