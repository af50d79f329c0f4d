// Reading a safetensors file's layout (what a restarted daemon recovers from its repository): a
// header whose shape cannot describe its bytes (a size that overflows, a negative extent) or
// whose fields have the wrong type is refused, naming the file and the tensor.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <string>

#include "core/repository/safetensors.h"
#include "modelcast/error.h"
#include "private_directory.h"

namespace {

namespace repo = modelcast::repository;

// A file with `header` (JSON) and `data_bytes` zero bytes after it.
std::string write_file(const testing_support::PrivateDirectory& dir, const std::string& header, std::size_t data_bytes) {
  const auto path = dir.file("model.safetensors");
  std::ofstream out(path, std::ios::binary);
  std::uint64_t length = header.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((length >> (8 * i)) & 0xff));
  out << header << std::string(data_bytes, '\0');
  return path;
}

void expect_refused(const std::string& header, std::size_t data_bytes, const std::string& why) {
  testing_support::PrivateDirectory dir;
  const auto path = write_file(dir, header, data_bytes);
  try {
    repo::read_safetensors_layout(path);
    ADD_FAILURE() << "accepted " << header;
  } catch (const modelcast::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(path), std::string::npos) << what;
    EXPECT_NE(what.find("tensor 'w'"), std::string::npos) << what;
    EXPECT_NE(what.find(why), std::string::npos) << what;
  }
}

TEST(SafetensorsReader, AShapeThatDescribesItsBytesIsRead) {
  testing_support::PrivateDirectory dir;
  auto layout = repo::read_safetensors_layout(
      write_file(dir, R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})", 24));
  ASSERT_EQ(layout.tensors.size(), 1u);
  EXPECT_EQ(layout.tensors[0].end, 24u);
}

TEST(SafetensorsReader, AShapeWhoseSizeOverflowsIsRefused) {
  // 2^62 + 1 elements of 4 bytes: 2^64 + 4 bytes, which wraps to the 4 the offsets say.
  expect_refused(R"({"w":{"dtype":"F32","shape":[4611686018427387905],"data_offsets":[0,4]}})", 4, "2^64");
}

TEST(SafetensorsReader, ANegativeExtentIsRefused) {
  expect_refused(R"({"w":{"dtype":"F32","shape":[-1,4],"data_offsets":[0,0]}})", 0, "negative extent");
}

TEST(SafetensorsReader, AFieldOfTheWrongTypeIsRefusedNamingTheTensor) {
  expect_refused(R"({"w":{"dtype":7,"shape":[1],"data_offsets":[0,4]}})", 4, "type must be string");
}

}  // namespace
