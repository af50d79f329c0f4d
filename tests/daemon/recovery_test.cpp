// What a restarted daemon recovers from its repository, on its own: a version whose
// metadata.json names a tensor twice (so another would never be served) or cannot be read is
// not served, and the log names the directory and why.
#include "daemon/recovery.h"

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <fstream>
#include <iterator>
#include <regex>
#include <sstream>

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

// Version 3 of model "m", tensors "a" and "b" of 16 bytes each.
void write_version(const std::string& root) {
  auto bytes = std::make_shared<std::vector<std::uint8_t>>(32, 3);
  repo::VersionSnapshot s;
  s.model = "m";
  s.version = 3;
  s.step = 30;
  s.tensors.push_back({"a", modelcast::DType::kU8, {16}, bytes->data(), 16});
  s.tensors.push_back({"b", modelcast::DType::kU8, {16}, bytes->data() + 16, 16});
  s.keepalive = bytes;
  repo::Repository(root).write(s);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), {}};
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

}  // namespace
}  // namespace daemon_test
