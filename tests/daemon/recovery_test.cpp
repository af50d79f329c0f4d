// What a restarted daemon recovers from its repository, on its own: a version whose
// metadata.json names a tensor twice (so another would never be served) or cannot be read, or
// whose bytes are not those written, is not served, and the log names the directory and why.
#include "daemon/recovery.h"

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/repository/repository.h"
#include "daemon_fixture.h"

namespace daemon_test {
namespace {

namespace repo = modelcast::repository;

// The daemon's logger, writing into `out` for the test's duration.
struct CapturedLog {
  CapturedLog() {
    spdlog::drop("modelcastd");
    auto logger = std::make_shared<spdlog::logger>("modelcastd", std::make_shared<spdlog::sinks::ostream_sink_mt>(out));
    spdlog::register_logger(logger);
  }
  ~CapturedLog() { spdlog::drop("modelcastd"); }
  std::ostringstream out;
};

// Version `version` of `model`, tensors "a" and "b" of 16 bytes each.
void write_version(const std::string& root, std::uint64_t version = 3, const std::string& model = "m") {
  auto bytes = std::make_shared<std::vector<std::uint8_t>>(32, static_cast<std::uint8_t>(version));
  repo::VersionSnapshot s;
  s.model = model;
  s.version = version;
  s.step = static_cast<std::int64_t>(version) * 10;
  s.tensors.push_back({"a", modelcast::DType::kU8, {16}, bytes->data(), 16});
  s.tensors.push_back({"b", modelcast::DType::kU8, {16}, bytes->data() + 16, 16});
  s.keepalive = bytes;
  repo::Repository(root).write(s);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), {}};
}

// A model whose metadata.json would be too large to read back (each name is in it three times):
// refused before anything is written, saying why. Written, every such version was unreadable,
// so never pruned nor recovered, and the disk filled with them.
TEST(Recovery, AVersionTooLargeToBeReadBackIsNotWritten) {
  ScratchDir dir;
  constexpr std::size_t kTensors = 9000;  // of 4,000-byte names: about 108 MB of metadata.json
  auto bytes = std::make_shared<std::vector<std::uint8_t>>(kTensors, 7);
  repo::VersionSnapshot s;
  s.model = "m";
  s.version = 1;
  for (std::size_t i = 0; i < kTensors; ++i) {
    std::string name = std::to_string(i);
    name.resize(4000, 'x');
    s.tensors.push_back({name, modelcast::DType::kU8, {1}, bytes->data() + i, 1});
  }
  s.keepalive = bytes;
  repo::Repository repository(dir / "repo");
  try {
    repository.write(s);
    ADD_FAILURE() << "a version whose metadata.json cannot be read back was written";
  } catch (const modelcast::Error& e) {
    EXPECT_EQ(e.code(), modelcast::ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("bytes a repository reads back: nothing was written"), std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(repository.list("m").empty());
  EXPECT_TRUE(repository.damaged("m").empty());
  std::size_t entries = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir / "repo/m")) {
    ADD_FAILURE() << "left behind: " << entry.path();
    ++entries;
  }
  EXPECT_EQ(entries, 0u);
}

TEST(Recovery, AVersionWhoseMetadataNamesATensorTwiceIsNotServed) {
  ScratchDir dir;
  CapturedLog log;
  write_version(dir / "repo");
  ASSERT_TRUE(modelcastd::recover_newest(dir / "repo", "m", 1 << 20)) << log.out.str();
  const auto metadata = dir / "repo/m/3/metadata.json";
  auto text = read_file(metadata);
  auto twice = std::regex_replace(text, std::regex(R"("b")"), R"("a")");
  ASSERT_NE(twice, text);
  write_file(metadata, twice);
  EXPECT_FALSE(modelcastd::recover_newest(dir / "repo", "m", 1 << 20)) << "served 'a' twice and never 'b'";
  EXPECT_NE(log.out.str().find("names tensor 'a' twice"), std::string::npos) << log.out.str();
}

TEST(Recovery, AVersionWhoseMetadataCannotBeReadIsReportedNotSkippedSilently) {
  ScratchDir dir;
  CapturedLog log;
  write_version(dir / "repo");
  write_file(dir / "repo/m/3/metadata.json", "{ not json");
  EXPECT_FALSE(modelcastd::recover_newest(dir / "repo", "m", 1 << 20));
  const auto said = log.out.str();
  EXPECT_NE(said.find(dir / "repo/m/3: metadata.json cannot be read"), std::string::npos) << said;
  EXPECT_EQ(repo::Repository(dir / "repo").damaged("m").size(), 1u);
}

