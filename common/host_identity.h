// Is a peer in this process, or on this machine?
#pragma once

#include <cstdint>
#include <string>

namespace modelcast {

// The kernel's boot id (/proc/sys/kernel/random/boot_id): one value per running machine, shared
// by all its network namespaces. Empty if unreadable.
std::string host_id();

// A random number drawn once per process: equal only within one process. (A pid is not: two
// containers on one machine share the boot id and may share pids.)
std::uint64_t process_token();

}  // namespace modelcast
