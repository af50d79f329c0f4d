// Who besides its owner may write a file or a directory, as an error that refuses it says so.
// With an access ACL set, a mode's group bits are the ACL's mask: write there may be granted to
// users and groups the ACL names rather than (or besides) the group, and "its group" would send
// the reader to the wrong place. Threads: any.
#pragma once

#include <sys/stat.h>
#include <sys/xattr.h>

#include <string>

namespace modelcast {

// For a `path` whose `info` (stat) lets others write: "every user", "its group", or the ACL's.
inline std::string writers_besides_owner(const std::string& path, const struct stat& info) {
  if (info.st_mode & S_IWOTH) return "every user";
  if (::getxattr(path.c_str(), "system.posix_acl_access", nullptr, 0) > 0) {
    return "the users and groups its access ACL names (getfacl lists them)";
  }
  return "its group";
}

}  // namespace modelcast
