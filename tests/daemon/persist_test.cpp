// The producer's persist option: checkpoints written by the repository writer the daemon uses,
// read back by the independent reader (read_safetensors.py); every Nth version, the newest K
// kept; a stalled writer never blocks publish(); a failing disk is counted and training goes on;
// bad options refused at construction. The writer's callbacks are the tests' hooks: each one
// runs once the writer is idle again, so what happens next is decided, not raced.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <filesystem>
#include <future>
#include <mutex>

#include "daemon_fixture.h"
#include "logs_said.h"
#include "modelcast/consumer.h"
#include "modelcast/error.h"
#include "modelcast/modelcast.h"
#include "read_only_directory.h"

namespace daemon_test {
namespace {

using exchange_test::TestProducer;
namespace fs = std::filesystem;

// What the writer thread reported, and a gate that holds it inside on_persisted.
struct WriterEvents {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<std::uint64_t> persisted, failed;
  std::vector<std::string> paths, errors;
  bool gate_closed = false;  // while true, on_persisted stalls the writer thread

  void attach(modelcast::PersistOptions& options) {
    options.on_persisted = [this](std::uint64_t version, const std::string& path) {
      std::unique_lock lock(mutex);
      persisted.push_back(version);
      paths.push_back(path);
      changed.notify_all();
      changed.wait(lock, [&] { return !gate_closed; });
    };
    options.on_persist_failed = [this](std::uint64_t version, const std::string& error) {
      std::lock_guard lock(mutex);
      failed.push_back(version);
      errors.push_back(error);
      changed.notify_all();
    };
  }
  bool wait_persisted(std::size_t count) {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, 60s, [&] { return persisted.size() >= count; });
  }
  bool wait_failed(std::size_t count) {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, 60s, [&] { return failed.size() >= count; });
  }
  void open_gate() {
    {
      std::lock_guard lock(mutex);
      gate_closed = false;
    }
    changed.notify_all();
  }
};

modelcast::ProducerOptions persisting(const std::string& directory, std::uint64_t every, std::size_t keep,
                                      WriterEvents& events) {
  modelcast::ProducerOptions options;
  options.persist.directory = directory;
  options.persist.every = every;
  options.persist.keep = keep;
  events.attach(options.persist);
  return options;
}

std::string ok_line(const TestProducer& producer, std::uint64_t version) {
  std::size_t bytes = 0;
  for (const auto& t : producer.model) bytes += t.spec.size_bytes();
  return "ok " + std::to_string(version) + " " + std::to_string(producer.model.size()) + " " + std::to_string(bytes);
}

TEST_F(DaemonTest, PersistWritesEveryNthVersionAsSafetensorsAndKeepsTheNewestK) {
  WriterEvents events;
  TestProducer producer(256, persisting(dir / "ckpt", 2, 2, events));
  std::size_t due = 0;
  for (std::uint64_t v = 1; v <= 7; ++v) {
    producer.publish(v);
    if (v % 2 == 1) {
      ASSERT_TRUE(events.wait_persisted(++due)) << "version " << v << " was not persisted";
    }
  }
  auto stats = producer.producer->stats();
  EXPECT_EQ(events.persisted, (std::vector<std::uint64_t>{1, 3, 5, 7}));
  EXPECT_EQ(stats.persisted_versions, 4u);
  EXPECT_EQ(stats.persist_skipped, 0u);
  EXPECT_EQ(stats.persist_failures, 0u);
  EXPECT_EQ(events.paths.back(), dir / "ckpt/test/7");  // Triton's layout: <repo>/<model>/<version>
  // Every byte checked by a reader that shares no code with the writer.
  EXPECT_EQ(read_repository(dir / "ckpt"), (std::vector<std::string>{ok_line(producer, 5), ok_line(producer, 7)}));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir / "ckpt"), fs::directory_iterator{}), 1)
      << "something besides the model directory was left in the repository";
}

