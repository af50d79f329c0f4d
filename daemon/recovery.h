// Restart recovery: the newest complete version in the repository, loaded into shared memory
// so clients are served at once, until the producer delivers something newer.
#pragma once

#include <string>

#include "daemon/served_version.h"

namespace modelcastd {

// Removes leftovers of interrupted writes under <root>/<model> (other processes'; the caller
// holds the model directory's lock, so those processes are gone), then loads the most recently
// written complete version that fits in `max_bytes`. A version whose files do not check out
// (metadata.json, the safetensors layout, each tensor's bytes against the digest written with
// it) is skipped with a warning (the next older one is tried). Returns nullptr if there is none.
// Throws modelcast::Error(kResource) if shared memory cannot be had.
ServedPtr recover_newest(const std::string& root, const std::string& model, std::uint64_t max_bytes);

}  // namespace modelcastd
