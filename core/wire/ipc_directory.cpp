#include "core/wire/ipc_directory.h"

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

}  // namespace

void check_private_ipc_directory(const std::string& endpoint, const std::string& role) {
  if (endpoint.rfind("ipc://", 0) != 0) return;
  const std::string path = endpoint.substr(6);
  const std::string start = "plaintext " + role + " endpoint '" + endpoint + "': ";
  const std::string remedy =
      ": another local user could replace the socket with their own and serve consumers any model. Use a "
      "directory only you can write (mkdir -m 700, or mkdtemp), or give the producer a key (modelcast-keygen) and "
      "pin it in consumers";
  if (!path.empty() && path[0] == '@') {
    throw Error(ErrorCode::kInvalidArgument, start + "an abstract socket name can be taken first and reached by any "
                                                     "local process" + remedy);
  }
  // The directory the socket file is in, with symbolic links resolved: the one whose
  // permissions decide who can replace the file.
  std::error_code error;
  std::filesystem::path directory = std::filesystem::absolute(std::filesystem::path(path), error).parent_path();
  auto resolved = std::filesystem::canonical(directory, error);
  if (error) {
    throw Error(ErrorCode::kInvalidArgument,
                start + "its directory '" + directory.string() + "' cannot be used: " + error.message());
  }
  struct stat info {};
  if (::stat(resolved.c_str(), &info) != 0) {
    throw Error(ErrorCode::kInvalidArgument,
                start + "its directory '" + resolved.string() + "' cannot be used: " + std::strerror(errno));
  }
  const uid_t user = ::geteuid();
  if (info.st_uid != user && info.st_uid != 0) {
    throw Error(ErrorCode::kInvalidArgument, start + "its directory '" + resolved.string() + "' belongs to user " +
                                                 std::to_string(info.st_uid) + ", not to this process's user " +
                                                 std::to_string(user) + remedy);
  }
  if ((info.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    throw Error(ErrorCode::kInvalidArgument, start + "its directory '" + resolved.string() + "' is writable by " +
                                                 ((info.st_mode & S_IWOTH) ? "every user" : "its group") + " (mode " +
                                                 octal_mode(info.st_mode) + ")" + remedy);
  }
}

}  // namespace modelcast::wire