TEST_F(DaemonTest, PersistNeverBlocksPublishOnAStalledWriterAndSkipsVersionsDueMeanwhile) {
  WriterEvents events;
  events.gate_closed = true;
  TestProducer producer(256, persisting(dir / "ckpt", 1, 5, events));  // default 3 snapshot slots
  struct OpenAtExit {
    WriterEvents& events;
    ~OpenAtExit() { events.open_gate(); }
  } open_at_exit{events};
  modelcast::ConsumerOptions consumer_options;
  consumer_options.producer_endpoint = producer.producer->control_endpoint();
  consumer_options.model_name = "test";
  modelcast::Consumer consumer(consumer_options);
  ASSERT_TRUE(producer.producer->wait_for_consumers(1, 30s));

  producer.publish(1);
  ASSERT_TRUE(events.wait_persisted(1));  // the writer thread now stalls inside on_persisted
  auto publishing = std::async(std::launch::async, [&] {
    for (std::uint64_t v = 2; v <= 10; ++v) producer.publish(v);
  });
  // A bound for failing, not synchronisation: with the writer stalled, publish must finish.
  auto finished = publishing.wait_for(60s);
  if (finished != std::future_status::ready) events.open_gate();  // so the test can end
  ASSERT_EQ(finished, std::future_status::ready) << "publish() waited for the stalled writer";
  publishing.get();
  // The consumer verified version 10 only after its digests went out, which is after the
  // producer decided whether to persist it: every decision below is taken.
  auto view = consumer.wait_for_version(10, 60s);
  ASSERT_TRUE(view);
  EXPECT_EQ(view.version(), 10u);
  auto stats = producer.producer->stats();
  EXPECT_EQ(stats.persisted_versions, 1u);
  // Version 2 waits for the writer (one slot held); 3 to 10 came due while it was busy.
  EXPECT_EQ(stats.persist_skipped, 8u);

  events.open_gate();
  ASSERT_TRUE(events.wait_persisted(2));
  EXPECT_EQ(events.persisted, (std::vector<std::uint64_t>{1, 2}));
  EXPECT_EQ(read_repository(dir / "ckpt"), (std::vector<std::string>{ok_line(producer, 1), ok_line(producer, 2)}));
}

TEST_F(DaemonTest, PersistCallbacksThatThrowAreLoggedAndTheWriterGoesOn) {
  // An on_persisted that throws (an upload that failed) ended the trainer: the throw left the
  // writer thread.
  WriterEvents events;
  auto options = persisting(dir / "ckpt", 1, 3, events);
  options.persist.on_persisted = [record = options.persist.on_persisted](std::uint64_t version,
                                                                         const std::string& path) {
    record(version, path);
    if (version == 1) throw std::runtime_error("upload failed");
    throw 42;
  };
  TestProducer producer(256, options);
  for (std::uint64_t v = 1; v <= 2; ++v) {
    producer.publish(v);
    ASSERT_TRUE(events.wait_persisted(v)) << "version " << v << " was not persisted";
  }
  EXPECT_EQ(events.persisted, (std::vector<std::uint64_t>{1, 2}));
  EXPECT_EQ(read_repository(dir / "ckpt"), (std::vector<std::string>{ok_line(producer, 1), ok_line(producer, 2)}));
}

// A persist callback that destroys its Producer (a trainer stopping once its last checkpoint is
// on disk) cannot be let through: the destructor joins the thread the callback runs on. The
// process ended on "Resource deadlock avoided", which names nothing; now it says what was done.
void destroy_from_on_persisted(const fs::path& directory) {
  modelcast::ProducerOptions options;
  options.persist.directory = directory.string();
  std::unique_ptr<TestProducer> producer;
  std::promise<void> published, destroyed;
  auto published_now = published.get_future().share();
  options.persist.on_persisted = [&](std::uint64_t, const std::string&) {
    published_now.wait();  // publish() has returned: only the callback uses the producer
    producer.reset();
    destroyed.set_value();
  };
  producer = std::make_unique<TestProducer>(256, options);
  producer->publish(1);
  published.set_value();
  destroyed.get_future().wait_for(60s);
}