// Another tool's version beside ours (an existing Triton repository's "1/model.onnx") is no
// damage: said as what it is, and the version of ours beside it served.
TEST(Recovery, AnotherToolsVersionIsNamedAsSuchNotAsDamage) {
  ScratchDir dir;
  CapturedLog log;
  write_version(dir / "repo");
  std::filesystem::create_directories(dir / "repo/m/1");
  write_file(dir / "repo/m/1/model.onnx", "not ours");
  EXPECT_TRUE(modelcastd::recover_newest(dir / "repo", "m", 1 << 20)) << log.out.str();
  const auto said = log.out.str();
  EXPECT_NE(said.find(dir / "repo/m/1: no metadata.json: not a version modelcast wrote (another tool's?); left as it is"),
            std::string::npos)
      << said;
  EXPECT_EQ(said.find("cannot be read"), std::string::npos) << said;
  EXPECT_TRUE(std::filesystem::exists(dir / "repo/m/1/model.onnx"));
}

// A byte changed on disk (a bad sector, a tool that rewrote the file) passes every layout check:
// the version is skipped, named with the tensor, and the one before it served.
TEST(Recovery, AVersionWhoseTensorBytesWereAlteredIsNotServed) {
  ScratchDir dir;
  CapturedLog log;
  write_version(dir / "repo", 3);
  write_version(dir / "repo", 4);
  const auto tensors = dir / "repo/m/4/model.safetensors";
  auto bytes = read_file(tensors);
  bytes.back() = static_cast<char>(bytes.back() ^ 0x01);  // the last byte of tensor 'b'
  write_file(tensors, bytes);
  auto served = modelcastd::recover_newest(dir / "repo", "m", 1 << 20);
  ASSERT_TRUE(served) << log.out.str();
  EXPECT_EQ(served->manifest.version, 3u) << "served the altered version";
  EXPECT_NE(log.out.str().find("the bytes of tensor 'b' in " + tensors + " are not those written"), std::string::npos)
      << log.out.str();
}

// Versions written before digests were kept are still served, and the log says they are unchecked;
// a digest list that misses a tensor is a damaged version.
TEST(Recovery, DigestsInMetadataAreCheckedWhenPresentAndNamedWhenDamaged) {
  ScratchDir dir;
  CapturedLog log;
  write_version(dir / "repo", 3);
  const auto metadata = dir / "repo/m/3/metadata.json";
  auto doc = nlohmann::json::parse(read_file(metadata));
  ASSERT_TRUE(doc.contains("tensor_xxh3")) << doc.dump();
  auto without = doc;
  without.erase("tensor_xxh3");
  write_file(metadata, without.dump());
  ASSERT_TRUE(modelcastd::recover_newest(dir / "repo", "m", 1 << 20)) << log.out.str();
  EXPECT_NE(log.out.str().find("written without digests"), std::string::npos) << log.out.str();

  auto missing = doc;
  missing["tensor_xxh3"].erase("b");
  write_file(metadata, missing.dump());
  EXPECT_FALSE(modelcastd::recover_newest(dir / "repo", "m", 1 << 20));
  EXPECT_NE(log.out.str().find("tensor_xxh3 has no digest of tensor 'b'"), std::string::npos) << log.out.str();

  auto number = doc;
  number["tensor_xxh3"]["a"] = 12;
  write_file(metadata, number.dump());
  EXPECT_FALSE(modelcastd::recover_newest(dir / "repo", "m", 1 << 20));
  EXPECT_NE(log.out.str().find("the tensor_xxh3 of tensor 'a' is not hexadecimal"), std::string::npos) << log.out.str();
}

// A FIFO where a file should be (planted, or left by a tool) would block open() until a writer
// came, and with it the daemon's start, its reload and its shutdown. The newest version is then
// skipped, named, and the one before it served.
TEST(Recovery, AFifoInPlaceOfAVersionFileIsSkippedWithoutWaitingForAWriter) {
  using namespace std::chrono_literals;
  for (const char* file : {"model.safetensors", "metadata.json"}) {
    SCOPED_TRACE(file);
    ScratchDir dir;
    CapturedLog log;
    write_version(dir / "repo", 3);
    write_version(dir / "repo", 4);
    const auto fifo = dir / (std::string("repo/m/4/") + file);
    ASSERT_EQ(unlink(fifo.c_str()), 0);
    ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
    auto recovered = std::async(std::launch::async, [&] { return modelcastd::recover_newest(dir / "repo", "m", 1 << 20); });
    if (recovered.wait_for(30s) != std::future_status::ready) {
      ADD_FAILURE() << "recovery waits for a writer of " << fifo;
      ::close(::open(fifo.c_str(), O_WRONLY | O_NONBLOCK));  // lets the blocked open return
    }
    auto served = recovered.get();
    ASSERT_TRUE(served) << log.out.str();
    EXPECT_EQ(served->manifest.version, 3u);
    EXPECT_NE(log.out.str().find(fifo + "' is not a regular file"), std::string::npos) << log.out.str();
  }
}

