// The repository writer on its own (as a producer would use it): a slow disk makes it skip to
// the newest version without blocking submit(), skipped versions' bytes are released, a version
// number written again replaces the old directory whole, directory numbers rise across producer
// restarts, and bad snapshots are refused.
#include "core/repository/repository_writer.h"

#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <stop_token>
#include <thread>
#include <tuple>

#include "core/repository/model_directory_lock.h"
#include "core/repository/repository.h"
#include "core/repository/safetensors.h"
#include "daemon_fixture.h"
#include "faulting_memory.h"
#include "modelcast/error.h"

namespace daemon_test {
namespace {

namespace repo = modelcast::repository;

// A one-tensor snapshot of `version` whose bytes all equal `version`; keepalive owns them.
std::shared_ptr<const repo::VersionSnapshot> snapshot(std::uint64_t version, std::weak_ptr<const void>* watch = nullptr) {
  auto bytes = std::make_shared<std::vector<std::uint8_t>>(4096, static_cast<std::uint8_t>(version));
  auto s = std::make_shared<repo::VersionSnapshot>();
  s->model = "m";
  s->version = version;
  s->step = static_cast<std::int64_t>(version) * 10;
  s->tensors.push_back({"w", modelcast::DType::kU8, {4096}, bytes->data(), bytes->size()});
  s->keepalive = bytes;
  if (watch) *watch = bytes;
  return s;
}

// snapshot(version) of model `model`.
std::shared_ptr<const repo::VersionSnapshot> of_model(const std::string& model, std::uint64_t version) {
  auto s = std::make_shared<repo::VersionSnapshot>(*snapshot(version));
  s->model = model;
  return s;
}

// snapshot(version) as producer incarnation `incarnation` publishes it.
std::shared_ptr<const repo::VersionSnapshot> of(std::uint64_t incarnation, std::uint64_t version) {
  auto s = std::make_shared<repo::VersionSnapshot>(*snapshot(version));
  s->incarnation = incarnation;
  return s;
}

// Undoes at scope exit what kept `path` from being changed: a mount on it (as root) or its
// write permission taken away (otherwise).
struct Unpinned {
  std::string path;
  ~Unpinned() {
    umount(path.c_str());
    std::error_code ignored;
    std::filesystem::permissions(path, std::filesystem::perms::owner_all, ignored);
  }
};

TEST(RepositoryWriter, ASlowDiskMakesItSkipToTheNewestVersionWithoutBlockingSubmit) {
  ScratchDir dir;
  std::mutex mutex;
  std::condition_variable changed;
  bool first_written = false, disk_free = false;
  std::vector<std::uint64_t> written;
  repo::WriterOptions options;
  options.root = dir / "repo";
  options.keep = 5;
  // The callback runs on the writer thread: holding it there stands in for a disk that is slow.
  options.on_written = [&](const repo::VersionSnapshot& s, const std::string&, std::chrono::nanoseconds) {
    std::unique_lock lock(mutex);
    written.push_back(s.version);
    first_written = true;
    changed.notify_all();
    changed.wait(lock, [&] { return disk_free; });
  };
  repo::RepositoryWriter writer(options);
  writer.submit(snapshot(1));
  {
    std::unique_lock lock(mutex);
    ASSERT_TRUE(changed.wait_for(lock, 30s, [&] { return first_written; }));
  }
  std::weak_ptr<const void> two, three;
  writer.submit(snapshot(2, &two));  // none of these may wait for the stalled writer
  writer.submit(snapshot(3, &three));
  writer.submit(snapshot(4));
  EXPECT_TRUE(two.expired()) << "a skipped version's bytes are still pinned";
  EXPECT_TRUE(three.expired());
  {
    std::lock_guard lock(mutex);
    disk_free = true;
  }
  changed.notify_all();
  {
    std::unique_lock lock(mutex);
    ASSERT_TRUE(changed.wait_for(lock, 30s, [&] { return written.size() >= 2; }));
  }
  EXPECT_EQ(written, (std::vector<std::uint64_t>{1, 4}));
  auto stats = writer.stats();
  EXPECT_EQ(stats.skipped, 2u);
  auto stored = repo::Repository(dir / "repo").list("m");
  ASSERT_EQ(stored.size(), 2u);
  EXPECT_EQ(stored[0].version, 4u);  // most recently written first
  EXPECT_EQ(stored[1].version, 1u);
}

TEST(RepositoryWriter, AVersionNumberWrittenAgainReplacesTheOldDirectoryWhole) {
  ScratchDir dir;
  repo::Repository repository(dir / "repo");
  repository.write(*snapshot(7));
  auto second = std::make_shared<repo::VersionSnapshot>(*snapshot(7));
  std::vector<std::uint8_t> other(4096, 0xAB);
  second->tensors[0].data = other.data();
  second->step = 99;
  repository.write(*second);  // the same version of the same producer again (a retried write)
  auto stored = repository.list("m");
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(stored[0].step, 99);
  auto layout = repo::read_safetensors_layout(dir / "repo/m/7/model.safetensors");
  ASSERT_EQ(layout.tensors.size(), 1u);
  std::ifstream in(dir / "repo/m/7/model.safetensors", std::ios::binary);
  in.seekg(static_cast<std::streamoff>(layout.data_start));
  EXPECT_EQ(in.get(), 0xAB);
  EXPECT_EQ(repository.clean("m").removed, 0u);  // nothing left behind
}

// A restarted producer numbers its versions from 1 again. Its directories once took those
// numbers, leaving 1 2 6 on disk with the 6 from the previous run, which Triton's default policy
// ("latest": the highest number) then loaded. Numbers now rise across restarts; a fresh
// repository's numbers are the producer's.
TEST(RepositoryWriter, DirectoryNumbersRiseAcrossProducerRestarts) {
  ScratchDir dir;
  repo::Repository repository(dir / "repo");
  for (std::uint64_t v : {1, 2, 6}) repository.write(*of(111, v));
  for (std::uint64_t v : {1, 2, 4}) repository.write(*of(222, v));  // the producer restarted
  auto stored = repository.list("m");  // most recently written first
  std::vector<std::pair<std::uint64_t, std::uint64_t>> numbered;
  for (const auto& s : stored) numbered.emplace_back(s.number, s.version);
  using P = std::pair<std::uint64_t, std::uint64_t>;
  EXPECT_EQ(numbered, (std::vector<P>{{10, 4}, {8, 2}, {7, 1}, {6, 6}, {2, 2}, {1, 1}}));
  EXPECT_TRUE(std::filesystem::exists(dir / "repo/m/10/model.safetensors"));
  EXPECT_EQ(stored.front().incarnation, 222u);
}

// Numbers were chosen above the versions the repository could read only: an existing Triton
// repository's "1/model.onnx" was swapped out and deleted without a word, and a stray file named
// like the next number failed every write ("Not a directory"), for good.
TEST(RepositoryWriter, EntriesItDidNotWriteAreNeitherReplacedNorInTheWay) {
  ScratchDir dir;
  const std::filesystem::path model = dir / "repo/m", elsewhere = dir / "elsewhere";
  std::filesystem::create_directories(model / "1");
  std::ofstream(model / "1/model.onnx") << "someone else's model";
  std::ofstream(model / "4") << "a stray file";
  std::filesystem::create_directories(elsewhere);
  std::ofstream(elsewhere / "precious") << "keep";
  std::filesystem::create_directory_symlink(elsewhere, model / "6");
  repo::Repository repository(dir / "repo");
  EXPECT_EQ(repository.write(*of(111, 1)), (model / "7").string());
  EXPECT_EQ(repository.write(*of(111, 2)), (model / "8").string());
  std::ifstream onnx(model / "1/model.onnx");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(onnx), {}), "someone else's model");
  EXPECT_TRUE(std::filesystem::is_regular_file(model / "4"));
  EXPECT_TRUE(std::filesystem::is_symlink(model / "6"));
  EXPECT_TRUE(std::filesystem::exists(elsewhere / "precious"));
  // An entry put where this producer's next number goes is left alone, and the version numbered
  // above it (the write failed there, naming the entry, at every version for good).
  std::ofstream(model / "9") << "put there later";
  EXPECT_EQ(repository.write(*of(111, 3)), (model / "10").string());
  EXPECT_TRUE(std::filesystem::is_regular_file(model / "9"));
  EXPECT_EQ(repository.clean("m").removed, 0u);
  EXPECT_EQ(repository.list("m").size(), 3u);
}

