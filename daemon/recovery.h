// Restart recovery: the newest complete version in the repository, loaded into shared memory
// so clients are served at once, until the producer delivers something newer.
#pragma once

#include <string>

#include "daemon/served_version.h"

namespace modelcastd {

// Removes leftovers of interrupted writes under <root>/<model> where `locked` (the caller holds
// the model directory's lock, so the processes that left them are gone; without it, on a file
// system that takes no lock, they may be another writer's work in progress), then loads the most recently
// written complete version that fits in `max_bytes`. A version whose files do not check out
// (metadata.json, the safetensors layout, each tensor's bytes against the digest written with
// it) is skipped with a warning (the next older one is tried). Returns nullptr if there is none.
// Throws modelcast::Error(kResource) if shared memory cannot be had.
// Each tensor is placed at a multiple of 256 bytes of the served buffer, as the producer places
// them (the file packs them, and readers take float pointers). A model directory that another
// user could write (check_repository_directory) is not read: its versions could be anyone's.
ServedPtr recover_newest(const std::string& root, const std::string& model, std::uint64_t max_bytes,
                         bool locked = true);

// Throws modelcast::Error(kInvalidArgument), naming the directory and what is wrong, unless no
// user but this process's and root could write `directory` or replace it on the way there:
// whoever could would choose the weights served after a restart, signed producers or not.
// --check, the start and a reload make it on the repository's root.
void check_repository_directory(const std::string& directory);

}  // namespace modelcastd