// nlohmann-json reads -1 as 2^64 - 1 when asked for an unsigned number: a version so damaged
// would be served as the newest there could ever be.
TEST(Recovery, AVersionNumberBelowZeroIsNotServed) {
  ScratchDir dir;
  CapturedLog log;
  write_version(dir / "repo", 3);
  const auto metadata = dir / "repo/m/3/metadata.json";
  auto text = read_file(metadata);
  auto negative = std::regex_replace(text, std::regex(R"("version": ?3)"), R"("version":-1)");
  ASSERT_NE(negative, text) << text;
  write_file(metadata, negative);
  EXPECT_FALSE(modelcastd::recover_newest(dir / "repo", "m", 1 << 20));
  EXPECT_NE(log.out.str().find("'version' is not an integer >= 0"), std::string::npos) << log.out.str();
}

// The longest model name the config takes (a directory name's 255 bytes) is served: its
// shared-memory buffer is named after it, and memfd_create takes 249 bytes at most.
TEST(Recovery, AModelNameAsLongAsADirectoryNameIsServed) {
  ScratchDir dir;
  CapturedLog log;
  const std::string model(255, 'm');
  write_version(dir / "repo", 3, model);
  auto served = modelcastd::recover_newest(dir / "repo", model, 1 << 20);
  ASSERT_TRUE(served) << log.out.str();
  EXPECT_EQ(served->manifest.version, 3u);
}

// A symlink loop where a version (or its file) should be ended the daemon at start with an
// uncaught filesystem_error, and made every later write of the model fail: such an entry is
// named as damaged and passed over, and the version before it served and written after.
TEST(Recovery, AnEntryThatCannotBeReadIsPassedOverAndNamed) {
  ScratchDir dir;
  CapturedLog log;
  write_version(dir / "repo", 3);
  write_version(dir / "repo", 4);
  std::filesystem::create_symlink("9", dir / "repo/m/9");  // 9 -> 9
  std::filesystem::remove(dir / "repo/m/4/model.safetensors");
  std::filesystem::create_symlink("model.safetensors", dir / "repo/m/4/model.safetensors");
  auto served = modelcastd::recover_newest(dir / "repo", "m", 1 << 20);
  ASSERT_TRUE(served) << log.out.str();
  EXPECT_EQ(served->manifest.version, 3u);
  const auto said = log.out.str();
  EXPECT_NE(said.find(dir / "repo/m/9: cannot be read: Too many levels of symbolic links"), std::string::npos) << said;
  EXPECT_NE(said.find(dir / "repo/m/4: model.safetensors cannot be read: Too many levels of symbolic links"),
            std::string::npos)
      << said;
  write_version(dir / "repo", 5);  // the writer's list() passes over them too
  EXPECT_EQ(repo::Repository(dir / "repo").list("m").front().version, 5u);
}

// Directory numbers are any 64-bit number: one of 20 digits was written and never listed again,
// so it was neither served after a restart nor pruned.
TEST(Recovery, VersionNumbersOfTwentyDigitsAreListedServedAndPruned) {
  ScratchDir dir;
  CapturedLog log;
  const std::uint64_t big = 10000000000000000000ull;
  for (std::uint64_t v : {big, big + 1, big + 2}) write_version(dir / "repo", v);
  repo::Repository repository(dir / "repo");
  ASSERT_EQ(repository.list("m").size(), 3u);
  static_cast<void>(repository.prune("m", 1));
  ASSERT_EQ(repository.list("m").size(), 1u);
  auto served = modelcastd::recover_newest(dir / "repo", "m", 1 << 20);
  ASSERT_TRUE(served) << log.out.str();
  EXPECT_EQ(served->manifest.version, big + 2);
  // Not numbers write() makes: a sign, a leading zero, past 2^64.
  for (const char* name : {"+7", "07", "18446744073709551616"}) {
    std::filesystem::create_directories(dir / (std::string("repo/m/") + name));
  }
  EXPECT_EQ(repository.list("m").size(), 1u);
  EXPECT_TRUE(repository.damaged("m").empty());
}

