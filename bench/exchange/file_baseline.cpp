#include "file_baseline.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <thread>

#include "common.h"

namespace bench {
namespace {

constexpr std::size_t kIoBytes = 32u << 20;

std::string model_path(const std::string& directory, int repetition) {
  return directory + "/model." + std::to_string(repetition);
}

[[noreturn]] void fail(const std::string& what) { throw std::runtime_error(what + ": " + std::strerror(errno)); }

void write_model(const std::byte* model, std::size_t size, const std::string& path) {
  std::string temporary = path + ".tmp";
  int fd = open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("open " + temporary);
  for (std::size_t done = 0; done < size;) {
    ssize_t n = write(fd, model + done, std::min(kIoBytes, size - done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("write " + temporary);
    done += static_cast<std::size_t>(n);
  }
  if (fsync(fd) != 0) fail("fsync " + temporary);
  // Written and durable: drop it from this host's page cache, which a remote reader never sees.
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  close(fd);
  if (rename(temporary.c_str(), path.c_str()) != 0) fail("rename " + temporary);
}

void read_model(const std::string& path, std::byte* target, std::size_t size) {
  int fd = open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  if (fd < 0 && errno == EINVAL) {  // no O_DIRECT here: drop the cached pages, then read
    fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  }
  if (fd < 0) fail("open " + path);
  for (std::size_t done = 0; done < size;) {
    ssize_t n = read(fd, target + done, std::min(kIoBytes, size - done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("read " + path);
    if (n == 0) throw std::runtime_error("read " + path + ": file shorter than the model");
    done += static_cast<std::size_t>(n);
  }
  close(fd);
}

}  // namespace

std::vector<double> measure_file_baseline(const std::byte* model, std::size_t size, int readers,
                                          const std::string& directory, int repetitions,
                                          std::vector<double>* write_ms) {
  std::filesystem::create_directories(directory);
  for (int rep = 0; rep < repetitions; ++rep) std::filesystem::remove(model_path(directory, rep));
  std::string self = self_exe();
  std::vector<Child> children;
  std::vector<double> samples;
  auto cleanup = [&] {
    for (auto& child : children) {
      if (child.pid > 0) kill(child.pid, SIGTERM);
      reap(child);
    }
    for (int rep = 0; rep < repetitions; ++rep) std::filesystem::remove(model_path(directory, rep));
  };
  try {
    for (int r = 0; r < readers; ++r) {
      children.push_back(spawn_child({self, "file-read", "--dir", directory, "--size", std::to_string(size), "--reps",
                                      std::to_string(repetitions)}));
    }
    for (auto& child : children) {
      auto line = read_line(child.from_child, child.pending, 120000);
      if (!line || *line != "ready") throw std::runtime_error("file baseline: a reader did not start");
    }
    for (int rep = 0; rep < repetitions; ++rep) {
      std::string path = model_path(directory, rep);
      auto t0 = realtime_ns();
      write_model(model, size, path);
      if (write_ms) write_ms->push_back(static_cast<double>(realtime_ns() - t0) / 1e6);
      std::int64_t last = 0;
      for (auto& child : children) {
        auto line = read_line(child.from_child, child.pending, 300000);
        if (!line || line->rfind("read ", 0) != 0) throw std::runtime_error("file baseline: a reader failed");
        last = std::max<std::int64_t>(last, std::stoll(line->substr(line->find(' ', 5) + 1)));
      }
      samples.push_back(static_cast<double>(last - t0) / 1e6);
      std::filesystem::remove(path);
    }
  } catch (...) {
    cleanup();
    throw;
  }
  for (auto& child : children) {
    if (!reap(child)) throw std::runtime_error("file baseline: a reader exited with an error");
  }
  children.clear();
  cleanup();
  return samples;
}

int run_file_reader(const std::string& directory, std::size_t size, int repetitions) {
  TouchedBuffer target(size);  // where the model lands, pre-faulted (O_DIRECT: page-aligned)
  write_line(kParentWriteFd, "ready");
  for (int rep = 0; rep < repetitions; ++rep) {
    std::string path = model_path(directory, rep);
    struct stat info {};
    // Polled every millisecond, the best a polling server could do: the baseline must not lose
    // time of its own (at 100 ms the reader, asleep while the file was written, saw most writes
    // about 100 ms late, and the file's figure was mostly that sleep).
    while (stat(path.c_str(), &info) != 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    read_model(path, target.data(), size);
    write_line(kParentWriteFd, "read " + std::to_string(rep) + " " + std::to_string(realtime_ns()));
  }
  return 0;
}

}  // namespace bench