// A model whose start failed for a reason that passes, here its repository directory locked by
// another writer (another daemon, stopping), starts on its own once that writer is gone: it
// waited for a reload (SIGHUP) nobody sends, and served nothing meanwhile.
TEST_F(DaemonTest, AModelWhoseDirectoryAnotherWriterHeldStartsOnItsOwnOnceTheWriterIsGone) {
  TestProducer producer(1024);
  fs::create_directories(dir / "repo/test");
  const int held = open((dir / "repo/test").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(held, 0);
  ASSERT_EQ(flock(held, LOCK_EX | LOCK_NB), 0);
  auto daemon = start_daemon(config(producer.producer->control_endpoint(), 4, "", repository(dir / "repo", 2)));
  const bool said = std::any_of(startup_lines.begin(), startup_lines.end(), [](const std::string& line) {
    return line.find("not started: ") != std::string::npos && line.find("in use by another writer") != std::string::npos &&
           line.find("; trying again in 1 s") != std::string::npos;
  });
  EXPECT_TRUE(said) << "the start's failure and its retry were not logged";
  // Configured, not yet started: a client is told there is no version yet, not that no such model
  // is configured (which an inference server takes as "give up").
  EXPECT_FALSE(client().acquire()) << "a version was served before the model started";
  close(held);
  ASSERT_TRUE(producer.producer->wait_for_consumers(1, std::chrono::seconds(30)))
      << "the model did not start once its directory was free";
  producer.publish(1);
  EXPECT_TRUE(client().wait_for_version(1, std::chrono::seconds(30)));
  EXPECT_NE(wait_for_text(*daemon, "started on a retry"), "");
  kill(daemon->pid(), SIGTERM);
  EXPECT_EQ(daemon->wait(), 0);
}

using PersistDeathTest = DaemonTest;
TEST_F(PersistDeathTest, APersistCallbackThatDestroysItsProducerEndsTheProcessSayingSo) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(destroy_from_on_persisted(dir / "ckpt"),
               "a persist callback \\(PersistOptions::on_persisted or on_persist_failed\\) must not destroy its "
               "Producer");
}

TEST_F(DaemonTest, PersistFailuresAreCountedWhileDeliveryGoesOn) {
  testing_support::LogsSaid logs;
  WriterEvents events;
  TestProducer producer(256, persisting(dir / "ckpt", 1, 3, events));
  modelcast::ConsumerOptions consumer_options;
  consumer_options.producer_endpoint = producer.producer->control_endpoint();
  consumer_options.model_name = "test";
  modelcast::Consumer consumer(consumer_options);
  ASSERT_TRUE(producer.producer->wait_for_consumers(1, 30s));
  // The disk refuses: a file where the model's directory must go (refused even for root). The
  // producer made that directory (empty yet) to lock it.
  ASSERT_TRUE(fs::remove(dir / "ckpt/test"));
  write_file(dir / "ckpt/test", "in the way");
  for (std::uint64_t v = 1; v <= 2; ++v) {
    producer.publish(v);
    ASSERT_TRUE(events.wait_failed(v)) << "version " << v << ": no failure reported";
    auto view = consumer.wait_for_version(v, 60s);
    ASSERT_TRUE(view) << "delivery stopped at version " << v;
    EXPECT_EQ(testmodel::check(view, 1), "");
  }
  auto stats = producer.producer->stats();
  EXPECT_EQ(stats.persist_failures, 2u);
  EXPECT_EQ(stats.persisted_versions, 0u);
  EXPECT_NE(stats.persist_last_error.find(dir / "ckpt/test"), std::string::npos) << stats.persist_last_error;
  // Logged once (a full disk fails every version: one line per 10 s), naming what is on disk.
  EXPECT_EQ(logs.containing("persisting version 1 failed (training and delivery go on; the newest checkpoint is none "
                            "of this run's): "),
            1);
  EXPECT_EQ(logs.containing("persisting version"), 1) << "a failure at every version is logged at every version";
  // Once the disk takes writes again, so does the producer.
  fs::remove(dir / "ckpt/test");
  producer.publish(3);
  ASSERT_TRUE(events.wait_persisted(1));
  EXPECT_EQ(read_repository(dir / "ckpt"), (std::vector<std::string>{ok_line(producer, 3)}));
  EXPECT_EQ(producer.producer->stats().persist_last_error, "") << "an error that is over is still shown";
}