// A model switched to another producer and back (a daemon's endpoint changed twice): the first
// producer's next versions took the numbers the second one's had been written under, swapped
// them out and deleted them, and the highest number stayed the second producer's older model,
// which a restart then served (and Triton's "latest" loaded).
TEST(RepositoryWriter, AProducerComingBackWritesAboveTheVersionsWrittenMeanwhile) {
  ScratchDir dir;
  repo::Repository repository(dir / "repo");
  for (std::uint64_t v : {31, 32, 33}) repository.write(*of(111, v));
  for (std::uint64_t v : {1, 2, 3}) repository.write(*of(222, v));  // numbered 34, 35, 36
  for (std::uint64_t v : {34, 35}) repository.write(*of(111, v));   // the first producer again
  for (std::uint64_t v : {36, 36}) repository.write(*of(111, v));   // and a version written twice
  std::vector<std::tuple<std::uint64_t, std::uint64_t, std::uint64_t>> numbered;
  for (const auto& s : repository.list("m")) numbered.emplace_back(s.number, s.incarnation, s.version);
  using T = std::tuple<std::uint64_t, std::uint64_t, std::uint64_t>;
  EXPECT_EQ(numbered, (std::vector<T>{{39, 111, 36}, {38, 111, 35}, {37, 111, 34}, {36, 222, 3}, {35, 222, 2}, {34, 222, 1},
                                      {33, 111, 33}, {32, 111, 32}, {31, 111, 31}}));
  EXPECT_EQ(repository.clean("m").removed, 0u);
}

// Versions were ordered by their written_at_ns: with that clock ahead on the versions on disk (a
// repository copied from another host, a wall clock stepped back), the version just written came
// last, prune() deleted it at once, and a restart served the stale one. The number orders them.
TEST(RepositoryWriter, TheVersionJustWrittenIsTheNewestWhateverTheClockSaidBefore) {
  ScratchDir dir;
  repo::Repository repository(dir / "repo");
  for (std::uint64_t v : {1, 2, 3}) {
    repository.write(*snapshot(v));
    // Written "in the future", as a repository copied from a host whose clock runs ahead.
    const std::string path = dir / ("repo/m/" + std::to_string(v) + "/metadata.json");
    std::ifstream in(path);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto at = text.find("\"written_at_ns\":");
    ASSERT_NE(at, std::string::npos) << text;
    const auto end = text.find_first_of(",}", at);
    text.replace(at, end - at, "\"written_at_ns\":" + std::to_string(4'000'000'000'000'000'000 + v));
    std::ofstream(path, std::ios::trunc) << text;
  }
  ASSERT_EQ(repository.list("m").at(0).version, 3u);  // the edit left the files readable
  repository.write(*snapshot(4));
  static_cast<void>(repository.prune("m", 3));
  std::vector<std::uint64_t> kept;
  for (const auto& stored : repository.list("m")) kept.push_back(stored.version);
  EXPECT_EQ(kept, (std::vector<std::uint64_t>{4, 3, 2}));
  EXPECT_TRUE(std::filesystem::exists(dir / "repo/m/4/model.safetensors"));
}

// Incarnations are random 64-bit values: as a JSON number one above 2^53 is rounded by most JSON
// readers, so metadata.json holds it as hex text. Repositories written before still read.
TEST(RepositoryWriter, TheIncarnationIsWrittenAsHexTextAndNumbersWrittenBeforeStillRead) {
  ScratchDir dir;
  repo::Repository repository(dir / "repo");
  auto s = std::make_shared<repo::VersionSnapshot>(*snapshot(1));
  s->incarnation = 0xfedcba9876543211ull;
  auto written = repository.write(*s);
  std::ifstream in(written + "/" + repo::kMetadataFile);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\"producer_incarnation\":\"fedcba9876543211\""), std::string::npos) << text;
  ASSERT_EQ(repository.list("m").size(), 1u);
  EXPECT_EQ(repository.list("m").front().incarnation, 0xfedcba9876543211ull);

  auto at = text.find("\"fedcba9876543211\"");
  write_file(written + "/" + repo::kMetadataFile, text.replace(at, 18, "12345"));
  ASSERT_EQ(repository.list("m").size(), 1u);
  EXPECT_EQ(repository.list("m").front().incarnation, 12345u);
}

