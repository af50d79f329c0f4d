// What /proc says about another process: its resident memory, open descriptors and state.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <string>

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

// The state letter of /proc/PID/stat ('R', 'S', 'T' when stopped, ...), '?' if it cannot be read.
// The command name before it is in parentheses and may hold spaces: the state follows the last ')'.
inline char process_state(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() ? line[close + 2] : '?';
}

}  // namespace testing_support