// A leftover of an interrupted write of another process (a crashed daemon) is removed; one of
// this process's is a write that may still be going on (a reload restarting the model while the
// writer wrote its last version), and is left.
TEST(Recovery, OnlyLeftoversOfOtherProcessesAreRemoved) {
  ScratchDir dir;
  CapturedLog log;
  write_version(dir / "repo", 3);
  const std::string ours = dir / ("repo/m/.tmp-4-" + modelcast::repository::process_tag() + "-0");
  const std::string theirs = dir / "repo/m/.tmp-4-999999999-0";
  const std::string same_pid = dir / ("repo/m/.tmp-5-" + std::to_string(getpid()) + "-0");  // a crashed pid 1's
  for (const auto& d : {ours, theirs, same_pid}) std::filesystem::create_directories(d);
  ASSERT_TRUE(modelcastd::recover_newest(dir / "repo", "m", 1 << 20));
  EXPECT_TRUE(std::filesystem::exists(ours)) << "a write of this process in progress was removed";
  EXPECT_FALSE(std::filesystem::exists(theirs));
  EXPECT_FALSE(std::filesystem::exists(same_pid));
}

// Where the model directory could not be locked (a file system without flock: some NFS and
// Lustre mounts), another process may be writing there: its leftovers are left. Removed, a
// trainer persisting to the same directory lost the version it was writing.
TEST(Recovery, LeftoversAreLeftWhereTheModelDirectoryIsNotLocked) {
  ScratchDir dir;
  CapturedLog log;
  write_version(dir / "repo", 3);
  const std::string theirs = dir / "repo/m/.tmp-4-999999999-0";
  std::filesystem::create_directories(theirs);
  ASSERT_TRUE(modelcastd::recover_newest(dir / "repo", "m", 1 << 20, /*locked=*/false));
  EXPECT_TRUE(std::filesystem::exists(theirs)) << "another writer's write in progress was removed";
}

// An empty tensor shares its offset in the file with the next one: sorted after it by name, it
// "did not follow the previous one", and a version the daemon had written was never served. The
// file packs tensors; served at the file's offsets, a float tensor after 3 bytes sat at an odd
// address. Each tensor is now served where the producer would place it, at a multiple of 256.
TEST(Recovery, AVersionWithAnEmptyTensorIsServedWithEveryTensorAligned) {
  ScratchDir dir;
  CapturedLog log;
  auto bytes = std::make_shared<std::vector<std::uint8_t>>(3 + 12 + 16);
  for (std::size_t i = 0; i < bytes->size(); ++i) (*bytes)[i] = static_cast<std::uint8_t>(i + 1);
  repo::VersionSnapshot s;
  s.model = "m";
  s.version = 3;
  s.tensors.push_back({"z_empty", modelcast::DType::kU8, {0}, bytes->data(), 0});
  s.tensors.push_back({"b", modelcast::DType::kU8, {3}, bytes->data(), 3});
  s.tensors.push_back({"c", modelcast::DType::kF32, {3}, bytes->data() + 3, 12});
  s.tensors.push_back({"d", modelcast::DType::kF64, {2}, bytes->data() + 15, 16});
  s.keepalive = bytes;
  repo::Repository(dir / "repo").write(s);
  auto served = modelcastd::recover_newest(dir / "repo", "m", 1 << 20);
  ASSERT_TRUE(served) << log.out.str();
  const auto& tensors = served->manifest.tensors;
  ASSERT_EQ(tensors.size(), 4u);
  std::size_t from = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(tensors[i].name, s.tensors[i].name) << "not in the producer's order";
    EXPECT_EQ(tensors[i].offset % 256, 0u) << tensors[i].name;
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(served->buffer->memory().data() + tensors[i].offset) % 256, 0u);
    ASSERT_EQ(tensors[i].bytes, s.tensors[i].bytes);
    EXPECT_EQ(std::memcmp(served->buffer->memory().data() + tensors[i].offset, bytes->data() + from, tensors[i].bytes), 0)
        << tensors[i].name;
    from += tensors[i].bytes;
  }
}

// Whoever can write a model's directory chooses what a restarted daemon serves, signed producer
// or not: a directory the group can write is not read, and the log says why.
TEST(Recovery, AModelDirectoryOthersCanWriteIsNotRead) {
  ScratchDir dir;
  CapturedLog log;
  write_version(dir / "repo", 3);
  ASSERT_TRUE(modelcastd::recover_newest(dir / "repo", "m", 1 << 20)) << log.out.str();
  std::filesystem::permissions(dir / "repo/m", std::filesystem::perms::group_write, std::filesystem::perm_options::add);
  EXPECT_FALSE(modelcastd::recover_newest(dir / "repo", "m", 1 << 20)) << "read a directory the group can write";
  EXPECT_NE(log.out.str().find("is writable by"), std::string::npos) << log.out.str();
  EXPECT_THROW(modelcastd::check_repository_directory(dir / "repo/m"), modelcast::Error);
  EXPECT_NO_THROW(modelcastd::check_repository_directory(dir / "repo"));
}