// A container's entrypoint is pid 1 in every incarnation: the leftovers of one that crashed
// carried this process's pid, passed for its own (kept by clean()), and the first write's
// temporary name was already taken ("cannot create directory '.tmp-1-1-0': File exists").
TEST(RepositoryWriter, LeftoversOfAnEarlierProcessWithTheSamePidAreCleanedAndDoNotBlockWrites) {
  ScratchDir dir;
  const std::string model_dir = dir / "repo/m";
  const std::string pid = std::to_string(getpid());
  for (const std::string& name : {".tmp-1-" + pid + "-0", ".del-7-" + pid + "-1", ".tmp-2-" + pid + "-1"}) {
    std::filesystem::create_directories(model_dir + "/" + name);
    write_file(model_dir + "/" + name + "/model.safetensors", "partial");
  }
  repo::Repository repository(dir / "repo");
  const auto cleaned = repository.clean("m");
  EXPECT_EQ(cleaned.removed, 3u);
  EXPECT_TRUE(cleaned.left.empty());
  EXPECT_EQ(repository.write(*snapshot(1)), model_dir + "/1");
  // This process's own entries (a write or prune under way) are still left alone.
  std::size_t entries = 0;
  for (const auto& entry : std::filesystem::directory_iterator(model_dir)) entries += entry.path().filename() != "1";
  EXPECT_EQ(entries, 0u);
}

TEST(RepositoryWriter, LeftoversThatCannotBeRemovedAreNamedNotCountedAsRemoved) {
  // On a read-only disk the removal failed in silence and was counted: the daemon logged
  // "removed 1 unfinished repository entry" for an entry still there.
  ScratchDir dir;
  const std::string model_dir = dir / "repo/m";
  const std::string leftover = model_dir + "/.tmp-9-1-0";
  std::filesystem::create_directories(leftover);
  write_file(leftover + "/model.safetensors", "partial");
  bool read_only = false;
  if (geteuid() == 0) {  // root writes through permissions: a read-only bind mount instead
    read_only = mount(model_dir.c_str(), model_dir.c_str(), nullptr, MS_BIND, nullptr) == 0 &&
                mount(nullptr, model_dir.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) == 0;
  } else {
    std::filesystem::permissions(model_dir, std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
    read_only = true;
  }
  const Unpinned restore{model_dir};
  if (!read_only) GTEST_SKIP() << "cannot make " << model_dir << " read-only here";
  const auto cleaned = repo::Repository(dir / "repo").clean("m");
  EXPECT_EQ(cleaned.removed, 0u);
  ASSERT_EQ(cleaned.left.size(), 1u);
  EXPECT_NE(cleaned.left[0].find(".tmp-9-1-0"), std::string::npos) << cleaned.left[0];
  EXPECT_TRUE(std::filesystem::exists(leftover));
}

TEST(RepositoryWriter, BadSnapshotsAreRefusedAndNothingBecomesVisible) {
  ScratchDir dir;
  repo::Repository repository(dir / "repo");
  auto named = std::make_shared<repo::VersionSnapshot>(*snapshot(1));
  named->tensors[0].name = "__metadata__";
  auto sized = std::make_shared<repo::VersionSnapshot>(*snapshot(2));
  sized->tensors[0].bytes = 100;  // disagrees with its shape
  for (const auto& bad : {named, sized}) {
    try {
      repository.write(*bad);
      ADD_FAILURE() << "version " << bad->version << " was written";
    } catch (const modelcast::Error& e) {
      EXPECT_EQ(e.code(), modelcast::ErrorCode::kInvalidArgument) << e.what();
    }
  }
  EXPECT_TRUE(repository.list("m").empty());
  EXPECT_EQ(repository.clean("m").removed, 0u);
}

// A snapshot of one U8 tensor over `memory`.
std::shared_ptr<const repo::VersionSnapshot> snapshot_of(const FaultingMemory& memory) {
  auto s = std::make_shared<repo::VersionSnapshot>();
  s->model = "m";
  s->version = 1;
  s->tensors.push_back({"w", modelcast::DType::kU8, {static_cast<std::int64_t>(memory.size())}, memory.data(), memory.size()});
  return s;
}

bool has_temporary(const std::string& model_dir) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(model_dir, ec)) {
    if (entry.path().filename().string().rfind(".tmp-", 0) == 0) return true;
  }
  return false;
}

constexpr std::size_t kPiece = 64u << 20;  // what the writer writes between two looks at its stop

// A write asked to stop part-way is abandoned at the next piece, and leaves neither a version
// nor its temporary directory.
TEST(RepositoryWriter, AWriteAskedToStopIsAbandonedAndLeavesNothing) {
  ScratchDir dir;
  FaultingMemory memory(3 * kPiece);
  if (!memory.usable()) GTEST_SKIP() << memory.why_not();
  repo::Repository repository(dir / "repo");
  std::stop_source stop;
  std::string outcome;
  std::thread writing([&] {
    try {
      outcome = "written: " + repository.write(*snapshot_of(memory), stop.get_token());
    } catch (const modelcast::Error& e) {
      outcome = std::to_string(static_cast<int>(e.code())) + " " + e.what();
    }
  });
  ASSERT_TRUE(memory.next_fault(30s)) << "the write never read the tensor";  // in write(), first piece
  stop.request_stop();
  memory.supply(0, memory.size());
  writing.join();
  EXPECT_EQ(outcome.rfind(std::to_string(static_cast<int>(modelcast::ErrorCode::kState)) + " ", 0), 0u) << outcome;
  EXPECT_NE(outcome.find("abandoned: the writer is stopping"), std::string::npos) << outcome;
  EXPECT_TRUE(repository.list("m").empty());
  EXPECT_FALSE(has_temporary(repository.model_directory("m")));
}

