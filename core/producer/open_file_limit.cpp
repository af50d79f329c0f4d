#include "core/producer/open_file_limit.h"

#include <sys/resource.h>

namespace modelcast::producer {

std::uint64_t raise_open_file_limit(spdlog::logger& log) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return 1024;
  if (limit.rlim_cur >= limit.rlim_max) return limit.rlim_cur;
  auto before = limit.rlim_cur;
  limit.rlim_cur = limit.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &limit) != 0) return before;
  log.info("open-file limit raised from {} to its hard limit {}", before, limit.rlim_max);
  return limit.rlim_cur;
}

}  // namespace modelcast::producer