// The repository's names reach the log and the clients: a key that is no name (a newline forged
// a log line) makes the version unservable, as it would a producer's.
TEST(Recovery, AVersionWhoseMetadataKeyIsNoNameIsNotServed) {
  ScratchDir dir;
  CapturedLog log;
  write_version(dir / "repo", 3);
  const auto metadata = dir / "repo/m/3/metadata.json";
  auto doc = nlohmann::json::parse(read_file(metadata));
  doc["metadata"]["x\n2026-12-05T00:00:00.000 info forged"] = "1";
  write_file(metadata, doc.dump());
  EXPECT_FALSE(modelcastd::recover_newest(dir / "repo", "m", 1 << 20));
  const auto said = log.out.str();
  EXPECT_NE(said.find("contains a control character"), std::string::npos) << said;
  EXPECT_EQ(said.find("\n2026-12-05T00:00:00.000 info forged"), std::string::npos) << said;
}

// systemd's UMask=0007 let the daemon make its repository's directories group-writable, which the
// start then refuses (whoever writes there chooses what is served): they are made 0755 less the
// umask, whatever it lets through.
TEST(Recovery, TheRepositorysDirectoriesAreMadeWritableByTheirOwnerOnly) {
  ScratchDir dir;
  const mode_t before = umask(0002);
  std::error_code error;
  repo::make_directories(dir / "repo/m", error);
  write_version(dir / "repo", 3, "n");
  umask(before);
  ASSERT_FALSE(error) << error.message();
  for (const auto& made : {dir / "repo", dir / "repo/m", dir / "repo/n", dir / "repo/n/3"}) {
    struct stat info {};
    ASSERT_EQ(stat(made.c_str(), &info), 0) << made;
    EXPECT_EQ(info.st_mode & 0777, 0755u) << made;
  }
  EXPECT_NO_THROW(modelcastd::check_repository_directory(dir / "repo/n"));
  write_file(dir / "file", "");
  repo::make_directories(dir / "file/m", error);
  EXPECT_EQ(error, std::errc::not_a_directory);
}

// The digests cover bytes only: a header whose dtype was changed in place ("U8" to "I8", the
// offsets unchanged) served the same bytes as another type. metadata.json records each tensor's
// dtype and shape, and a header that disagrees makes the version unservable.
TEST(Recovery, AHeaderThatGivesATensorAnotherDtypeThanWrittenIsNotServed) {
  ScratchDir dir;
  CapturedLog log;
  write_version(dir / "repo", 3);
  write_version(dir / "repo", 4);
  const auto tensors = dir / "repo/m/4/model.safetensors";
  auto bytes = read_file(tensors);
  const auto at = bytes.find("\"U8\"");
  ASSERT_NE(at, std::string::npos);
  bytes[at + 1] = 'I';
  write_file(tensors, bytes);
  auto served = modelcastd::recover_newest(dir / "repo", "m", 1 << 20);
  ASSERT_TRUE(served) << log.out.str();
  EXPECT_EQ(served->manifest.version, 3u) << "served the altered header";
  EXPECT_NE(log.out.str().find("dtype I8 and shape [16], metadata.json U8 and [16]"), std::string::npos) << log.out.str();
}

// /v1/models' age_seconds counted from the restart: a version written hours before looked fresh.
TEST(Recovery, ARecoveredVersionIsAsOldAsItsWrite) {
  ScratchDir dir;
  CapturedLog log;
  write_version(dir / "repo", 3);
  const auto metadata = dir / "repo/m/3/metadata.json";
  auto doc = nlohmann::json::parse(read_file(metadata));
  const std::int64_t an_hour_ago = std::chrono::duration_cast<std::chrono::nanoseconds>(
      (std::chrono::system_clock::now() - std::chrono::hours(1)).time_since_epoch()).count();
  doc["written_at_ns"] = an_hour_ago;
  write_file(metadata, doc.dump());
  auto served = modelcastd::recover_newest(dir / "repo", "m", 1 << 20);
  ASSERT_TRUE(served) << log.out.str();
  EXPECT_EQ(std::chrono::duration_cast<std::chrono::nanoseconds>(served->installed_at.time_since_epoch()).count(), an_hour_ago);
}

}  // namespace
}  // namespace daemon_test