// Destroys a writer while it writes a 256 MiB version; what its callbacks said.
std::vector<std::string> stop_while_writing(bool abandon_on_stop) {
  ScratchDir dir;
  FaultingMemory memory(4 * kPiece);
  if (!memory.usable()) return {"skip: " + memory.why_not()};
  std::mutex mutex;
  std::vector<std::string> results;
  repo::WriterOptions options;
  options.root = dir / "repo";
  options.abandon_on_stop = abandon_on_stop;
  options.on_written = [&](const repo::VersionSnapshot&, const std::string&, std::chrono::nanoseconds) {
    std::lock_guard lock(mutex);
    results.push_back("written");
  };
  options.on_failed = [&](const repo::VersionSnapshot&, const std::string& error) {
    std::lock_guard lock(mutex);
    results.push_back(error);
  };
  auto writer = std::make_unique<repo::RepositoryWriter>(options);
  writer->submit(snapshot_of(memory));
  auto fault = memory.next_fault(30s);
  if (!fault) return {"the write never read the tensor"};
  std::atomic<bool> stopped{false};
  std::thread stopping([&] {
    writer.reset();
    stopped = true;
  });
  // The pages go in 64 KiB at a time as the write asks for them (some 4,000 faults for 256 MiB),
  // so the write is still in its first pieces when the destructor asks it to stop.
  while (!stopped) {
    if (fault) memory.supply(*fault, 64u << 10);
    fault = memory.next_fault(std::chrono::milliseconds(50));
  }
  stopping.join();
  if (results == std::vector<std::string>{"written"} && repo::Repository(options.root).list("m").size() != 1) {
    return {"written, but not listed"};
  }
  if (has_temporary(options.root + "/m")) results.push_back("a temporary directory is left");
  return results;
}

// A daemon stopping waited for the write in progress: tens of GiB on a slow disk took minutes,
// past systemd's stop timeout (which then killed it). Its writer now abandons it.
TEST(RepositoryWriter, StoppingAWriterThatAbandonsEndsTheWriteInProgress) {
  auto results = stop_while_writing(true);
  if (!results.empty() && results[0].rfind("skip: ", 0) == 0) GTEST_SKIP() << results[0];
  ASSERT_EQ(results.size(), 1u) << ::testing::PrintToString(results);
  EXPECT_NE(results[0].find("abandoned: the writer is stopping"), std::string::npos) << results[0];
}

// A trainer's writer (the producer's persist option) finishes its last checkpoint.
TEST(RepositoryWriter, StoppingAWriterThatFinishesCompletesTheWriteInProgress) {
  auto results = stop_while_writing(false);
  if (!results.empty() && results[0].rfind("skip: ", 0) == 0) GTEST_SKIP() << results[0];
  EXPECT_EQ(results, std::vector<std::string>{"written"});
}

// What a writer's callbacks said, in order ("written 2", "failed 1: why", "notice m: what"),
// waited for from the test's thread.
struct WriterEvents {
  void add(std::string event) {
    std::lock_guard lock(mutex);
    events.push_back(std::move(event));
    changed.notify_all();
  }
  // The events once there are `count`, or what there is after 30 s.
  std::vector<std::string> wait_for(std::size_t count) {
    std::unique_lock lock(mutex);
    changed.wait_for(lock, 30s, [&] { return events.size() >= count; });
    return events;
  }
  repo::WriterOptions options(const std::string& root) {
    repo::WriterOptions o;
    o.root = root;
    o.on_written = [this](const repo::VersionSnapshot& s, const std::string&, std::chrono::nanoseconds) {
      add("written " + std::to_string(s.version));
    };
    o.on_failed = [this](const repo::VersionSnapshot& s, const std::string& why) {
      add("failed " + std::to_string(s.version) + ": " + why);
    };
    o.on_dropped = [this](const repo::VersionSnapshot& s, const std::string& why) {
      add("dropped " + std::to_string(s.version) + ": " + why);
    };
    o.on_notice = [this](const std::string& model, const std::string& notice) { add("notice " + model + ": " + notice); };
    return o;
  }
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<std::string> events;
};

// Options keeping one version, whose failed prunes are events too ("prune failed after V").
repo::WriterOptions keeping_one(WriterEvents& events, const std::string& root) {
  auto options = events.options(root);
  options.keep = 1;
  options.on_prune_failed = [&events](const repo::VersionSnapshot& s, const std::string&) {
    events.add("prune failed after " + std::to_string(s.version));
  };
  return options;
}

bool locked_by_another(const std::string& directory) {
  try {
    repo::ModelDirectoryLock probe(directory);
    return false;
  } catch (const modelcast::Error& e) {
    return e.code() == modelcast::ErrorCode::kState;
  }
}

// A flock belongs to the open file, which a forked child shares: a child that outlived the
// lock's owner (a DataLoader worker forked from the trainer) kept the directory locked, and the
// trainer could not persist there again until the child ended. Children close it at the fork.
TEST(RepositoryWriter, AForkedChildDoesNotKeepADirectoryLockItsParentLetGo) {
  ScratchDir dir;
  auto lock = std::make_unique<repo::ModelDirectoryLock>(dir / "repo/m");
  ASSERT_EQ(lock->unlocked(), "");
  int go[2], started[2];
  ASSERT_EQ(pipe(go), 0);
  ASSERT_EQ(pipe(started), 0);
  const pid_t child = fork();
  if (child == 0) {  // only what is safe in the child of a threaded process: lives until told
    close(go[1]);
    [[maybe_unused]] auto said = write(started[1], "s", 1);  // fork() has returned here: its handlers ran
    char byte;
    [[maybe_unused]] auto n = read(go[0], &byte, 1);
    _exit(0);
  }
  ASSERT_GT(child, 0);
  close(go[0]);
  close(started[1]);
  char byte;
  ASSERT_EQ(read(started[0], &byte, 1), 1);
  close(started[0]);
  lock.reset();
  std::string refused;
  try {
    repo::ModelDirectoryLock again(dir / "repo/m");
  } catch (const modelcast::Error& e) {
    refused = e.what();
  }
  close(go[1]);  // the child ends
  waitpid(child, nullptr, 0);
  EXPECT_EQ(refused, "");
}

