// What /proc says about another process: its resident memory, open descriptors and state.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <string>

#include "eventually.h"

namespace testing_support {

inline std::size_t resident_kib(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string key;
  std::size_t value = 0;
  while (status >> key) {
    if (key == "VmRSS:" && status >> value) return value;
  }
  return 0;
}

inline std::size_t open_descriptors(pid_t pid) {
  std::error_code error;
  std::size_t count = 0;
  for (std::filesystem::directory_iterator it("/proc/" + std::to_string(pid) + "/fd", error), end; !error && it != end;
       it.increment(error)) {
    count++;
  }
  return count;
}

// Whether every thread of `pid` is stopped (SIGSTOP): the state letter 'T' in each
// /proc/PID/task/TID/stat. The process's own stat shows its main thread alone. The command name
// before the state is in parentheses and may hold spaces: the state follows the last ')'.
inline bool all_threads_stopped(pid_t pid) {
  std::error_code error;
  std::size_t threads = 0;
  for (std::filesystem::directory_iterator it("/proc/" + std::to_string(pid) + "/task", error), end; !error && it != end;
       it.increment(error)) {
    std::ifstream stat(it->path() / "stat");
    std::string line;
    std::getline(stat, line);
    const auto close = line.rfind(')');
    if (close == std::string::npos || close + 2 >= line.size() || line[close + 2] != 'T') return false;
    ++threads;
  }
  return !error && threads > 0;
}

// Stops `pid` (SIGSTOP) and returns once every thread of it is stopped (false if they are not
// within 30 s). kill() returns once the signal is queued: the thread it wakes stops the others
// only when it runs, and on a loaded machine the rest go on for tens of milliseconds meanwhile
// (a stopped group member fetched and acked the version published just after the kill).
inline bool stop_process(pid_t pid) {
  return ::kill(pid, SIGSTOP) == 0 && eventually([&] { return all_threads_stopped(pid); }, std::chrono::seconds(30));
}

}  // namespace testing_support
