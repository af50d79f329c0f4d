// The daemon's attach socket path: a socket left by a daemon that died is taken over, one a live
// daemon serves is refused, and a file or directory there is refused and left as it is (the
// path is the user's to choose; what is there may be theirs). A directory others can write is
// refused, and a client attaches to no other user's listener (one that bound the path while
// the daemon was down): run as root, a child process becomes `nobody` to play that user.
#include <gtest/gtest.h>

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>

#include "daemon/attach/seqpacket.h"
#include "modelcast/error.h"
#include "modelcast/sidecar.h"
#include "access_acl.h"
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

TEST(AttachSocketPath, ADirectoryOtherUsersCanWriteIsRefused) {
  testing_support::PrivateDirectory dir;
  for (auto [mode, who] : {std::pair{01777, "every user"}, std::pair{0770, "its group"}}) {
    ASSERT_EQ(chmod(dir.path().c_str(), mode), 0);
    const auto path = dir.file("attach.sock");
    expect_refused(path, who);
    EXPECT_FALSE(std::filesystem::exists(path)) << "bound before the directory was checked";
    try {
      modelcastd::attach::check_listen_directory(path);
      ADD_FAILURE() << "--check passed a directory of mode " << std::oct << mode;
    } catch (const modelcast::Error& e) {
      EXPECT_NE(std::string(e.what()).find(dir.path()), std::string::npos) << e.what();
    }
  }
  // Write granted by an ACL: the group bits are its mask, and the error says where to look.
  ASSERT_EQ(chmod(dir.path().c_str(), 0700), 0);
  if (!testing_support::grant_write_by_acl(dir.path(), 65534)) {
    GTEST_SKIP() << "this file system keeps no ACLs (" << std::strerror(errno) << ")";
  }
  expect_refused(dir.file("attach.sock"), "is writable by the users and groups its access ACL names");
}

// Another user, `nobody`: a child process that binds `path` as that user and listens until the
// test ends. Root only (setuid).
class OtherUsersListener {
 public:
  static constexpr uid_t kNobody = 65534;
  explicit OtherUsersListener(const std::string& path) {
    int ready[2];
    if (pipe(ready) != 0 || pipe(end_) != 0) throw std::runtime_error("pipe");
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
    pid_ = fork();
    if (pid_ == 0) {  // async-signal-safe calls only: the test process has threads
      close(ready[0]);
      close(end_[1]);
      int fd = -1;
      if (setgid(kNobody) == 0 && setuid(kNobody) == 0) fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
      char ok = fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 && listen(fd, 8) == 0;
      (void)!write(ready[1], &ok, 1);
      char byte;
      (void)!read(end_[0], &byte, 1);  // until the test closes its end
      _exit(0);
    }
    close(ready[1]);
    close(end_[0]);
    char ok = 0;
    (void)!read(ready[0], &ok, 1);
    close(ready[0]);
    listening_ = ok == 1;
  }
  ~OtherUsersListener() {
    close(end_[1]);
    if (pid_ > 0) waitpid(pid_, nullptr, 0);
  }
  bool listening() const { return listening_; }

 private:
  pid_t pid_ = -1;
  int end_[2] = {-1, -1};
  bool listening_ = false;
};

TEST(AttachSocketPath, AClientAttachesToNoOtherUsersListener) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root, to run a listener as another user";
  testing_support::PrivateDirectory dir;
  // A shared directory, as /tmp is: anyone may bind a name in it first.
  ASSERT_EQ(chmod(dir.path().c_str(), 01777), 0);
  const auto path = dir.file("attach.sock");
  OtherUsersListener impostor(path);
  ASSERT_TRUE(impostor.listening());
  const int fd = modelcastd::attach::connect_to(path);
  ASSERT_GE(fd, 0);
  EXPECT_THROW(modelcastd::attach::check_listener(fd, path), modelcast::Error);
  close(fd);
  try {
    modelcast::sidecar::Client client({path, "test", std::chrono::seconds(5)});
    (void)client.acquire();
    ADD_FAILURE() << "attached to user " << OtherUsersListener::kNobody << "'s listener";
  } catch (const modelcast::Error& e) {
    EXPECT_EQ(e.code(), modelcast::ErrorCode::kAuthentication) << e.what();
    EXPECT_NE(std::string(e.what()).find("user " + std::to_string(OtherUsersListener::kNobody)), std::string::npos)
        << e.what();
  }
}

TEST(AttachSocketPath, AListenerOwningTheDirectoryIsTheDaemon) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root, to run a listener as another user";
  testing_support::PrivateDirectory dir;
  ASSERT_EQ(chmod(dir.path().c_str(), 0755), 0);  // as /run: root's, and no one else writes it
  // The daemon's own runtime directory, as systemd makes it for User=modelcastd.
  const auto run = dir.file("run");
  ASSERT_EQ(mkdir(run.c_str(), 0755), 0);
  ASSERT_EQ(chown(run.c_str(), OtherUsersListener::kNobody, OtherUsersListener::kNobody), 0);
  const auto path = run + "/attach.sock";
  OtherUsersListener daemon(path);
  ASSERT_TRUE(daemon.listening());
  const int fd = modelcastd::attach::connect_to(path);
  ASSERT_GE(fd, 0);
  EXPECT_NO_THROW(modelcastd::attach::check_listener(fd, path));
  close(fd);
}

