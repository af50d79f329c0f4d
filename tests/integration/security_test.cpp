// Keys, the authenticated control plane and signed versions: who may join, whom a consumer
// trusts, and that nothing a stranger or a relay changes gets installed.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <thread>

#include <zmq.hpp>

#include "exchange_fixture.h"
#include "modelcast/keys.h"
#include "access_acl.h"
#include "private_directory.h"
#include "scripted_producer.h"

namespace exchange_test {
namespace {

namespace fs = std::filesystem;
using modelcast::ErrorCode;

std::string error_of(auto&& f, ErrorCode expected) {
  try {
    f();
  } catch (const modelcast::Error& e) {
    EXPECT_EQ(e.code(), expected) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return {};
}

class TempDir {
 public:
  // Private (0700): keys are secrets, and a plaintext ipc:// endpoint here must be.
  TempDir() : path_(fs::temp_directory_path() / ("modelcast-keys-" + std::to_string(getpid()))) {
    fs::create_directories(path_);
    fs::permissions(path_, fs::perms::owner_all);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

TEST(Keys, SaveAndLoadRoundTripWithTheSecretPrivate) {
  TempDir dir;
  auto keys = modelcast::generate_key_pair();
  EXPECT_EQ(keys.public_key.size(), 40u);
  EXPECT_NE(keys.public_key, modelcast::generate_key_pair().public_key);
  modelcast::save_key_pair(keys, dir.file("p.key"));
  struct stat info {};
  ASSERT_EQ(stat(dir.file("p.key").c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  auto loaded = modelcast::load_key_pair(dir.file("p.key"));
  EXPECT_EQ(loaded.public_key, keys.public_key);
  EXPECT_EQ(loaded.secret_key, keys.secret_key);
  EXPECT_EQ(modelcast::load_public_key(dir.file("p.key.pub")), keys.public_key);
  EXPECT_NE(error_of([&] { modelcast::save_key_pair(keys, dir.file("p.key")); }, ErrorCode::kInvalidArgument)
                .find("exists"),
            std::string::npos);
}

// Two threads overwriting one key path renamed their files into place interleaved, and could leave
// a .pub that is not the pair's public key (a peer given it would refuse its holder).
TEST(Keys, TwoThreadsOverwritingOnePairLeaveAMatchingPair) {
  TempDir dir;
  const std::string path = dir.file("p.key");
  modelcast::save_key_pair(modelcast::generate_key_pair(), path);
  int mismatched = 0;
  for (int round = 0; round < 300; ++round) {
    auto write_one = [&] { modelcast::save_key_pair(modelcast::generate_key_pair(), path, /*overwrite=*/true); };
    std::thread other(write_one);
    write_one();
    other.join();
    mismatched += modelcast::load_key_pair(path).public_key != modelcast::load_public_key(path + ".pub");
  }
  EXPECT_EQ(mismatched, 0) << "rounds that left a .pub not of the pair";
}

// A key file's path given where the key goes said only "expected 40 Z85 characters, got 33".
TEST(Keys, APathGivenForAKeyIsSaidToBeOne) {
  for (const std::string path : {"/etc/modelcast/trainer.key.pub", "trainer.key", "keys/trainer.key.pub"}) {
    const auto said = error_of([&] { modelcast::check_public_key(path, "producer_public_key"); }, ErrorCode::kInvalidArgument);
    EXPECT_NE(said.find("it looks like a key file's path"), std::string::npos) << path << ": " << said;
    EXPECT_EQ(said.find(path), std::string::npos) << "quoted: " << said;
  }
  const auto said = error_of([&] { modelcast::check_public_key("abc", "producer_public_key"); }, ErrorCode::kInvalidArgument);
  EXPECT_EQ(said.find("path"), std::string::npos) << said;
}

TEST(Keys, MalformedFilesAreErrorsNamingFileLineAndKey) {
  TempDir dir;
  auto keys = modelcast::generate_key_pair();
  auto other = modelcast::generate_key_pair();
  write(dir.file("unknown"), "public = \"" + keys.public_key + "\"\nsecret = \"" + keys.secret_key + "\"\nsecrte = \"x\"\n");
  auto unknown = error_of([&] { modelcast::load_key_pair(dir.file("unknown")); }, ErrorCode::kInvalidArgument);
  EXPECT_NE(unknown.find(dir.file("unknown")), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("line 3"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("'secrte'"), std::string::npos) << unknown;
  write(dir.file("syntax"), "public = \"" + keys.public_key + "\"\nsecret = \n");
  EXPECT_NE(error_of([&] { modelcast::load_key_pair(dir.file("syntax")); }, ErrorCode::kInvalidArgument).find("line 2"),
            std::string::npos);
  write(dir.file("mismatch"), "public = \"" + keys.public_key + "\"\nsecret = \"" + other.secret_key + "\"\n");
  EXPECT_NE(error_of([&] { modelcast::load_key_pair(dir.file("mismatch")); }, ErrorCode::kInvalidArgument)
                .find("does not belong"),
            std::string::npos);
  // A mistyped secret is most of a secret: named, never quoted.
  const std::string typo = keys.secret_key.substr(0, 39);
  write(dir.file("typo"), "public = \"" + keys.public_key + "\"\nsecret = \"" + typo + "\"\n");
  std::filesystem::permissions(dir.file("typo"), std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  auto mistyped = error_of([&] { modelcast::load_key_pair(dir.file("typo")); }, ErrorCode::kInvalidArgument);
  EXPECT_NE(mistyped.find("the secret key of key file '" + dir.file("typo") + "' is not a key"), std::string::npos)
      << mistyped;
  EXPECT_EQ(mistyped.find(typo.substr(0, 8)), std::string::npos) << "the secret is in the message: " << mistyped;
  // Nor is anything the parser stopped at, nor a key name that may be a piece of the secret.
  write(dir.file("unquoted"), "public = \"" + keys.public_key + "\"\nsecret = " + keys.secret_key + "\n");
  std::filesystem::permissions(dir.file("unquoted"),
                               std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  auto unquoted = error_of([&] { modelcast::load_key_pair(dir.file("unquoted")); }, ErrorCode::kInvalidArgument);
  // A syntax error at a position, or (for the rare secret that reads as another TOML value) a
  // secret that is not a string: either way on line 2.
  EXPECT_NE(unquoted.find("line 2"), std::string::npos) << unquoted;
  for (std::size_t at = 0; at + 4 <= keys.secret_key.size(); ++at) {
    EXPECT_EQ(unquoted.find(keys.secret_key.substr(at, 4)), std::string::npos) << "the secret is in: " << unquoted;
  }
  const std::string pasted = "Ab3" + keys.secret_key.substr(0, 20);
  write(dir.file("pasted"), "public = \"" + keys.public_key + "\"\n\"" + pasted + "\" = 1\n");
  auto as_key = error_of([&] { modelcast::load_public_key(dir.file("pasted")); }, ErrorCode::kInvalidArgument);
  EXPECT_NE(as_key.find("unknown key of 23 characters"), std::string::npos) << as_key;
  EXPECT_EQ(as_key.find(pasted.substr(3, 8)), std::string::npos) << as_key;
  // A secret key given as a public one: most are no Ed25519 point, and the error never shows it.
  const auto secret_as_public = [&] {
    for (int tries = 0; tries < 200; ++tries) {
      auto pair = modelcast::generate_key_pair();
      try {
        modelcast::ProducerOptions options;
        options.control_endpoint = "tcp://127.0.0.1:0";
        options.allowed_consumer_keys = {modelcast::generate_key_pair().public_key, pair.secret_key};
        options.key = keys;
        modelcast::Producer producer(options);
      } catch (const modelcast::Error& e) {
        return std::pair{pair.secret_key, std::string(e.what())};
      }
    }
    return std::pair{std::string("?"), std::string("every secret key passed as a public one")};
  }();
  // Named by its place in the list: with dozens of keys the operator has to know which one.
  EXPECT_NE(secret_as_public.second.find("allowed_consumer_keys[1] (of 2) is not an Ed25519 public key"),
            std::string::npos)
      << secret_as_public.second;
  // A NUL inside a key ends the text the Z85 decoder reads: 35 characters and a NUL would decode
  // to another key (zeros at its end) that no comparison of the text sees.
  {
    modelcast::ProducerOptions options;
    options.control_endpoint = "tcp://127.0.0.1:0";
    options.key = keys;
    std::string with_nul = modelcast::generate_key_pair().public_key;
    with_nul[35] = '\0';
    options.allowed_consumer_keys = {modelcast::generate_key_pair().public_key, modelcast::generate_key_pair().public_key,
                                     with_nul};
    auto nul = error_of([&] { modelcast::Producer producer(options); }, ErrorCode::kInvalidArgument);
    EXPECT_NE(nul.find("allowed_consumer_keys[2] (of 3) is not a key: expected 40 Z85 characters, got 40 characters, "
                       "not all of them Z85"),
              std::string::npos)
        << nul;
  }
  EXPECT_EQ(secret_as_public.second.find(secret_as_public.first.substr(0, 8)), std::string::npos)
      << secret_as_public.second;
  write(dir.file("short"), "public = \"abc\"\n");
  EXPECT_NE(error_of([&] { modelcast::load_public_key(dir.file("short")); }, ErrorCode::kInvalidArgument).find("Z85"),
            std::string::npos);
  // Once "line 0: File could not be opened for reading".
  auto absent = error_of([&] { modelcast::load_public_key(dir.file("absent")); }, ErrorCode::kInvalidArgument);
  EXPECT_NE(absent.find("key file '" + dir.file("absent") + "': does not exist"), std::string::npos) << absent;
  auto absent_pair = error_of([&] { modelcast::load_key_pair(dir.file("absent")); }, ErrorCode::kInvalidArgument);
  EXPECT_NE(absent_pair.find("does not exist"), std::string::npos) << absent_pair;
  std::filesystem::create_directory(dir.file("adir"));
  auto directory = error_of([&] { modelcast::load_key_pair(dir.file("adir")); }, ErrorCode::kInvalidArgument);
  EXPECT_NE(directory.find("is a directory"), std::string::npos) << directory;
}

// A key written through a link planted at its path would land wherever the link points.
TEST(Keys, SavingOverALinkReplacesTheLinkAndLeavesItsTargetAlone) {
  TempDir dir;
  write(dir.file("elsewhere"), "untouched\n");
  ASSERT_EQ(symlink(dir.file("elsewhere").c_str(), dir.file("p.key").c_str()), 0);
  EXPECT_NE(error_of([&] { modelcast::save_key_pair(modelcast::generate_key_pair(), dir.file("p.key")); }, ErrorCode::kInvalidArgument)
                .find("exists already"),
            std::string::npos);
  modelcast::save_key_pair(modelcast::generate_key_pair(), dir.file("p.key"), /*overwrite=*/true);
  std::ifstream target(dir.file("elsewhere"));
  std::string line;
  std::getline(target, line);
  EXPECT_EQ(line, "untouched");
  struct stat info {};
  ASSERT_EQ(lstat(dir.file("p.key").c_str(), &info), 0);
  EXPECT_TRUE(S_ISREG(info.st_mode));
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  EXPECT_NO_THROW(modelcast::load_key_pair(dir.file("p.key")));
  // Nothing is left behind but the pair.
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(std::filesystem::path(dir.file("p.key")).parent_path())) ++files;
  EXPECT_EQ(files, 3u);
}

// Overwriting replaces regular files (and links) only: a FIFO or a device node at the path was
// renamed over with the key (as root, `modelcast-keygen --force /dev/null` replaced /dev/null).
TEST(Keys, SavingNeverReplacesAFifoOrADeviceNode) {
  TempDir dir;
  ASSERT_EQ(mkfifo(dir.file("fifo.key").c_str(), 0600), 0);
  const auto error = error_of([&] { modelcast::save_key_pair(modelcast::generate_key_pair(), dir.file("fifo.key"), true); },
                              ErrorCode::kInvalidArgument);
  EXPECT_NE(error.find("fifo.key': is not a regular file"), std::string::npos) << error;
  struct stat info {};
  ASSERT_EQ(lstat(dir.file("fifo.key").c_str(), &info), 0);
  EXPECT_TRUE(S_ISFIFO(info.st_mode)) << "the FIFO was replaced";
  std::size_t files = 0;  // nor a public file or a temporary one left
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(std::filesystem::path(dir.file("fifo.key")).parent_path())) ++files;
  EXPECT_EQ(files, 1u);
}

// A pair is replaced whole or not at all: a public file that cannot be replaced (here a
// directory at its path) must not cost the secret it belongs to.
TEST(Keys, APairThatCannotBeWrittenWholeLeavesTheOldPairAsItWas) {
  TempDir dir;
  const auto old_keys = modelcast::generate_key_pair();
  modelcast::save_key_pair(old_keys, dir.file("p.key"));
  ASSERT_EQ(unlink(dir.file("p.key.pub").c_str()), 0);
  ASSERT_EQ(mkdir(dir.file("p.key.pub").c_str(), 0700), 0);
  const auto error = error_of([&] { modelcast::save_key_pair(modelcast::generate_key_pair(), dir.file("p.key"), true); },
                              ErrorCode::kInvalidArgument);
  EXPECT_NE(error.find("p.key.pub"), std::string::npos) << error;
  EXPECT_NE(error.find("is a directory"), std::string::npos) << error;
  EXPECT_EQ(modelcast::load_key_pair(dir.file("p.key")).secret_key, old_keys.secret_key);
  std::size_t files = 0;  // no temporary file left behind
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(std::filesystem::path(dir.file("p.key")).parent_path())) ++files;
  EXPECT_EQ(files, 2u);
}

// An empty path wrote ".pub" into the working directory and then failed on the secret, leaving
// a public key without its secret (and the next save refused: ".pub" exists already).
TEST(Keys, AnEmptyPathIsRefusedAndLeavesNoFileBehind) {
  TempDir dir;
  const auto here = std::filesystem::current_path();
  std::filesystem::current_path(std::filesystem::path(dir.file("x")).parent_path());
  const auto error = error_of([&] { modelcast::save_key_pair(modelcast::generate_key_pair(), ""); }, ErrorCode::kInvalidArgument);
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(".")) ++files;
  std::filesystem::current_path(here);
  EXPECT_NE(error.find("key file path is empty"), std::string::npos) << error;
  EXPECT_EQ(files, 0u) << "a failed save left a file behind";
}

// toml++ waits for ever on a FIFO that nobody writes.
// A public key file others may write would let them put their own key in place of the one
// trusted (the pinned producer, an admitted consumer).
TEST(Keys, APublicKeyFileOthersCanWriteIsRefused) {
  TempDir dir;
  modelcast::save_key_pair(modelcast::generate_key_pair(), dir.file("trainer.key"));
  const std::string pub = dir.file("trainer.key.pub");
  EXPECT_NO_THROW(modelcast::load_public_key(pub)) << "mode 0644, as saved";
  for (auto [mode, who] : {std::pair{0666, "every user"}, std::pair{0664, "its group"}}) {
    ASSERT_EQ(chmod(pub.c_str(), mode), 0);
    auto refused = error_of([&] { modelcast::load_public_key(pub); }, ErrorCode::kInvalidArgument);
    EXPECT_NE(refused.find(pub), std::string::npos) << refused;
    EXPECT_NE(refused.find(std::string(who) + " may write it"), std::string::npos) << refused;
  }
  ASSERT_EQ(chmod(pub.c_str(), 0644), 0);
  if (!testing_support::grant_write_by_acl(pub, 65534)) {
    GTEST_SKIP() << "this file system keeps no ACLs (" << std::strerror(errno) << ")";
  }
  auto refused = error_of([&] { modelcast::load_public_key(pub); }, ErrorCode::kInvalidArgument);
  EXPECT_NE(refused.find("the users and groups its access ACL names (getfacl lists them) may write it"),
            std::string::npos) << refused;
}

// A key pair file read for its public key holds the secret all the same: readable by others it
// was accepted here while load_key_pair refused it.
TEST(Keys, AKeyPairFileOthersCanReadIsRefusedForItsPublicKeyToo) {
  TempDir dir;
  const auto keys = modelcast::generate_key_pair();
  modelcast::save_key_pair(keys, dir.file("trainer.key"));
  const std::string pair = dir.file("trainer.key");
  EXPECT_EQ(modelcast::load_public_key(pair), keys.public_key) << "mode 0600, as saved";
  ASSERT_EQ(chmod(pair.c_str(), 0644), 0);
  auto refused = error_of([&] { modelcast::load_public_key(pair); }, ErrorCode::kInvalidArgument);
  EXPECT_NE(refused.find(pair), std::string::npos) << refused;
  EXPECT_NE(refused.find("holds a secret key but other users may read or write it (mode 0644)"), std::string::npos)
      << refused;
  EXPECT_EQ(refused.find(keys.secret_key), std::string::npos);
  EXPECT_EQ(modelcast::load_public_key(pair + ".pub"), keys.public_key);  // its .pub, 0644, is what to share
}

TEST(Keys, AKeyPathThatIsNotARegularFileIsRefused) {
  TempDir dir;
  ASSERT_EQ(mkfifo(dir.file("fifo").c_str(), 0600), 0);
  auto fifo = error_of([&] { modelcast::load_public_key(dir.file("fifo")); }, ErrorCode::kInvalidArgument);
  EXPECT_NE(fifo.find("'" + dir.file("fifo") + "': is not a regular file"), std::string::npos) << fifo;
}

// As ssh's StrictModes: a key file that another user owns or could replace is refused. In a
// shared directory such as /tmp another user could make the file first with their own key in it:
// a consumer pinned that key and installed the other user's signed model.
TEST(Keys, AKeyFileAnotherUserOwnsOrCouldReplaceIsRefused) {
  TempDir dir;
  const fs::path open = dir.file("open");
  fs::create_directory(open);
  ASSERT_EQ(chmod(open.c_str(), 0777), 0);  // every user may write it, no sticky bit
  const std::string pair = (open / "k").string(), pub = pair + ".pub";
  modelcast::save_key_pair(modelcast::generate_key_pair(), pair);
  for (const auto& refused : {error_of([&] { modelcast::load_public_key(pub); }, ErrorCode::kInvalidArgument),
                              error_of([&] { modelcast::load_key_pair(pair); }, ErrorCode::kInvalidArgument)}) {
    EXPECT_NE(refused.find("its directory '" + open.string() + "' is writable by every user without the sticky bit"),
              std::string::npos)
        << refused;
  }
  // With the sticky bit (as /tmp), only a name's owner replaces it: this user's files pass.
  ASSERT_EQ(chmod(open.c_str(), 01777), 0);
  EXPECT_NO_THROW(modelcast::load_public_key(pub));
  EXPECT_NO_THROW(modelcast::load_key_pair(pair));
  const std::string ours = (open / "ours.pub").string(), theirs = (open / "theirs.pub").string();
  ASSERT_EQ(symlink(pub.c_str(), ours.c_str()), 0);
  EXPECT_NO_THROW(modelcast::load_public_key(ours)) << "this user's link to this user's file";
  if (geteuid() != 0) GTEST_SKIP() << "giving a file to another user needs root";
  ASSERT_EQ(symlink(pub.c_str(), theirs.c_str()), 0);
  ASSERT_EQ(lchown(theirs.c_str(), 65534, 65534), 0);
  auto link = error_of([&] { modelcast::load_public_key(theirs); }, ErrorCode::kInvalidArgument);
  EXPECT_NE(link.find("the symbolic link '" + theirs + "' belongs to user 65534"), std::string::npos) << link;
  ASSERT_EQ(chown(pub.c_str(), 65534, 65534), 0);
  for (const auto& path : {pub, ours}) {
    auto owned = error_of([&] { modelcast::load_public_key(path); }, ErrorCode::kInvalidArgument);
    EXPECT_NE(owned.find("'" + pub + "' belongs to user 65534, not to this process's user or root"), std::string::npos)
        << owned;
  }
}

// A path is shown escaped wherever an error names it: a directory named with a newline and a
// made-up log line must not put that line in the log of whoever logs the error (the key file's
// own name was escaped, and the same message then repeated its directory raw).
TEST(Keys, APathInAnErrorCannotForgeALogLine) {
  TempDir dir;
  const fs::path open = dir.file("evil\n[modelcast.producer] [info] all good");
  fs::create_directory(open);
  ASSERT_EQ(chmod(open.c_str(), 0777), 0);  // every user may write it, no sticky bit
  const std::string pair = (open / "k").string();
  modelcast::save_key_pair(modelcast::generate_key_pair(), pair);
  modelcast::ProducerOptions options;
  options.control_endpoint = "ipc://" + (open / "s.sock").string();
  for (const auto& refused : {error_of([&] { modelcast::load_key_pair(pair); }, ErrorCode::kInvalidArgument),
                              error_of([&] { modelcast::Producer producer(options); }, ErrorCode::kInvalidArgument)}) {
    EXPECT_NE(refused.find("is writable by every user"), std::string::npos) << refused;
    EXPECT_NE(refused.find("evil\\x0a[modelcast.producer]"), std::string::npos) << refused;
    EXPECT_EQ(refused.find('\n'), std::string::npos) << refused;
  }
}

// Options that would quietly weaken what keys promise are refused: an allow-list beside
// allow_any_consumer (the list was ignored), a consumer's key with no producer key pinned (it ran
// plaintext and unsigned). And a secret key pasted as a public one with a character more or less
// (a newline) is never quoted: only one of exactly 40 characters was kept out of messages.
TEST(Keys, OptionsThatWouldQuietlyWeakenKeysAreRefusedAndNoKeyIsQuoted) {
  const auto producer_keys = modelcast::generate_key_pair(), consumer_keys = modelcast::generate_key_pair();
  modelcast::ProducerOptions both;
  both.control_endpoint = "tcp://127.0.0.1:0";
  both.key = producer_keys;
  both.allowed_consumer_keys = {consumer_keys.public_key};
  both.allow_any_consumer = true;
  auto refused = error_of([&] { modelcast::Producer p(both); }, ErrorCode::kInvalidArgument);
  EXPECT_NE(refused.find("allowed_consumer_keys lists 1 keys and allow_any_consumer admits any"), std::string::npos)
      << refused;
  modelcast::ConsumerOptions unpinned;
  unpinned.producer_endpoint = "tcp://127.0.0.1:1";
  unpinned.key = consumer_keys;
  refused = error_of([&] { modelcast::Consumer c(unpinned); }, ErrorCode::kInvalidArgument);
  EXPECT_NE(refused.find("key is given but producer_public_key is not"), std::string::npos) << refused;
  modelcast::ProducerOptions own;
  own.control_endpoint = "tcp://127.0.0.1:0";
  own.key = producer_keys;
  own.allowed_consumer_keys = {producer_keys.public_key};
  refused = error_of([&] { modelcast::Producer p(own); }, ErrorCode::kInvalidArgument);
  EXPECT_NE(refused.find("allowed_consumer_keys lists the producer's own public key"), std::string::npos) << refused;
  for (const std::string& pasted : {consumer_keys.secret_key + "\n", " " + consumer_keys.secret_key,
                                    consumer_keys.secret_key.substr(1)}) {
    modelcast::ProducerOptions o;
    o.control_endpoint = "tcp://127.0.0.1:0";
    o.key = producer_keys;
    o.allowed_consumer_keys = {pasted};
    auto message = error_of([&] { modelcast::Producer p(o); }, ErrorCode::kInvalidArgument);
    EXPECT_NE(message.find("not shown"), std::string::npos) << message;
    EXPECT_EQ(message.find(consumer_keys.secret_key.substr(4, 8)), std::string::npos) << "the secret is in: " << message;
  }
}

// As ssh does: a secret key others can read is refused, naming the mode and the fix.
TEST(Keys, ASecretKeyOthersCanReadIsRefused) {
  TempDir dir;
  modelcast::save_key_pair(modelcast::generate_key_pair(), dir.file("p.key"));
  ASSERT_NO_THROW(modelcast::load_key_pair(dir.file("p.key")));
  ASSERT_EQ(chmod(dir.file("p.key").c_str(), 0644), 0);
  auto readable = error_of([&] { modelcast::load_key_pair(dir.file("p.key")); }, ErrorCode::kInvalidArgument);
  EXPECT_NE(readable.find("mode 0644"), std::string::npos) << readable;
  EXPECT_NE(readable.find("chmod 600"), std::string::npos) << readable;
  EXPECT_NO_THROW(modelcast::load_public_key(dir.file("p.key.pub"))) << "a public key is for everyone";
}

// A consumer's errors, for tests that wait for one.
struct ErrorLog {
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<modelcast::Error> errors;
  std::function<void(const modelcast::Error&)> callback() {
    return [this](const modelcast::Error& e) {
      std::lock_guard lock(mutex);
      errors.push_back(e);
      cv.notify_all();
    };
  }
  // The first error of `code`, waiting up to 30 s for it.
  std::optional<std::string> wait_for(ErrorCode code) {
    std::unique_lock lock(mutex);
    std::optional<std::string> found;
    cv.wait_for(lock, 30s, [&] {
      for (const auto& e : errors) {
        if (e.code() == code) found = e.what();
      }
      return found.has_value();
    });
    return found;
  }
};

class Secured : public ::testing::Test {
 protected:
  void SetUp() override { setenv("UCX_NET_DEVICES", "lo", 1); }
  modelcast::KeyPair producer_keys_ = modelcast::generate_key_pair();
  modelcast::KeyPair consumer_keys_ = modelcast::generate_key_pair();

  modelcast::ProducerOptions producer_options() {
    modelcast::ProducerOptions options;
    options.key = producer_keys_;
    options.allowed_consumer_keys = {consumer_keys_.public_key};
    return options;
  }
  modelcast::ConsumerOptions consumer_options(const std::string& endpoint, ErrorLog* log = nullptr) {
    modelcast::ConsumerOptions options;
    options.producer_endpoint = endpoint;
    options.model_name = "test";
    options.producer_public_key = producer_keys_.public_key;
    options.key = consumer_keys_;
    if (log) options.on_error = log->callback();
    return options;
  }
};

TEST_F(Secured, AnAdmittedConsumerGetsSignedVersionsBitExact) {
  TestProducer p(512, producer_options());
  modelcast::Consumer consumer(consumer_options(p.producer->control_endpoint()));
  ASSERT_TRUE(p.producer->wait_for_consumers(1, 30s));
  for (std::uint64_t v = 1; v <= 3; ++v) {
    p.publish(v);
    auto view = consumer.wait_for_version(v, 30s);
    ASSERT_TRUE(view) << consumer.stats().last_error;
    EXPECT_EQ(testmodel::check(view, 1), "");
  }
  EXPECT_EQ(consumer.stats().versions_rejected, 0u);
}

TEST_F(Secured, AConsumerPinningAnotherKeyOrNotAdmittedGetsNothingAndIsToldWhy) {
  TestProducer p(256, producer_options());
  // Pins a key that is not this producer's: an impostor, as far as the consumer can tell.
  ErrorLog wrong_pin;
  auto options = consumer_options(p.producer->control_endpoint(), &wrong_pin);
  options.producer_public_key = modelcast::generate_key_pair().public_key;
  modelcast::Consumer misled(options);
  // Has a key the producer does not list.
  ErrorLog stranger_log;
  options = consumer_options(p.producer->control_endpoint(), &stranger_log);
  options.key = modelcast::generate_key_pair();
  modelcast::Consumer stranger(options);
  // And one that is admitted, as the witness that versions were there to take.
  modelcast::Consumer admitted(consumer_options(p.producer->control_endpoint()));

  auto misled_error = wrong_pin.wait_for(ErrorCode::kAuthentication);
  ASSERT_TRUE(misled_error);
  EXPECT_NE(misled_error->find("handshake"), std::string::npos) << *misled_error;
  auto stranger_error = stranger_log.wait_for(ErrorCode::kAuthentication);
  ASSERT_TRUE(stranger_error);
  EXPECT_NE(stranger_error->find("did not admit"), std::string::npos) << *stranger_error;
  EXPECT_GE(p.producer->stats().refused_peers, 1u);

  p.publish(1);
  ASSERT_TRUE(admitted.wait_for_version(1, 30s));
  p.publish(2);
  ASSERT_TRUE(admitted.wait_for_version(2, 30s));
  EXPECT_FALSE(misled.acquire());
  EXPECT_FALSE(stranger.acquire());
  EXPECT_EQ(p.producer->stats().consumers, 1u);
}

// A consumer given no keys, pointed at a producer that has them, once waited for ever and said
// nothing: the handshake fails inside ZeroMQ, which only retries. It now says why.
// A consumer given the producer's own key pair holds the secret that signs versions: even a
// producer admitting any key refuses it, while a consumer with a pair of its own joins.
TEST_F(Secured, AConsumerHoldingTheProducersOwnKeyIsRefusedEvenWhenAnyKeyIsAdmitted) {
  auto options = producer_options();
  options.allowed_consumer_keys.clear();
  options.allow_any_consumer = true;
  TestProducer p(256, options);
  ErrorLog log;
  auto holder = consumer_options(p.producer->control_endpoint(), &log);
  holder.key = producer_keys_;
  modelcast::Consumer refused(holder);
  auto error = log.wait_for(ErrorCode::kAuthentication);
  ASSERT_TRUE(error);
  modelcast::Consumer admitted(consumer_options(p.producer->control_endpoint()));
  ASSERT_TRUE(p.producer->wait_for_consumers(1, 30s));
  p.publish(1);
  ASSERT_TRUE(admitted.wait_for_version(1, 30s)) << admitted.stats().last_error;
  EXPECT_FALSE(refused.acquire());
  EXPECT_EQ(p.producer->stats().consumers, 1u);
}

// A consumer that joined a plaintext producer, whose handshake then fails at the same endpoint
// (here a producer restarted there with keys; a producer SIGKILLed mid-handshake breaks off the
// same way): it was told "most likely the producer there uses keys", which after a kill sent
// operators looking for keys nobody had set. It now says what it knew: the producer there
// answered without keys, so a stop or restart is the likelier, and keys the other cause.
TEST_F(Secured, AHandshakeThatFailsWhereAPlaintextProducerAnsweredSaysItMayHaveStopped) {
  auto plain = std::make_unique<TestProducer>(256);
  const std::string endpoint = plain->producer->control_endpoint();
  ErrorLog log;
  modelcast::ConsumerOptions options;
  options.producer_endpoint = endpoint;
  options.model_name = "test";
  options.on_error = log.callback();
  options.producer_timeout = 200ms;
  modelcast::Consumer consumer(options);
  ASSERT_TRUE(plain->producer->wait_for_consumers(1, 30s));
  plain.reset();
  auto keyed_options = producer_options();
  keyed_options.control_endpoint = endpoint;
  TestProducer keyed(256, keyed_options);
  auto error = log.wait_for(ErrorCode::kAuthentication);
  ASSERT_TRUE(error);
  EXPECT_NE(error->find("answered without keys before, so most likely it stopped or restarted mid-handshake"),
            std::string::npos) << *error;
  EXPECT_NE(error->find("if it now uses keys (CurveZMQ), set producer_public_key"), std::string::npos) << *error;
}

TEST_F(Secured, AKeylessConsumerOfAKeyedProducerIsToldItNeedsKeys) {
  TestProducer p(256, producer_options());
  ErrorLog log;
  modelcast::ConsumerOptions options;
  options.producer_endpoint = p.producer->control_endpoint();
  options.model_name = "test";
  options.on_error = log.callback();
  options.producer_timeout = 50ms;
  modelcast::Consumer keyless(options);
  auto error = log.wait_for(ErrorCode::kAuthentication);
  ASSERT_TRUE(error);
  // last_error keeps the reason: five producer timeouts later it said "no answer from a producer
  // ... none runs there yet", which is false. Watched for twenty timeouts.
  const auto until = std::chrono::steady_clock::now() + 20 * options.producer_timeout;
  while (std::chrono::steady_clock::now() < until) {
    const auto said = keyless.stats().last_error;
    ASSERT_NE(said.find("uses keys"), std::string::npos) << said;
    std::this_thread::sleep_for(10ms);  // polling a state that must not change, not waiting for one
  }
  EXPECT_NE(error->find("uses keys"), std::string::npos) << *error;
  EXPECT_NE(error->find("producer_public_key"), std::string::npos) << *error;
  // ZeroMQ reports this as it reports a server that is no producer at all: the other cause named.
  EXPECT_NE(error->find("check the endpoint"), std::string::npos) << *error;
  EXPECT_GE(keyless.stats().failed_handshakes, 1u);
  EXPECT_EQ(p.producer->stats().consumers, 0u);
}

TEST_F(Secured, APlaintextImpostorOnTheEndpointIsNotTrusted) {
  TestProducer impostor(256);  // no key: plaintext, unsigned
  ErrorLog log;
  modelcast::Consumer consumer(consumer_options(impostor.producer->control_endpoint(), &log));
  auto error = log.wait_for(ErrorCode::kAuthentication);
  ASSERT_TRUE(error);
  EXPECT_NE(error->find("handshake"), std::string::npos) << *error;
  EXPECT_EQ(impostor.producer->stats().consumers, 0u);
  EXPECT_FALSE(consumer.acquire());
}

TEST_F(Secured, PlaintextIsRefusedOffLoopbackAndIpcPathsAreNotTakenOver) {
  modelcast::ProducerOptions open;
  open.control_endpoint = "tcp://0.0.0.0:0";
  EXPECT_NE(error_of([&] { modelcast::Producer p(open); }, ErrorCode::kInvalidArgument).find("modelcast-keygen"),
            std::string::npos);
  open.allow_plaintext_remote = true;
  EXPECT_NO_THROW(modelcast::Producer p(open));
  modelcast::ConsumerOptions consumer;
  consumer.producer_endpoint = "tcp://10.1.2.3:7000";
  EXPECT_NE(error_of([&] { modelcast::Consumer c(consumer); }, ErrorCode::kInvalidArgument).find("producer_public_key"),
            std::string::npos);
  auto keyed = producer_options();
  keyed.allowed_consumer_keys.clear();
  EXPECT_NE(error_of([&] { modelcast::Producer p(keyed); }, ErrorCode::kInvalidArgument).find("allow_any_consumer"),
            std::string::npos);

  TempDir dir;
  modelcast::ProducerOptions ipc;
  ipc.control_endpoint = "ipc://" + dir.file("model.sock");
  modelcast::Producer first(ipc);
  EXPECT_NE(error_of([&] { modelcast::Producer second(ipc); }, ErrorCode::kTransport).find("in use"),
            std::string::npos);
}

// Without keys, the socket file is all that tells a consumer who serves it: a stranger who
// could write its directory deleted the producer's socket files and bound their own, and
// captured every consumer that joined or reconnected (seven rogue versions installed). A
// plaintext ipc:// endpoint must now lie in a directory no other user can write: the producer
// will not bind one elsewhere, and the consumer will not connect to one elsewhere, so that a
// consumer never reaches a socket a stranger could have put there. Each refusal names the
// endpoint, the directory and what is wrong with it. Keys lift the rule (the handshake proves
// who serves), and a private directory works; one under a directory others can write does not.
TEST_F(Secured, PlaintextIpcIsRefusedInADirectoryOthersCanWriteSoItCannotBeTakenOver) {
  testing_support::PrivateDirectory root;
  const std::string shared = root.file("shared"), group = root.file("group");
  ASSERT_EQ(mkdir(shared.c_str(), 0700), 0);
  ASSERT_EQ(chmod(shared.c_str(), 01777), 0);  // as /tmp: world-writable, sticky
  ASSERT_EQ(mkdir(group.c_str(), 0700), 0);
  ASSERT_EQ(chmod(group.c_str(), 0770), 0);

  // The stranger's socket, already bound where the producer would be (the end state of a
  // takeover): a consumer told to use it refuses to connect, before any byte goes out.
  const std::string taken = "ipc://" + shared + "/model.sock";
  zmq::context_t context;
  zmq::socket_t rogue(context, zmq::socket_type::router);
  rogue.set(zmq::sockopt::linger, 0);
  rogue.bind(taken);
  modelcast::ConsumerOptions consumer;
  consumer.producer_endpoint = taken;
  consumer.model_name = "test";
  auto refused = error_of([&] { modelcast::Consumer c(consumer); }, ErrorCode::kInvalidArgument);
  EXPECT_NE(refused.find("'" + taken + "'"), std::string::npos) << refused;
  EXPECT_NE(refused.find("'" + shared + "' is writable by every user (mode 1777)"), std::string::npos) << refused;
  EXPECT_NE(refused.find("mkdir -m 700"), std::string::npos) << refused;
  rogue.close();

  // The producer does not bind there either, nor in a group-writable directory, nor on an
  // abstract socket name (which any local process can take first and reach).
  modelcast::ProducerOptions plaintext;
  plaintext.control_endpoint = taken;
  auto not_bound = error_of([&] { TestProducer p(64, plaintext); }, ErrorCode::kInvalidArgument);
  EXPECT_NE(not_bound.find("plaintext producer endpoint '" + taken + "'"), std::string::npos) << not_bound;
  EXPECT_NE(not_bound.find("writable by every user"), std::string::npos) << not_bound;
  plaintext.control_endpoint = "ipc://" + group + "/model.sock";
  auto group_writable = error_of([&] { TestProducer p(64, plaintext); }, ErrorCode::kInvalidArgument);
  EXPECT_NE(group_writable.find("'" + group + "' is writable by its group (mode 0770)"), std::string::npos)
      << group_writable;
  // Nor in a private directory under one that others can write without the sticky bit: they
  // could move the private one away and put theirs in its place.
  const std::string open_parent = root.file("open"), inner = open_parent + "/inner";
  ASSERT_EQ(mkdir(open_parent.c_str(), 0700), 0);
  ASSERT_EQ(chmod(open_parent.c_str(), 0777), 0);
  ASSERT_EQ(mkdir(inner.c_str(), 0700), 0);
  plaintext.control_endpoint = "ipc://" + inner + "/model.sock";
  auto under_open = error_of([&] { TestProducer p(64, plaintext); }, ErrorCode::kInvalidArgument);
  EXPECT_NE(under_open.find("'" + open_parent + "' above it is writable by every user without the sticky bit"),
            std::string::npos)
      << under_open;
  plaintext.control_endpoint = "ipc://@modelcast-abstract-" + std::to_string(getpid());
  EXPECT_NE(error_of([&] { TestProducer p(64, plaintext); }, ErrorCode::kInvalidArgument).find("abstract"),
            std::string::npos);

  // With keys the shared directory is fine: a stranger's socket there fails the handshake.
  auto keyed = producer_options();
  keyed.control_endpoint = "ipc://" + shared + "/keyed.sock";
  TestProducer signing(64, keyed);
  modelcast::Consumer pinned(consumer_options(signing.producer->control_endpoint()));
  signing.publish(1);
  EXPECT_TRUE(pinned.wait_for_version(1, 30s)) << pinned.stats().last_error;

  // A private directory (mkdtemp: 0700) works in plaintext.
  plaintext.control_endpoint = root.ipc_endpoint("plain.sock");
  TestProducer open(64, plaintext);
  consumer.producer_endpoint = open.producer->control_endpoint();
  modelcast::Consumer local(consumer);
  open.publish(1);
  auto view = local.wait_for_version(1, 30s);
  ASSERT_TRUE(view) << local.stats().last_error;
  EXPECT_EQ(testmodel::check(view, 1), "");
}

// Everything a relay could change after the producer signed: each is rejected with
// kAuthentication and the last good version stays.
TEST_F(Secured, TamperedManifestsAndBytesAreRejectedAndTheLastGoodVersionStays) {
  modelcast::security::ManifestSigner signer(producer_keys_);
  testing_support::ScriptedProducer producer(&signer);
  ErrorLog log;
  auto options = consumer_options(producer.endpoint(), &log);
  options.producer_timeout = 60s;
  modelcast::Consumer consumer(options);
  producer.accept_join();
  auto ack = producer.serve(1, false);
  ASSERT_TRUE(ack.ok) << ack.error;
  ack = producer.serve(2, false, /*digests_later=*/true);
  ASSERT_TRUE(ack.ok) << ack.error;

  using Tamper = std::function<void(modelcast::Manifest&, std::byte*)>;
  std::vector<std::pair<std::string, Tamper>> tampering = {
      {"metadata", [](modelcast::Manifest& m, std::byte*) { m.metadata["lr"] = "10"; }},
      {"step", [](modelcast::Manifest& m, std::byte*) { m.step += 1000; }},
      {"integrity off", [](modelcast::Manifest& m, std::byte*) { m.integrity = false; }},
      {"bytes and their digest", [](modelcast::Manifest& m, std::byte* slot) {
         const auto at = m.tensors[3].offset;
         slot[at] ^= std::byte{1};
         const auto block = at / m.block_bytes;
         const auto begin = block * m.block_bytes;
         m.block_digests[block] = modelcast::digest_bytes(slot + begin, std::min(m.block_bytes, m.total_bytes - begin));
       }},
      {"dtype of a same-size tensor", [](modelcast::Manifest& m, std::byte*) {
         m.tensors[1].spec.dtype = modelcast::DType::kF16;  // t1 is bf16: same size, other meaning
       }},
  };
  std::uint64_t version = 3;
  for (const auto& [what, tamper] : tampering) {
    for (bool later : {false, true}) {
      ack = producer.serve(version, false, later, nullptr, tamper);
      EXPECT_FALSE(ack.ok) << what << (later ? " (digests later)" : "");
      EXPECT_EQ(consumer.acquire().version(), 2u) << what;
      version++;
    }
  }
  EXPECT_EQ(consumer.stats().versions_rejected, tampering.size() * 2);
  EXPECT_TRUE(log.wait_for(ErrorCode::kAuthentication));
  EXPECT_EQ(testmodel::check(consumer.acquire(), 1), "");

  // Signed by someone else: rejected too. Then the real producer's next version goes in.
  modelcast::security::ManifestSigner other(modelcast::generate_key_pair());
  producer.sign_with(&other);
  ack = producer.serve(version++, false);
  EXPECT_FALSE(ack.ok);
  EXPECT_NE(ack.error.find("signature"), std::string::npos) << ack.error;
  producer.sign_with(&signer);
  ack = producer.serve(version++, false);
  EXPECT_TRUE(ack.ok) << ack.error;
  EXPECT_EQ(consumer.acquire().version(), version - 1);
  EXPECT_EQ(testmodel::check(consumer.acquire(), 1), "");
}

}  // namespace
}  // namespace exchange_test
