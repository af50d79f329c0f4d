// Grants another user write access to a file or directory by a POSIX access ACL, as
// `setfacl -m u:UID:rwx PATH` would, without needing the acl package: the kernel's xattr form
// (linux/posix_acl_xattr.h) written directly. The mode's group bits then show the ACL's mask.
#pragma once

#include <sys/types.h>
#include <sys/xattr.h>

#include <cerrno>
#include <cstdint>
#include <string>
#include <vector>

namespace testing_support {

// False where the file system keeps no ACLs (ENOTSUP); throws nothing.
inline bool grant_write_by_acl(const std::string& path, uid_t user) {
  std::vector<std::uint8_t> blob;
  auto put = [&](std::uint32_t value, int bytes) {  // little-endian, as the kernel reads it
    for (int i = 0; i < bytes; ++i) blob.push_back(static_cast<std::uint8_t>(value >> (8 * i)));
  };
  auto entry = [&](std::uint16_t tag, std::uint16_t perm, std::uint32_t id) {
    put(tag, 2);
    put(perm, 2);
    put(id, 4);
  };
  constexpr std::uint32_t kNoId = 0xffffffffu;
  put(2, 4);                   // POSIX_ACL_XATTR_VERSION
  entry(0x01, 7, kNoId);       // ACL_USER_OBJ rwx
  entry(0x02, 7, user);        // ACL_USER rwx
  entry(0x04, 5, kNoId);       // ACL_GROUP_OBJ r-x
  entry(0x10, 7, kNoId);       // ACL_MASK rwx
  entry(0x20, 5, kNoId);       // ACL_OTHER r-x
  return ::setxattr(path.c_str(), "system.posix_acl_access", blob.data(), blob.size(), 0) == 0;
}

}  // namespace testing_support
