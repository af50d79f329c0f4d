#include "core/wire/socket_directory.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "modelcast/error.h"

namespace modelcast::wire {
namespace {

std::string octal_mode(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

// The directory the socket file is in, with symbolic links resolved (the one whose permissions
// decide who can replace the file), and its status.
std::pair<std::filesystem::path, struct stat> directory_of(const std::string& path, const std::string& what) {
  std::error_code error;
  std::filesystem::path directory = std::filesystem::absolute(std::filesystem::path(path), error).parent_path();
  auto resolved = std::filesystem::canonical(directory, error);
  if (error) {
    throw Error(ErrorCode::kInvalidArgument,
                what + "its directory '" + directory.string() + "' cannot be used: " + error.message());
  }
  struct stat info {};
  if (::stat(resolved.c_str(), &info) != 0) {
    throw Error(ErrorCode::kInvalidArgument,
                what + "its directory '" + resolved.string() + "' cannot be used: " + std::strerror(errno));
  }
  return {resolved, info};
}

}  // namespace

void check_socket_directory(const std::string& path, const std::string& what, const std::string& remedy) {
  const auto [resolved, info] = directory_of(path, what);
  const uid_t user = ::geteuid();
  if (info.st_uid != user && info.st_uid != 0) {
    throw Error(ErrorCode::kInvalidArgument, what + "its directory '" + resolved.string() + "' belongs to user " +
                                                 std::to_string(info.st_uid) + ", not to this process's user " +
                                                 std::to_string(user) + remedy);
  }
  if ((info.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    throw Error(ErrorCode::kInvalidArgument, what + "its directory '" + resolved.string() + "' is writable by " +
                                                 ((info.st_mode & S_IWOTH) ? "every user" : "its group") + " (mode " +
                                                 octal_mode(info.st_mode) + ")" + remedy);
  }
  // Whoever can write a directory above can rename the private one away and put their own in its
  // place, unless the sticky bit keeps them to their own entries (as in /tmp).
  for (auto above = resolved.parent_path();; above = above.parent_path()) {
    struct stat up {};
    if (::stat(above.c_str(), &up) != 0) {
      throw Error(ErrorCode::kInvalidArgument,
                  what + "the directory '" + above.string() + "' above it cannot be used: " + std::strerror(errno));
    }
    const std::string at = what + "the directory '" + above.string() + "' above it ";
    if (up.st_uid != user && up.st_uid != 0) {
      throw Error(ErrorCode::kInvalidArgument, at + "belongs to user " + std::to_string(up.st_uid) +
                                                   ", who could replace the socket's directory" + remedy);
    }
    if ((up.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (up.st_mode & S_ISVTX) == 0) {
      throw Error(ErrorCode::kInvalidArgument, at + "is writable by " +
                                                   ((up.st_mode & S_IWOTH) ? "every user" : "its group") +
                                                   " without the sticky bit (mode " + octal_mode(up.st_mode) +
                                                   "), who could replace the socket's directory" + remedy);
    }
    if (above == above.parent_path()) break;
  }
}

uid_t socket_directory_owner(const std::string& path) {
  return directory_of(path, "socket '" + path + "': ").second.st_uid;
}

void check_private_ipc_directory(const std::string& endpoint, const std::string& role) {
  if (endpoint.rfind("ipc://", 0) != 0) return;
  const std::string path = endpoint.substr(6);
  const std::string what = "plaintext " + role + " endpoint '" + endpoint + "': ";
  const std::string remedy =
      ": another local user could replace the socket with their own and serve consumers any model. Use a "
      "directory only you can write (mkdir -m 700, or mkdtemp), or give the producer a key (modelcast-keygen) and "
      "pin it in consumers";
  if (!path.empty() && path[0] == '@') {
    throw Error(ErrorCode::kInvalidArgument, what + "an abstract socket name can be taken first and reached by any "
                                                    "local process" + remedy);
  }
  check_socket_directory(path, what, remedy);
}

}  // namespace modelcast::wire