std::string refusal(const std::function<void()>& attempt, modelcast::ErrorCode code) {
  try {
    attempt();
  } catch (const modelcast::Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "not refused";
  return {};
}

// A directory in a place others can write (as /tmp) that another user owns says nothing about
// who the daemon is: that user could have made it first, or made a symbolic link there to a
// directory of theirs. Resolving the path before looking took such a link's target as the
// socket's directory, and its owner for the daemon.
TEST(AttachSocketPath, AClientTrustsADirectoryOwnerOnlyWhereNoOneElseCouldHaveChosenTheDirectory) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root, to make files another user owns";
  testing_support::PrivateDirectory dir;
  ASSERT_EQ(chmod(dir.path().c_str(), 0755), 0);
  const auto shared = dir.file("shared"), theirs = dir.file("theirs");
  ASSERT_EQ(mkdir(shared.c_str(), 0700), 0);
  ASSERT_EQ(chmod(shared.c_str(), 01777), 0);
  for (const auto& made : {theirs, shared + "/first"}) {  // theirs: a directory only they write
    ASSERT_EQ(mkdir(made.c_str(), 0755), 0);
    ASSERT_EQ(chown(made.c_str(), OtherUsersListener::kNobody, OtherUsersListener::kNobody), 0);
  }
  const auto link = shared + "/modelcastd";
  ASSERT_EQ(symlink(theirs.c_str(), link.c_str()), 0);
  ASSERT_EQ(lchown(link.c_str(), OtherUsersListener::kNobody, OtherUsersListener::kNobody), 0);

  OtherUsersListener via_link(theirs + "/attach.sock"), made_first(shared + "/first/attach.sock");
  ASSERT_TRUE(via_link.listening());
  ASSERT_TRUE(made_first.listening());
  for (const auto& [path, named] : {std::pair{link + "/attach.sock", "the symbolic link '" + link + "'"},
                                    std::pair{shared + "/first/attach.sock", "its directory '" + shared + "/first'"}}) {
    const int fd = modelcastd::attach::connect_to(path);
    ASSERT_GE(fd, 0) << path;
    const auto why = refusal([&] { modelcastd::attach::check_listener(fd, path); },
                             modelcast::ErrorCode::kAuthentication);
    close(fd);
    EXPECT_NE(why.find(named + " belongs to user " + std::to_string(OtherUsersListener::kNobody) + " and is in '" +
                       shared + "', which every user can write"),
              std::string::npos)
        << why;
    EXPECT_NE(why.find("not attaching"), std::string::npos) << why;
  }
  // The directory the link points at is theirs alone, in a directory only root writes: named
  // directly, its owner is the daemon.
  const auto direct = theirs + "/attach.sock";
  const int fd = modelcastd::attach::connect_to(direct);
  ASSERT_GE(fd, 0);
  EXPECT_NO_THROW(modelcastd::attach::check_listener(fd, direct));
  close(fd);
}

// The daemon's own check follows links by hand too: a link another user owns, on the way to a
// directory only this user can write, could be pointed at a directory of theirs while the daemon
// is down. A link root owns there is fine.
TEST(AttachSocketPath, ADaemonListensThroughNoSymbolicLinkAnotherUserOwns) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root, to make a link another user owns";
  testing_support::PrivateDirectory dir;
  const auto shared = dir.file("shared"), mine = dir.file("mine");
  ASSERT_EQ(mkdir(shared.c_str(), 0700), 0);
  ASSERT_EQ(chmod(shared.c_str(), 01777), 0);
  ASSERT_EQ(mkdir(mine.c_str(), 0700), 0);
  const auto link = shared + "/modelcastd", path = link + "/attach.sock";
  ASSERT_EQ(symlink(mine.c_str(), link.c_str()), 0);
  ASSERT_EQ(lchown(link.c_str(), OtherUsersListener::kNobody, OtherUsersListener::kNobody), 0);
  const auto why = refusal([&] { modelcastd::attach::check_listen_directory(path); },
                           modelcast::ErrorCode::kInvalidArgument);
  EXPECT_NE(why.find("the symbolic link '" + link + "' belongs to user " +
                     std::to_string(OtherUsersListener::kNobody)),
            std::string::npos)
      << why;
  ASSERT_EQ(lchown(link.c_str(), 0, 0), 0);
  EXPECT_NO_THROW(modelcastd::attach::check_listen_directory(path));
  // A relative link, and a way back up through "..", are followed as the kernel follows them.
  const auto relative = dir.file("relative");
  ASSERT_EQ(symlink("shared/../mine", relative.c_str()), 0);
  EXPECT_NO_THROW(modelcastd::attach::check_listen_directory(relative + "/attach.sock"));
  ASSERT_EQ(chmod(mine.c_str(), 0770), 0);
  EXPECT_NE(refusal([&] { modelcastd::attach::check_listen_directory(relative + "/attach.sock"); },
                    modelcast::ErrorCode::kInvalidArgument)
                .find("'" + mine + "' is writable by its group"),
            std::string::npos);
}

}  // namespace