TEST(RepositoryWriter, HoldsAModelDirectorysLockUntilReleased) {
  ScratchDir dir;
  repo::WriterOptions options;
  options.root = dir / "repo";
  repo::RepositoryWriter writer(options);
  EXPECT_EQ(writer.hold("m"), "");
  EXPECT_EQ(writer.hold("m"), "");  // held once, not refused by itself
  EXPECT_TRUE(locked_by_another(dir / "repo/m"));
  EXPECT_FALSE(locked_by_another(dir / "repo/other"));
  writer.release("m");
  EXPECT_FALSE(locked_by_another(dir / "repo/m"));
}

// A version written whose older versions could not be removed was reported as a failed write of
// that version: the daemon logged an error, counted a write failure, and ran the hook all the same.
// It is an event of its own now; the version stands written.
TEST(RepositoryWriter, OlderVersionsThatCannotBeRemovedAreNoFailedWrite) {
  ScratchDir dir;
  WriterEvents events;
  repo::RepositoryWriter writer(keeping_one(events, dir / "repo"));
  writer.submit(snapshot(1));
  ASSERT_EQ(events.wait_for(1), std::vector<std::string>{"written 1"});
  const std::string first = dir / "repo/m/1";
  bool pinned = false;
  if (geteuid() == 0) {  // root removes through permissions; a mount point cannot be renamed away
    pinned = mount(first.c_str(), first.c_str(), nullptr, MS_BIND, nullptr) == 0;
  } else {  // renamed away, its files cannot be removed
    std::filesystem::permissions(first, std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
    pinned = true;
  }
  const Unpinned restore{first};
  if (!pinned) GTEST_SKIP() << "cannot keep " << first << " from being removed here";
  writer.submit(snapshot(2));
  EXPECT_EQ(events.wait_for(3), (std::vector<std::string>{"written 1", "written 2", "prune failed after 2"}));
  EXPECT_EQ(writer.stats().failed, 0u);
}

// A version renamed away whose removal failed (a file an NFS client held open, a mount inside)
// was never tried again: its space stayed lost until the process restarted.
TEST(RepositoryWriter, AnOldVersionWhoseRemovalFailedIsRemovedAtTheNextPrune) {
  ScratchDir dir;
  WriterEvents events;
  repo::RepositoryWriter writer(keeping_one(events, dir / "repo"));
  writer.submit(snapshot(1));
  ASSERT_EQ(events.wait_for(1), std::vector<std::string>{"written 1"});
  // Kept from removal, not from being renamed away: a mount inside it (as root), or its write
  // permission taken away (otherwise).
  const std::filesystem::path inside = dir / "repo/m/1/inside";
  std::filesystem::create_directory(inside);
  const bool as_root = geteuid() == 0;
  if (as_root) {
    if (mount(inside.c_str(), inside.c_str(), nullptr, MS_BIND, nullptr) != 0) GTEST_SKIP() << "cannot bind-mount here";
  } else {
    std::filesystem::permissions(dir / "repo/m/1", std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
  }
  writer.submit(snapshot(2));
  ASSERT_EQ(events.wait_for(3), (std::vector<std::string>{"written 1", "written 2", "prune failed after 2"}));
  auto renamed_away = [&] {
    std::vector<std::filesystem::path> found;
    for (const auto& entry : std::filesystem::directory_iterator(dir / "repo/m"))
      if (entry.path().filename().string().rfind(".del-", 0) == 0) found.push_back(entry.path());
    return found;
  };
  const auto left = renamed_away();
  ASSERT_EQ(left.size(), 1u);
  const Unpinned restore{(left[0] / "inside").string()};
  if (as_root) {
    ASSERT_EQ(umount((left[0] / "inside").c_str()), 0) << std::strerror(errno);
  } else {
    std::filesystem::permissions(left[0], std::filesystem::perms::owner_all);
  }
  writer.submit(snapshot(3));
  ASSERT_EQ(events.wait_for(4).back(), "written 3");
  EXPECT_TRUE(renamed_away().empty()) << left[0] << " is still there";
}

// A failed write's temporary directory whose removal failed too (a process at its open-file
// limit cannot open the directory to empty it) stayed until the process restarted.
TEST(RepositoryWriter, AFailedWritesLeftoverOfThisProcessIsRemovedAtTheNextPrune) {
  ScratchDir dir;
  repo::Repository repository(dir / "repo");
  repository.write(*snapshot(1));
  const std::filesystem::path left = dir / ("repo/m/.tmp-2-" + repo::process_tag() + "-999999");
  std::filesystem::create_directory(left);
  std::ofstream(left / "model.safetensors") << "part of version 2";
  EXPECT_EQ(repository.clean("m").removed, 0u) << "clean() leaves this process's entries";
  repository.write(*snapshot(3));
  static_cast<void>(repository.prune("m", 2));
  EXPECT_FALSE(std::filesystem::exists(left));
}

// Such a leftover that still cannot be removed (a mount inside, a file an NFS client holds) is
// returned by each prune while it stays, and the writer says it after each write (a notice): it
// was ignored, and a comment said its failure had been reported when nothing had (the version
// an exchange replaced is one: about a model's worth of disk, lost without a word). It is no
// failure of the prune, nor of a write that made room (review: it failed those).
TEST(RepositoryWriter, ALeftoverOfThisProcessThatCannotBeRemovedIsSaidByPrune) {
  ScratchDir dir;
  repo::Repository repository(dir / "repo");
  repository.write(*snapshot(1));
  const std::filesystem::path left = dir / ("repo/m/.tmp-2-" + repo::process_tag() + "-999999");
  const std::filesystem::path inside = left / "inside";
  std::filesystem::create_directories(inside);
  if (geteuid() == 0) {  // root removes through permissions: a mount inside instead
    if (mount(inside.c_str(), inside.c_str(), nullptr, MS_BIND, nullptr) != 0) GTEST_SKIP() << "cannot bind-mount here";
  } else {
    std::filesystem::permissions(left, std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
  }
  const Unpinned restore{geteuid() == 0 ? inside.string() : left.string()};
  const auto stuck = repository.prune("m", 2);
  ASSERT_EQ(stuck.size(), 1u) << "a leftover that could not be removed went unsaid";
  EXPECT_NE(stuck[0].find(".tmp-2-"), std::string::npos) << stuck[0];
  EXPECT_EQ(repository.list("m").size(), 1u) << "the stored version is not touched";
}

// A daemon serves its producer's version over a stored one of the same run with a higher
// version number (written or edited by someone else). Numbered under that entry, the producer's
// versions stayed behind it: Triton loaded it, a restart recovered it, prune deleted theirs.
TEST(RepositoryWriter, AVersionBelowOneStoredFromItsOwnRunIsNumberedAboveIt) {
  ScratchDir dir;
  repo::Repository repository(dir / "repo");
  repository.write(*snapshot(10));
  for (std::uint64_t v = 3; v <= 6; ++v) {
    repository.write(*snapshot(v));
    static_cast<void>(repository.prune("m", 3));
  }
  std::vector<std::uint64_t> versions;
  for (const auto& stored : repository.list("m")) versions.push_back(stored.version);
  EXPECT_EQ(versions, (std::vector<std::uint64_t>{6, 5, 4})) << "newest first, by directory number";
}

// A writer of model "m" that holds its directory's lock, and what its callbacks said.
class HeldModelWriter : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(writer.hold("m"), ""); }
  // The held directory removed, and a new one made and locked by another writer (as a second
  // process would, once the name is free).
  std::unique_ptr<repo::ModelDirectoryLock> removed_and_taken_by_another() {
    std::filesystem::remove_all(dir / "repo/m");
    return std::make_unique<repo::ModelDirectoryLock>(dir / "repo/m");
  }
  ScratchDir dir;
  WriterEvents events;
  repo::RepositoryWriter writer{events.options(dir / "repo")};
};

// The lock is on the directory, not its name: once the held directory was removed (an operator
// clearing the repository), another process could make and lock a new one while this writer
// wrote into it too. The writer takes the lock again on the new directory before writing.
TEST_F(HeldModelWriter, ADirectoryRemovedWhileHeldIsLockedAgainBeforeTheNextWrite) {
  writer.submit(snapshot(1));
  ASSERT_EQ(events.wait_for(1), std::vector<std::string>{"written 1"});
  std::filesystem::remove_all(dir / "repo/m");
  writer.submit(snapshot(2));
  const auto seen = events.wait_for(3);
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[1], "notice m: model directory '" + dir / "repo/m" +
                         "' was removed while this writer held it; locked again as it was made anew");
  EXPECT_EQ(seen[2], "written 2");
  EXPECT_TRUE(locked_by_another(dir / "repo/m"));
  EXPECT_EQ(repo::Repository(dir / "repo").list("m").size(), 1u);
}