TEST_F(DaemonTest, PersistIntoADirectoryThatTurnedReadOnlyIsCountedWhileDeliveryGoesOn) {
  WriterEvents events;
  TestProducer producer(256, persisting(dir / "ckpt", 1, 3, events));
  ReadOnlyDirectory model_directory(dir / "ckpt/test");  // after the construction-time check
  if (!model_directory.usable()) GTEST_SKIP() << "cannot make a read-only directory here (root without mount)";
  modelcast::ConsumerOptions consumer_options;
  consumer_options.producer_endpoint = producer.producer->control_endpoint();
  consumer_options.model_name = "test";
  modelcast::Consumer consumer(consumer_options);
  ASSERT_TRUE(producer.producer->wait_for_consumers(1, 30s));
  for (std::uint64_t v = 1; v <= 3; ++v) {
    producer.publish(v);
    ASSERT_TRUE(events.wait_failed(v)) << "version " << v << ": no failure reported";
    auto view = consumer.wait_for_version(v, 60s);
    ASSERT_TRUE(view) << "delivery stopped at version " << v;
    EXPECT_EQ(testmodel::check(view, 1), "");
  }
  auto stats = producer.producer->stats();
  EXPECT_EQ(stats.persist_failures, 3u);
  EXPECT_EQ(stats.persisted_versions, 0u);
  EXPECT_EQ(stats.versions_published, 3u);
}

// The option each bad value must be refused with, at construction.
std::string refusal(const modelcast::ProducerOptions& options) {
  try {
    TestProducer producer(16, options);
  } catch (const modelcast::Error& e) {
    if (e.code() != modelcast::ErrorCode::kInvalidArgument) return "wrong code: " + std::string(e.what());
    return e.what();
  }
  return "accepted";
}

TEST_F(DaemonTest, BadPersistOptionsAreRefusedNamingTheOption) {
  modelcast::ProducerOptions options;
  options.persist.directory = dir / "ckpt";
  options.persist.every = 0;
  EXPECT_NE(refusal(options).find("persist.every"), std::string::npos) << refusal(options);
  options.persist.every = 1;
  options.persist.keep = 0;
  EXPECT_NE(refusal(options).find("persist.keep"), std::string::npos) << refusal(options);
  options.persist.keep = 1;
  options.snapshot_slots = 2;
  EXPECT_NE(refusal(options).find("snapshot_slots"), std::string::npos) << refusal(options);
  options.snapshot_slots = 3;
  write_file(dir / "a-file", "");
  options.persist.directory = dir / "a-file/ckpt";
  EXPECT_NE(refusal(options).find("persist.directory '" + dir / "a-file/ckpt' cannot be created"), std::string::npos)
      << refusal(options);
  options.persist.directory = dir / "ckpt";
  EXPECT_EQ(refusal(options), "accepted");
  // The model's name is a directory under persist.directory: "../escape" wrote versions beside
  // it, ".." into the directory above.
  // (TestProducer names its model "test".)
  auto named = [&](const char* name) {
    auto o = options;
    o.model_name = name;
    o.control_endpoint = "tcp://127.0.0.1:0";
    try {
      modelcast::Producer producer(o);
    } catch (const modelcast::Error& e) {
      return std::string(e.code() == modelcast::ErrorCode::kInvalidArgument ? "" : "wrong code: ") + e.what();
    }
    return std::string("accepted");
  };
  for (const char* name : {"../escape", "..", "a/b", ".hidden"}) {
    EXPECT_NE(named(name).find("persist: model_name '" + std::string(name) + "' must not contain '/' or '\\' or start with '.'"),
              std::string::npos) << named(name);
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "escape"));
  EXPECT_EQ(named("a.b-c"), "accepted");
}

// Two writers of one model directory (two trainers, or ranks, persisting one model to one
// directory; a daemon serving it from there) each took the other's unfinished writes for a
// crash's leftovers and removed them. The second is refused at construction, naming the
// directory; another model in the same directory, or the same one once the first is gone, is not.
TEST_F(DaemonTest, ASecondWriterOfAPersistedModelsDirectoryIsRefusedNamingIt) {
  WriterEvents events;
  auto first = std::make_unique<TestProducer>(16, persisting(dir / "ckpt", 1, 2, events));
  WriterEvents second_events;
  std::string error;
  try {
    TestProducer second(16, persisting(dir / "ckpt", 1, 2, second_events));
  } catch (const modelcast::Error& e) {
    EXPECT_EQ(e.code(), modelcast::ErrorCode::kState) << e.what();
    error = e.what();
  }
  EXPECT_NE(error.find("persist.directory: repository directory '" + dir / "ckpt/test" + "' is in use by another writer"),
            std::string::npos)
      << (error.empty() ? "accepted" : error);
  // The first one writes on, untouched.
  first->publish(1);
  ASSERT_TRUE(events.wait_persisted(1));
  auto other_model = persisting(dir / "ckpt", 1, 2, second_events);
  other_model.model_name = "other";  // TestProducer names its model "test"
  EXPECT_NO_THROW(modelcast::Producer{other_model});
  first.reset();
  EXPECT_NO_THROW(TestProducer(16, persisting(dir / "ckpt", 1, 2, second_events)));
}

