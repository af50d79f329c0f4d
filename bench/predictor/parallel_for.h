// The harness's one way of spreading independent runs over threads: each thread takes the next
// index until none are left. A hand-written loop rather than a library's: std::execution's
// parallel algorithms need TBB with libstdc++, and this is all the harness needs.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <thread>
#include <vector>

namespace modelcast::bench {

// Calls body(i) for every i in [0, count) on max(1, threads) threads; returns when all are done.
// body must only touch what index i owns.
template <typename Body>
void parallel_for(std::size_t count, int threads, Body&& body) {
  std::atomic<std::size_t> next{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < std::max(1, threads); ++t) {
    pool.emplace_back([&] {
      for (std::size_t i; (i = next++) < count;) body(i);
    });
  }
  for (auto& thread : pool) thread.join();
}

}  // namespace modelcast::bench
