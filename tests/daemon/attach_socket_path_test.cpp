// The daemon's attach socket path: a socket left by a daemon that died is taken over, one a live
// daemon serves is refused, and a file or directory there is refused and left as it is (the
// path is the user's to choose; what is there may be theirs).
#include <gtest/gtest.h>

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "daemon/attach/seqpacket.h"
#include "modelcast/error.h"
#include "private_directory.h"

namespace {

using modelcastd::attach::listen_at;

void expect_refused(const std::string& path, const std::string& what) {
  try {
    int fd = listen_at(path);
    close(fd);
    ADD_FAILURE() << "listened at " << path << ", which holds " << what;
  } catch (const modelcast::Error& e) {
    EXPECT_EQ(e.code(), modelcast::ErrorCode::kInvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

TEST(AttachSocketPath, AFileThereIsRefusedAndKept) {
  testing_support::PrivateDirectory dir;
  const auto path = dir.file("notes.txt");
  std::ofstream(path) << "the user's notes";
  expect_refused(path, "file");
  std::ifstream in(path);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "the user's notes");
}

TEST(AttachSocketPath, ADirectoryThereIsRefusedAndKept) {
  testing_support::PrivateDirectory dir;
  const auto path = dir.file("sub");
  std::filesystem::create_directory(path);
  expect_refused(path, "directory");
  EXPECT_TRUE(std::filesystem::is_directory(path));
}

TEST(AttachSocketPath, ASocketLeftByADeadDaemonIsTakenOverAndALiveOneRefused) {
  testing_support::PrivateDirectory dir;
  const auto path = dir.file("attach.sock");
  {  // bound and closed without unlinking: what a daemon that died leaves
    int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    close(fd);
  }
  ASSERT_TRUE(std::filesystem::is_socket(path));
  int live = listen_at(path);
  EXPECT_GE(live, 0);
  EXPECT_THROW(listen_at(path), modelcast::Error) << "a second daemon took a live socket over";
  close(live);
}

}  // namespace
