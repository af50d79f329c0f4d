#include "core/wire/socket_directory.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <deque>
#include <filesystem>
#include <vector>

#include "common/file_writers.h"
#include "common/shown_text.h"
#include "modelcast/error.h"

namespace modelcast::wire {
namespace {

namespace fs = std::filesystem;

std::string octal_mode(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

// A path in an error, quoted and escaped: a name with a newline in it must not forge a log line.
std::string shown(const fs::path& path) { return shown_text(path.string(), 4096); }

bool others_can_write(const struct stat& info) { return (info.st_mode & (S_IWGRP | S_IWOTH)) != 0; }

// One name looked up on the way to the socket's directory: the directory it was looked up in
// (whose writers can replace it) and what the name is (a directory or a symbolic link, whose
// owner can replace it where the sticky bit lets only owners do so).
struct Step {
  fs::path container;
  struct stat container_info {};
  fs::path entry;
  struct stat entry_info {};
};

// The way from / to the directory of socket file `path`, with every symbolic link followed by
// hand, as the kernel does, so that each link and each directory passed is seen: resolving
// first (realpath) would hide a link that another user owns and can point elsewhere.
struct Route {
  std::vector<Step> steps;
  fs::path directory;
  struct stat info {};
};

Route route_to_directory(const std::string& path, const std::string& what, ErrorCode code) {
  std::error_code error;
  const fs::path named = fs::absolute(fs::path(path), error).parent_path();
  auto fail = [&](const fs::path& at, const std::string& why) {
    throw Error(code, what + (at == named ? "its directory " : "the path to its directory ") + shown(at) +
                          " cannot be used: " + why);
  };
  if (error) fail(named, error.message());
  std::deque<std::string> pending;
  for (const auto& part : named.relative_path()) pending.push_back(part.string());
  Route route;
  route.directory = "/";
  if (::stat("/", &route.info) != 0) fail("/", std::strerror(errno));
  int links = 0;
  while (!pending.empty()) {
    const std::string name = pending.front();
    pending.pop_front();
    if (name.empty() || name == ".") continue;
    if (name == "..") {  // the parent of a directory already reached was passed on the way to it
      route.directory = route.directory.parent_path();
      if (::stat(route.directory.c_str(), &route.info) != 0) fail(route.directory, std::strerror(errno));
      continue;
    }
    Step step{route.directory, route.info, route.directory / name, {}};
    if (::lstat(step.entry.c_str(), &step.entry_info) != 0) fail(step.entry, std::strerror(errno));
    route.steps.push_back(step);
    if (S_ISLNK(step.entry_info.st_mode)) {
      if (++links > 40) fail(named, std::strerror(ELOOP));
      std::vector<char> target(PATH_MAX + 1);
      const ssize_t size = ::readlink(step.entry.c_str(), target.data(), PATH_MAX);
      if (size < 0) fail(step.entry, std::strerror(errno));
      const fs::path to(std::string(target.data(), static_cast<size_t>(size)));
      std::vector<std::string> parts;
      for (const auto& part : to.relative_path()) parts.push_back(part.string());
      pending.insert(pending.begin(), parts.begin(), parts.end());
      if (to.is_absolute()) {
        route.directory = "/";
        if (::stat("/", &route.info) != 0) fail("/", std::strerror(errno));
      }
    } else if (S_ISDIR(step.entry_info.st_mode)) {
      route.directory = step.entry;
      route.info = step.entry_info;
    } else {
      fail(step.entry, "not a directory");
    }
  }
  return route;
}

// Whoever can replace a name on the route can send the socket's path elsewhere: the writers of
// the directory it is in (unless the sticky bit keeps them to their own entries, as in /tmp),
// and the name's owner. In a directory others may write, anyone could also have made the name
// first, so there only this user's and root's names count. `owner` (the socket directory's
// owner, for a client; this user otherwise) is trusted elsewhere on the route; whether the
// socket's directory itself is fit is left to the caller.
void check_route(const Route& route, const std::string& what, const std::string& remedy, ErrorCode code,
                 uid_t owner, const std::string& file_kind = "socket") {
  const uid_t user = ::geteuid();
  auto is_ours = [&](uid_t uid) { return uid == user || uid == 0; };
  auto is_trusted = [&](uid_t uid) { return is_ours(uid) || uid == owner; };
  for (size_t i = 0; i < route.steps.size(); ++i) {
    const Step& step = route.steps[i];
    const bool link = S_ISLNK(step.entry_info.st_mode);
    const bool the_directory = !link && i + 1 == route.steps.size() && step.entry == route.directory;
    const std::string kind = link ? "the symbolic link " : the_directory ? "its directory " : "the directory ";
    const std::string entry = kind + shown(step.entry) + (link || the_directory ? "" : " above it");
    const std::string above = "the directory " + shown(step.container) + " above it ";
    if (!is_trusted(step.container_info.st_uid)) {
      throw Error(code, what + above + "belongs to user " + std::to_string(step.container_info.st_uid) +
                            ", who could replace the " + file_kind + "'s directory" + remedy);
    }
    if (others_can_write(step.container_info)) {
      const std::string writers = writers_besides_owner(step.container.string(), step.container_info);
      if ((step.container_info.st_mode & S_ISVTX) == 0) {
        throw Error(code, what + above + "is writable by " + writers + " without the sticky bit (mode " +
                              octal_mode(step.container_info.st_mode) + "), who could replace the " + file_kind + "'s directory" +
                              remedy);
      }
      if (!is_ours(step.entry_info.st_uid)) {
        throw Error(code, what + entry + " belongs to user " + std::to_string(step.entry_info.st_uid) + " and is in " +
                              shown(step.container) + ", which " + writers +
                              " can write (mode " + octal_mode(step.container_info.st_mode) +
                              "): anyone could have made it first" + remedy);
      }
    }
    if (!the_directory && !is_trusted(step.entry_info.st_uid)) {
      throw Error(code, what + entry + " belongs to user " + std::to_string(step.entry_info.st_uid) + ", who could " +
                            (link ? "point it at a directory of theirs" : "replace the " + file_kind + "'s directory") + remedy);
    }
  }
}

// check_socket_directory's rule for the directory of `path`; `file_kind` names what it holds.
void check_directory_of(const std::string& path, const std::string& what, const std::string& remedy,
                        const std::string& file_kind) {
  const Route route = route_to_directory(path, what, ErrorCode::kInvalidArgument);
  const uid_t user = ::geteuid();
  check_route(route, what, remedy, ErrorCode::kInvalidArgument, user, file_kind);
  const std::string directory = route.directory.string();
  if (route.info.st_uid != user && route.info.st_uid != 0) {
    throw Error(ErrorCode::kInvalidArgument, what + "its directory " + shown(route.directory) + " belongs to user " +
                                                 std::to_string(route.info.st_uid) + ", not to this process's user " +
                                                 std::to_string(user) + remedy);
  }
  if (others_can_write(route.info)) {
    throw Error(ErrorCode::kInvalidArgument, what + "its directory " + shown(route.directory) + " is writable by " +
                                                 writers_besides_owner(directory, route.info) + " (mode " +
                                                 octal_mode(route.info.st_mode) + ")" + remedy);
  }
}

}  // namespace

void check_socket_directory(const std::string& path, const std::string& what, const std::string& remedy) {
  check_directory_of(path, what, remedy, "socket");
}

void check_private_directory(const std::string& directory, const std::string& what, const std::string& remedy,
                             const std::string& file_kind) {
  check_directory_of((fs::path(directory) / ".").string(), what, remedy, file_kind);
}

uid_t socket_directory_owner(const std::string& path, const std::string& what) {
  const std::string remedy = "; only a directory that its owner, this process's user or root made and alone control "
                             "says who the daemon is (systemd's RuntimeDirectory, /run/modelcastd, is one)";
  const Route route = route_to_directory(path, what, ErrorCode::kAuthentication);
  const uid_t owner = route.info.st_uid;
  check_route(route, what, remedy, ErrorCode::kAuthentication, owner);
  return owner;
}

void check_private_ipc_directory(const std::string& endpoint, const std::string& role) {
  if (endpoint.rfind("ipc://", 0) != 0) return;
  const std::string path = endpoint.substr(6);
  const std::string what = "plaintext " + role + " endpoint " + shown_text(endpoint, 4096) + ": ";
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

void check_trusted_file(const std::string& path, const std::string& what, int links) {
  const std::string remedy = ": keep it in a directory of this user's (or root's) that no one else can write";
  const uid_t user = ::geteuid();
  auto ours = [&](uid_t uid) { return uid == user || uid == 0; };
  const Route route = route_to_directory(path, what, ErrorCode::kInvalidArgument);
  check_route(route, what, remedy, ErrorCode::kInvalidArgument, user, "key file");
  const std::string directory = route.directory.string();
  if (!ours(route.info.st_uid)) {
    throw Error(ErrorCode::kInvalidArgument, what + "its directory " + shown(route.directory) + " belongs to user " +
                                                 std::to_string(route.info.st_uid) + ", who could replace it" + remedy);
  }
  const bool shared = others_can_write(route.info);
  if (shared && (route.info.st_mode & S_ISVTX) == 0) {
    throw Error(ErrorCode::kInvalidArgument, what + "its directory " + shown(route.directory) + " is writable by " +
                                                 writers_besides_owner(directory, route.info) +
                                                 " without the sticky bit (mode " + octal_mode(route.info.st_mode) +
                                                 "), who could replace it" + remedy);
  }
  const fs::path file = route.directory / fs::path(path).filename();
  struct stat info {};
  if (::lstat(file.c_str(), &info) != 0) return;  // a missing file is the reader's to report
  // The file (or the link naming it) must be this user's or root's: another user's could hold
  // their key or config, put there first in a shared directory such as /tmp.
  if (!ours(info.st_uid)) {
    throw Error(ErrorCode::kInvalidArgument,
                what + (S_ISLNK(info.st_mode) ? "the symbolic link " : "") + shown(file) + " belongs to user " +
                    std::to_string(info.st_uid) + ", not to this process's user or root: they could have put " +
                    (S_ISLNK(info.st_mode) ? "it there and point it at a file of theirs" : "their own file there") +
                    remedy);
  }
  if (S_ISLNK(info.st_mode)) {
    if (links > 40) {
      throw Error(ErrorCode::kInvalidArgument, what + "cannot be used: " + std::strerror(ELOOP));
    }
    std::vector<char> target(PATH_MAX + 1);
    const ssize_t size = ::readlink(file.c_str(), target.data(), PATH_MAX);
    if (size < 0) return;
    const fs::path to(std::string(target.data(), static_cast<size_t>(size)));
    check_trusted_file((to.is_absolute() ? to : route.directory / to).string(), what, links + 1);
  }
}

}  // namespace modelcast::wire