TEST_F(HeldModelWriter, ADirectoryRemovedAndLockedByAnotherWriterIsNotWrittenTo) {
  auto other = removed_and_taken_by_another();
  writer.submit(snapshot(1));
  auto seen = events.wait_for(1);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].rfind("failed 1: model directory '" + dir / "repo/m" +
                              "' was removed while this writer held it, and cannot be locked again: ",
                          0),
            0u)
      << seen[0];
  EXPECT_NE(seen[0].find("is in use by another writer"), std::string::npos) << seen[0];
  EXPECT_TRUE(std::filesystem::is_empty(dir / "repo/m"));  // nothing written into the other's directory

  other.reset();  // the other writer is gone: the next version is written, under this writer's lock
  writer.submit(snapshot(2));
  seen = events.wait_for(3);
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[1].rfind("notice m: ", 0), 0u) << seen[1];
  EXPECT_EQ(seen[2], "written 2");
  EXPECT_TRUE(locked_by_another(dir / "repo/m"));
}

// hold() of a model it holds checks the lock too: the daemon's recovery reads and cleans the
// directory next, and would remove another writer's unfinished versions from a new one.
TEST_F(HeldModelWriter, HoldingAgainADirectoryRemovedMeanwhileLocksTheNewOneOrIsRefused) {
  auto other = removed_and_taken_by_another();
  try {
    writer.hold("m");
    ADD_FAILURE() << "held a directory another writer locked";
  } catch (const modelcast::Error& e) {
    EXPECT_EQ(e.code(), modelcast::ErrorCode::kState) << e.what();
  }
  other.reset();
  EXPECT_EQ(writer.hold("m"), "");
  const auto seen = events.wait_for(1);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].rfind("notice m: ", 0), 0u) << seen[0];
  EXPECT_TRUE(locked_by_another(dir / "repo/m"));
}

// A model held while its directory could not be made (a read-only mount; here a file in its
// place) had no lock, and a write that later succeeded went in unlocked: a second daemon locked
// the directory meanwhile, and both wrote and pruned it. Each write takes the lock first now.
TEST(RepositoryWriter, AModelHeldWhileItsDirectoryCouldNotBeMadeIsLockedBeforeItIsWritten) {
  ScratchDir dir;
  WriterEvents events;
  std::filesystem::create_directories(dir / "repo");
  std::ofstream(dir / "repo/m") << "in the way";
  repo::RepositoryWriter writer(events.options(dir / "repo"));
  try {
    writer.hold("m");
    ADD_FAILURE() << "held a model whose directory is a file";
  } catch (const modelcast::Error& e) {
    EXPECT_EQ(e.code(), modelcast::ErrorCode::kResource) << e.what();
  }
  std::filesystem::remove(dir / "repo/m");
  auto other = std::make_unique<repo::ModelDirectoryLock>(dir / "repo/m");  // a second writer, since
  writer.submit(snapshot(1));
  auto seen = events.wait_for(1);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].rfind("failed 1: the directory of model 'm' has no lock held by this writer: ", 0), 0u) << seen[0];
  EXPECT_NE(seen[0].find("is in use by another writer"), std::string::npos) << seen[0];
  EXPECT_TRUE(std::filesystem::is_empty(dir / "repo/m")) << "written into another writer's directory";

  other.reset();
  writer.submit(snapshot(2));
  seen = events.wait_for(3);
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[1], "notice m: model directory '" + dir / "repo/m" + "' could be made and is locked now");
  EXPECT_EQ(seen[2], "written 2");
  EXPECT_TRUE(locked_by_another(dir / "repo/m")) << "written without taking the lock";
}

