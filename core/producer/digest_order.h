// Digests take effect in version order: a consumer that has verified version v knows that every
// version before it was signed and considered for persisting. publish() may hash a version itself
// (changed_blocks_copy.h) while the digest thread still hashes an older one, so digests can come
// in out of order; this holds the newer ones back until the older ones are in.
//
// Threads: the producer's service thread only.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <utility>
#include <vector>

namespace modelcast::producer {

template <typename Digests>  // what takes effect; DigestsReady in the service
class DigestOrder {
 public:
  // `version` went to the digest thread: its digests will come through ready().
  void hashing(std::uint64_t version) { hashing_.insert(version); }

  // The digests of `version` are in: the digests that may take effect now, oldest first (none
  // while an older version is still on the digest thread).
  std::vector<Digests> ready(std::uint64_t version, Digests digests) {
    hashing_.erase(version);
    waiting_.emplace(version, std::move(digests));
    std::vector<Digests> now;
    while (!waiting_.empty() && (hashing_.empty() || waiting_.begin()->first < *hashing_.begin())) {
      now.push_back(std::move(waiting_.begin()->second));
      waiting_.erase(waiting_.begin());
    }
    return now;
  }

 private:
  std::set<std::uint64_t> hashing_;              // on the digest thread
  std::map<std::uint64_t, Digests> waiting_;     // in, behind an older version still hashing
};

}  // namespace modelcast::producer