// What a trainer that crashed mid-write left (a whole model's unfinished copy) stayed: only the
// daemon cleaned a repository at its start. On a disk sized for `keep` versions it took the room
// of one, and every checkpoint after failed for want of space.
TEST_F(DaemonTest, PersistRemovesWhatAnInterruptedRunLeftWhenItStarts) {
  const fs::path model = dir / "ckpt/test";
  fs::create_directories(model / ".tmp-1-4242.0123456789abcdef-0");
  std::ofstream(model / ".tmp-1-4242.0123456789abcdef-0/model.safetensors") << std::string(4096, 'x');
  fs::create_directories(model / ".del-1-4242.0123456789abcdef-1");
  WriterEvents events;
  TestProducer producer(16, persisting(dir / "ckpt", 1, 2, events));
  std::vector<std::string> left;
  for (const auto& entry : fs::directory_iterator(model)) left.push_back(entry.path().filename());
  EXPECT_TRUE(left.empty()) << ::testing::PrintToString(left);
  producer.publish(1);
  ASSERT_TRUE(events.wait_persisted(1));
}

// A trainer under umask 002 (per-user groups) made its persist directories group-writable, and a
// modelcastd pointed at that repository refused it: whoever can write there chooses what a
// restarted daemon serves. They are made 0755 less the umask, as the daemon makes its own.
TEST_F(DaemonTest, PersistDirectoriesAreNotGroupWritableWhateverTheUmask) {
  struct Umask {
    mode_t before = ::umask(002);
    ~Umask() { ::umask(before); }
  } umask_002;
  WriterEvents events;
  TestProducer producer(16, persisting(dir / "made/ckpt", 1, 2, events));
  producer.publish(1);
  ASSERT_TRUE(events.wait_persisted(1));
  for (const fs::path made : {dir / "made", dir / "made/ckpt", dir / "made/ckpt/test"}) {
    const auto permissions = fs::status(made).permissions();
    EXPECT_EQ(permissions & fs::perms::group_write, fs::perms::none) << made << " is group-writable";
    EXPECT_EQ(permissions & fs::perms::others_write, fs::perms::none) << made << " is writable by others";
  }
}

TEST_F(DaemonTest, APersistDirectoryThatCannotBeWrittenIsRefused) {
  ReadOnlyDirectory read_only(dir / "ro");
  if (!read_only.usable()) GTEST_SKIP() << "cannot make a read-only directory here (root without mount)";
  modelcast::ProducerOptions options;
  options.persist.directory = read_only.path;
  EXPECT_NE(refusal(options).find("persist.directory '" + read_only.path + "' is not writable"), std::string::npos)
      << refusal(options);
}

TEST_F(DaemonTest, PersistThroughTheCAbi) {
  mc_producer_options options;
  mc_producer_options_init(&options);
  EXPECT_EQ(options.persist_directory, nullptr);
  EXPECT_EQ(options.persist_every, 1u);
  EXPECT_EQ(options.persist_keep, 3u);
  options.model_name = "test";
  const std::string directory = dir / "ckpt";
  options.persist_directory = directory.c_str();
  options.persist_every = 0;
  mc_producer_t* producer = nullptr;
  EXPECT_EQ(mc_producer_create(&options, &producer), MC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(mc_last_error()).find("persist.every"), std::string::npos) << mc_last_error();
  options.persist_every = 1;
  ASSERT_EQ(mc_producer_create(&options, &producer), MC_OK) << mc_last_error();
  EXPECT_TRUE(fs::is_directory(directory));  // created and checked at construction
  std::uint64_t persisted = 9, failures = 9, skipped = 9;
  EXPECT_EQ(mc_producer_get_persist_stats(producer, &persisted, &failures, &skipped), MC_OK);
  EXPECT_EQ(persisted + failures + skipped, 0u);
  EXPECT_EQ(mc_producer_get_persist_stats(nullptr, &persisted, nullptr, nullptr), MC_ERR_INVALID_ARGUMENT);
  mc_producer_destroy(producer);
}

}  // namespace
}  // namespace daemon_test