// A repository on a file system of 28 KiB (tmpfs, as root): 4 KiB versions (a page of tensor
// bytes, a page of header, a page of metadata.json) on 7 pages, so two fit and a third does not.
class SmallFileSystem : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(root);
    if (geteuid() != 0 || mount("tmpfs", root.c_str(), "tmpfs", 0, "size=28k") != 0) {
      GTEST_SKIP() << "cannot mount a small file system here (needs root)";
    }
    mounted = std::make_unique<Unpinned>();
    mounted->path = root;
  }
  // A writer keeping 3 versions that makes room when full, with versions 1 and 2 written (all
  // the file system has room for); its events in `events`.
  std::unique_ptr<repo::RepositoryWriter> writer_holding_two() {
    auto options = events.options(root);
    options.keep = 3;
    options.make_room_when_full = true;
    auto writer = std::make_unique<repo::RepositoryWriter>(options);
    for (std::uint64_t v = 1; v <= 2; ++v) {
      writer->submit(snapshot(v));
      EXPECT_EQ(events.wait_for(v).back(), "written " + std::to_string(v));
    }
    return writer;
  }
  ScratchDir dir;
  const std::string root = dir / "repo";
  WriterEvents events;
  std::unique_ptr<Unpinned> mounted;  // unmounts first: declared last
};

// A file system with room for fewer versions than `keep`: older versions were removed only after
// a successful write, so once full every write failed, the repository stayed on an old version
// for good, and a restarted daemon served that. The writer makes room from the older versions
// (never the newest) and writes again, saying so.
TEST_F(SmallFileSystem, TooSmallForKeepVersionsItStillTakesTheNewestOne) {
  auto held = writer_holding_two();
  ASSERT_EQ(events.wait_for(2).size(), 2u);
  auto& writer = *held;
  for (std::uint64_t v = 3; v <= 4; ++v) {
    writer.submit(snapshot(v));
    const auto seen = events.wait_for(2 * v - 2);
    ASSERT_EQ(seen.size(), 2 * v - 2);
    EXPECT_EQ(seen[2 * v - 4].rfind("notice m: no room for version " + std::to_string(v) + " (4096 bytes, ", 0), 0u)
        << seen[2 * v - 4];
    EXPECT_NE(seen[2 * v - 4].find("keep = 3 versions of this size do not fit"), std::string::npos) << seen[2 * v - 4];
    EXPECT_EQ(seen[2 * v - 3], "written " + std::to_string(v));
  }
  const auto stored = repo::Repository(root).list("m");
  ASSERT_FALSE(stored.empty());
  EXPECT_EQ(stored.front().version, 4u) << "the newest version is on disk";
  EXPECT_EQ(writer.stats().failed, 0u) << writer.stats().last_error;
}

// Making room fails where an older version cannot be removed (here: a mount point, which cannot
// be renamed away): said with the write's own error. It was dropped, and only "No space left on
// device" was said, while versions renamed away before the failure had left the listing.
TEST_F(SmallFileSystem, AFailureToMakeRoomIsSaidWithTheWritesError) {
  auto held = writer_holding_two();
  ASSERT_EQ(events.wait_for(2).size(), 2u);
  auto& writer = *held;
  const std::string first = repo::Repository(root).list("m").back().directory;
  ASSERT_EQ(mount(first.c_str(), first.c_str(), nullptr, MS_BIND, nullptr), 0) << std::strerror(errno);
  const Unpinned restore{first};
  writer.submit(snapshot(3));
  const auto seen = events.wait_for(3);
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[2].rfind("failed 3: ", 0), 0u) << seen[2];
  EXPECT_NE(seen[2].find("No space left on device; removing the older versions to make room failed: repository: "
                         "cannot rename away "),
            std::string::npos)
      << seen[2];
  EXPECT_NE(writer.stats().last_error.find("to make room failed"), std::string::npos) << writer.stats().last_error;
}

// A leftover of this process that cannot be removed neither fails the making of room nor the
// write after it, and is said after the write (review: prune threw for it after it had removed
// the older versions, and the write was counted failed, blamed on their removal).
TEST_F(SmallFileSystem, ALeftoverThatCannotBeRemovedNeitherFailsMakingRoomNorTheWrite) {
  auto held = writer_holding_two();
  ASSERT_EQ(events.wait_for(2).size(), 2u);
  auto& writer = *held;
  const std::string inside = root + "/m/.tmp-9-" + repo::process_tag() + "-999999/inside";
  std::filesystem::create_directories(inside);
  ASSERT_EQ(mount(inside.c_str(), inside.c_str(), nullptr, MS_BIND, nullptr), 0) << std::strerror(errno);
  const Unpinned restore{inside};
  writer.submit(snapshot(3));
  const auto seen = events.wait_for(5);
  ASSERT_EQ(seen.size(), 5u);
  EXPECT_EQ(seen[2].rfind("notice m: no room for version 3 ", 0), 0u) << seen[2];
  EXPECT_EQ(seen[3], "written 3");
  EXPECT_EQ(seen[4].rfind("notice m: what earlier writes or prunes of this process left cannot be removed", 0), 0u)
      << seen[4];
  EXPECT_NE(seen[4].find(".tmp-9-"), std::string::npos) << seen[4];
  EXPECT_EQ(writer.stats().failed, 0u) << writer.stats().last_error;
}

