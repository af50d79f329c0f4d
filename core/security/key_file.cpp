// Key files: TOML (toml++), two string keys. A parser library rather than a hand-written
// reader so that line numbers in errors, quoting and comments behave as users expect.
#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>

#include <toml++/toml.h>

#include "common/file_writers.h"
#include "common/shown_text.h"
#include "core/security/key_codec.h"
#include "core/wire/socket_directory.h"
#include "modelcast/error.h"
#include "modelcast/keys.h"

namespace modelcast {
namespace {

// How a key file is named in messages: escaped, so that a path cannot forge a log line.
std::string named(const std::string& path) { return "key file " + shown_text(path, 200); }

[[noreturn]] void bad_file(const std::string& path, const std::string& what) {
  throw Error(ErrorCode::kInvalidArgument, named(path) + ": " + what);
}

// A NUL ends a path for the system: "keys/a\0b" would open keys/a, another file than named.
// An empty path names no file: a pair saved there wrote its ".pub" into the working directory
// and then failed, leaving that public key without its secret.
void check_path(const std::string& path) {
  if (path.empty()) throw Error(ErrorCode::kInvalidArgument, "key file path is empty: name a file");
  if (path.find('\0') != std::string::npos) {
    throw Error(ErrorCode::kInvalidArgument,
                "key file " + shown_text(path, 200) + ": has a NUL byte, which no file name holds");
  }
}

toml::table parse(const std::string& path) {
  check_path(path);
  // toml++ reports an unreadable file as a parse error at "line 0"; say what is wrong instead.
  if (::access(path.c_str(), R_OK) != 0) {
    bad_file(path, errno == ENOENT ? "does not exist" : std::string("cannot be read: ") + std::strerror(errno));
  }
  // toml++ reads a directory as an empty table, which would be reported as a missing key, and
  // waits for ever on a FIFO nobody writes.
  if (struct stat st {}; ::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    bad_file(path, S_ISDIR(st.st_mode) ? "is a directory" : "is not a regular file");
  try {
    return toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    // toml++'s words quote the text where it stopped, which may be part of a secret key.
    bad_file(path, "line " + std::to_string(e.source().begin.line) + ", column " +
                       std::to_string(e.source().begin.column) +
                       ": not valid TOML (the parser's words are not shown: they may quote a key)");
  }
}

std::string string_at(const toml::table& table, const std::string& path, const char* key, bool required) {
  auto node = table[key];
  if (!node) {
    if (required) bad_file(path, std::string("no '") + key + "' key");
    return {};
  }
  auto value = node.value<std::string>();
  if (!value) {
    bad_file(path, "line " + std::to_string(node.node()->source().begin.line) + ": '" + key + "' is not a string");
  }
  return *value;
}

void check_keys(const toml::table& table, const std::string& path) {
  for (const auto& [key, node] : table) {
    if (key.str() != "public" && key.str() != "secret") {
      // A misspelt name is shown; anything else may be a piece of a key pasted in the wrong place.
      const std::string_view name = key.str();
      const bool word = name.size() <= 16 && name.find_first_not_of("abcdefghijklmnopqrstuvwxyz_") == std::string::npos;
      bad_file(path, "line " + std::to_string(node.source().begin.line) + ": unknown key " +
                         (word ? "'" + std::string(name) + "'"
                               : "of " + std::to_string(name.size()) + " characters (not shown: it may be part of a key)") +
                         " (expected 'public' and, in a key pair file, 'secret')");
    }
  }
}

}  // namespace

KeyPair generate_key_pair() {
  security::ensure_sodium();
  security::PublicKey public_key{};
  security::SecretKey secret{};
  crypto_sign_keypair(public_key.data(), secret.data());
  security::PublicKey seed{};
  crypto_sign_ed25519_sk_to_seed(seed.data(), secret.data());
  KeyPair keys{security::encode_key(public_key), security::encode_key(seed)};
  sodium_memzero(secret.data(), secret.size());
  sodium_memzero(seed.data(), seed.size());
  return keys;
}

namespace {

// Each file is written in full to a new file of the same directory, made by mkstemp (mode 0600,
// O_EXCL), and then linked or renamed into place. Opening the final path instead left the secret
// readable by others between the file's creation (under the umask) and a chmod, to anyone who
// opened it in that window; followed a link planted at the path; and kept the owner of a file it
// overwrote. Writing (prepare_key_file) and putting in place (commit_key_file) are apart so that
// a pair is put in place only once both its files are written: a failure leaves the old pair whole.
struct PreparedKeyFile {
  std::string file, temp;
};

void discard(const PreparedKeyFile& prepared) { ::unlink(prepared.temp.c_str()); }

PreparedKeyFile prepare_key_file(const std::string& file, const std::string& text, mode_t mode, bool overwrite) {
  if (struct stat existing {}; ::lstat(file.c_str(), &existing) == 0) {
    if (!overwrite) bad_file(file, "exists already");
    // rename() would fail on a directory only after the other file of the pair was replaced;
    // and it would replace a FIFO or a device node (as root, /dev/null) with the key.
    if (S_ISDIR(existing.st_mode)) bad_file(file, "is a directory");
    if (!S_ISREG(existing.st_mode) && !S_ISLNK(existing.st_mode)) {
      bad_file(file, "is not a regular file (a device, FIFO or socket is not replaced)");
    }
  }
  PreparedKeyFile prepared{file, file + ".XXXXXX"};
  const int fd = ::mkstemp(prepared.temp.data());
  if (fd < 0) bad_file(file, std::string("cannot be written: ") + std::strerror(errno));
  bool written = ::fchmod(fd, mode) == 0;
  for (std::size_t at = 0; written && at < text.size();) {
    const auto n = ::write(fd, text.data() + at, text.size() - at);
    if (n < 0 && errno == EINTR) continue;
    written = n > 0;
    if (written) at += static_cast<std::size_t>(n);
  }
  // On disk before it replaces the old file: after a crash a file system may keep the rename and
  // not the data, an empty key in place of the old one (a secret lost).
  written = written && ::fsync(fd) == 0;
  const int write_errno = errno;
  if (::close(fd) != 0 || !written) {
    const int e = written ? errno : write_errno;
    discard(prepared);
    bad_file(file, std::string("write failed: ") + std::strerror(e));
  }
  return prepared;
}

// Makes the new name of `file` durable (its directory's entry). Best effort: the file is in place
// and whole, and a file system that cannot sync a directory (some network ones) is no failure.
void sync_directory_of(const std::string& file) {
  const auto slash = file.find_last_of('/');
  const std::string directory = slash == std::string::npos ? "." : slash == 0 ? "/" : file.substr(0, slash);
  const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

void commit_key_file(const PreparedKeyFile& prepared, bool overwrite) {
  const auto fail = [&](const std::string& what) {
    discard(prepared);
    bad_file(prepared.file, what);
  };
  if (overwrite) {
    if (::rename(prepared.temp.c_str(), prepared.file.c_str()) != 0) fail(std::string("cannot be written: ") + std::strerror(errno));
    sync_directory_of(prepared.file);
    return;
  }
  // link, unlike rename, fails when the path exists: no check-then-replace race.
  if (::link(prepared.temp.c_str(), prepared.file.c_str()) != 0) {
    const int e = errno;
    fail(e == EEXIST ? std::string("exists already") : std::string("cannot be written: ") + std::strerror(e));
  }
  discard(prepared);
  sync_directory_of(prepared.file);
}

}  // namespace

void save_key_pair(const KeyPair& keys, const std::string& path, bool overwrite) {
  check_path(path);
  security::decode_secret_key(keys, "key pair");  // refuse to write a pair that does not match
  const auto pair = prepare_key_file(
      path,
      "# modelcast key pair (Ed25519, Z85). Keep this file secret: it proves its holder's identity.\n"
      "public = \"" + keys.public_key + "\"\nsecret = \"" + keys.secret_key + "\"\n",
      0600, overwrite);
  PreparedKeyFile pub;
  try {
    pub = prepare_key_file(
        path + ".pub",
        "# modelcast public key (Ed25519, Z85): give it to your peers.\npublic = \"" + keys.public_key + "\"\n", 0644,
        overwrite);
  } catch (...) {
    discard(pair);
    throw;
  }
  // The public file first: were the secret's commit to fail after it, the secret kept is the old
  // one, which still holds its own public key; the other order would lose a secret. Both under one
  // lock: two threads overwriting one path interleaved their renames, and left a .pub that is not
  // the pair's. (Other processes doing so at once are not kept apart.)
  static std::mutex commits;
  std::lock_guard lock(commits);
  try {
    commit_key_file(pub, overwrite);
  } catch (...) {
    discard(pair);
    throw;
  }
  try {
    commit_key_file(pair, overwrite);
  } catch (...) {
    // Without overwrite the .pub is the one just linked there: a public key without its secret
    // would be taken for a pair's by whoever is given it, and refuse the next save ("exists").
    if (!overwrite) ::unlink(pub.file.c_str());
    throw;
  }
}

KeyPair load_key_pair(const std::string& path) {
  auto table = parse(path);
  check_keys(table, path);
  KeyPair keys{string_at(table, path, "public", true), string_at(table, path, "secret", true)};
  auto decoded = security::decode_secret_key(keys, named(path));  // checked, not kept
  sodium_memzero(decoded.data(), decoded.size());
  // As ssh does with a private key: a secret others can read proves nothing about its holder.
  // Checked last, so that a malformed file is reported as such whatever its mode.
  if (struct stat st {}; ::stat(path.c_str(), &st) == 0 && (st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    bad_file(path, std::string("holds a secret key but other users may read or write it (mode ") + mode +
                       "): chmod 600 it");
  }
  // Nor does a secret that another user wrote or could replace.
  wire::check_trusted_file(path, named(path) + ": ");
  return keys;
}

void check_public_key(const std::string& key, const std::string& what) {
  security::curve_public(security::decode_public_key(key, what), what);
}

std::string load_public_key(const std::string& path) {
  auto table = parse(path);
  check_keys(table, path);
  auto key = string_at(table, path, "public", true);
  check_public_key(key, named(path) + ": 'public'");
  // A key pair file given for its public key holds a secret all the same: readable by others,
  // it is refused here as load_key_pair refuses it (the secret is exposed whichever reads it).
  if (struct stat st {}; table.contains("secret") && ::stat(path.c_str(), &st) == 0 && (st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    bad_file(path, std::string("holds a secret key but other users may read or write it (mode ") + mode +
                       "): chmod 600 it, and give others its .pub file");
  }
  // A public key file says whom to trust (the producer a consumer pins, the consumers a producer
  // admits): one that other users may write lets them put their own key there. As ssh refuses an
  // authorized_keys file others can write. Checked last, as for the secret.
  if (struct stat st {}; ::stat(path.c_str(), &st) == 0 && (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    bad_file(path, "says whom to trust but " + writers_besides_owner(path, st) +
                       " may write it (mode " + mode + "): chmod go-w it");
  }
  // Nor one that another user owns or could replace: in a shared directory such as /tmp,
  // another user could have made it first with their own key in it.
  wire::check_trusted_file(path, named(path) + ": ");
  return key;
}

}  // namespace modelcast