// Without make_room_when_full (a trainer's checkpoints, its rollback points), or where removing
// the older versions would not make room, a full disk fails the write and removes nothing.
TEST_F(SmallFileSystem, WhenFullNothingIsRemovedUnlessAskedAndUnlessItMakesRoom) {
  for (bool asked : {false, true}) {
    std::filesystem::remove_all(root + "/m");
    WriterEvents round;
    auto options = round.options(root);
    options.make_room_when_full = asked;
    repo::RepositoryWriter writer(options);
    writer.submit(snapshot(1));
    auto seen = round.wait_for(1);
    ASSERT_EQ(seen.back(), "written 1");
    writer.submit(snapshot(2));
    seen = round.wait_for(2);
    ASSERT_EQ(seen.back(), "written 2");
    // A version larger than the whole file system: no removal makes room for it.
    auto big = std::make_shared<repo::VersionSnapshot>(*snapshot(3));
    auto bytes = std::make_shared<std::vector<std::uint8_t>>(64 << 10, std::uint8_t{3});
    big->tensors[0] = {"w", modelcast::DType::kU8, {64 << 10}, bytes->data(), bytes->size()};
    big->keepalive = bytes;
    const std::size_t before = round.wait_for(0).size();
    writer.submit(big);
    seen = round.wait_for(before + 1);
    ASSERT_EQ(seen.size(), before + 1) << "asked " << asked;
    EXPECT_EQ(seen.back().rfind("failed 3: ", 0), 0u) << seen.back();
    EXPECT_NE(seen.back().find("No space left on device"), std::string::npos) << seen.back();
    EXPECT_EQ(repo::Repository(root).list("m").size(), 2u) << "removed versions that could not make room, asked "
                                                             << asked;
    if (!asked) {
      writer.submit(snapshot(4));  // fits only where older versions go: not asked, it fails
      seen = round.wait_for(before + 2);
      ASSERT_EQ(seen.size(), before + 2);
      EXPECT_EQ(seen.back().rfind("failed 4: ", 0), 0u) << seen.back();
      std::vector<std::uint64_t> versions;
      for (const auto& v : repo::Repository(root).list("m")) versions.push_back(v.version);
      EXPECT_EQ(versions.size(), 2u) << "a version was removed without being asked";
    }
  }
}

// A model released (removed from the daemon's configuration) is not written without its lock:
// its pending version is dropped, and one submitted later is refused until it is held again.
// One writer takes every model in turn: one model's write going through says nothing of another's
// failure, which last_error (the daemon's /v1/models) shows until that model's own write goes
// through.
TEST(RepositoryWriter, LastErrorIsAFailingModelsUntilItsOwnWriteGoesThrough) {
  ScratchDir dir;
  WriterEvents events;
  repo::RepositoryWriter writer(events.options(dir / "repo"));
  std::filesystem::create_directories(dir / "repo");
  std::ofstream(dir / "repo/a") << "in the way";  // a's directory cannot be made: its writes fail
  EXPECT_THROW(writer.hold("a"), modelcast::Error);
  ASSERT_EQ(writer.hold("b"), "");
  writer.submit(of_model("a", 1));
  ASSERT_EQ(events.wait_for(1).size(), 1u);
  const std::string failure = writer.stats().last_error;
  ASSERT_NE(failure.find("model 'a'"), std::string::npos) << failure;
  writer.submit(of_model("b", 1));
  ASSERT_EQ(events.wait_for(2).size(), 2u);
  EXPECT_EQ(writer.stats().last_error, failure) << "another model's write cleared a failing model's error";
  std::filesystem::remove(dir / "repo/a");
  writer.submit(of_model("a", 2));
  ASSERT_EQ(events.wait_for(4).size(), 4u);  // the notice that a's directory is locked now, then written 2
  EXPECT_EQ(writer.stats().last_error, "") << "the error stayed after the model's own write went through";
}

// A model its owner let go (a daemon's configuration no longer lists it) is no standing problem
// of the repository's: its failure leaves last_error, and a version of it refused because it was
// let go is no failure of the disk's, but dropped (a daemon logged it as a failed write, and
// counted it in its failure metric).
TEST(RepositoryWriter, AReleasedModelTakesItsFailureWithItAndItsRefusalsAreNoLastError) {
  ScratchDir dir;
  WriterEvents events;
  repo::RepositoryWriter writer(events.options(dir / "repo"));
  std::filesystem::create_directories(dir / "repo");
  std::ofstream(dir / "repo/a") << "in the way";
  EXPECT_THROW(writer.hold("a"), modelcast::Error);
  writer.submit(of_model("a", 1));
  ASSERT_EQ(events.wait_for(1).size(), 1u);
  ASSERT_NE(writer.stats().last_error, "");
  writer.release("a");
  EXPECT_EQ(writer.stats().last_error, "") << "a released model's failure is still shown";
  writer.submit(of_model("a", 2));
  const auto seen = events.wait_for(2);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1], "dropped 2: model 'a' was released (its owner stopped writing it) before this version was written");
  EXPECT_EQ(writer.stats().failed, 1u);
  EXPECT_EQ(writer.stats().skipped, 1u);
  EXPECT_EQ(writer.stats().last_error, "") << "a version refused because its model was released is shown as a failure";
}

TEST(RepositoryWriter, AReleasedModelIsNotWrittenUntilHeldAgain) {
  ScratchDir dir;
  WriterEvents events;
  std::mutex gate_mutex;
  std::condition_variable gate_changed;
  bool gate_open = false;
  auto options = events.options(dir / "repo");
  const auto record = options.on_written;
  options.on_written = [&](const repo::VersionSnapshot& s, const std::string& d, std::chrono::nanoseconds took) {
    record(s, d, took);
    std::unique_lock lock(gate_mutex);
    gate_changed.wait(lock, [&] { return gate_open; });  // holds the writer here after version 1
  };
  repo::RepositoryWriter writer(options);
  ASSERT_EQ(writer.hold("m"), "");
  writer.submit(snapshot(1));
  ASSERT_EQ(events.wait_for(1), std::vector<std::string>{"written 1"});
  std::weak_ptr<const void> two;
  writer.submit(snapshot(2, &two));  // pending behind the held writer
  writer.release("m");
  EXPECT_TRUE(two.expired()) << "a released model's pending version is still pinned";
  EXPECT_FALSE(locked_by_another(dir / "repo/m"));
  {
    std::lock_guard lock(gate_mutex);
    gate_open = true;
  }
  gate_changed.notify_all();
  writer.submit(snapshot(3));
  auto seen = events.wait_for(2);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1], "dropped 3: model 'm' was released (its owner stopped writing it) before this version was written");
  ASSERT_EQ(writer.hold("m"), "");
  writer.submit(snapshot(4));
  seen = events.wait_for(3);
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[2], "written 4");
}

}  // namespace
}  // namespace daemon_test
