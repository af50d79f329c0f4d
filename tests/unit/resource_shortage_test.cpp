// A Producer or Consumer made where the process is short of a resource throws Error(kResource)
// naming it, and the process lives: libzmq and UCX assert when they cannot have a descriptor, and
// UCX says "Out of memory" for a full /dev/shm. Each case runs in a forked child, held short.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "bare_endpoints.h"
#include "forked_child.h"
#include "modelcast/consumer.h"
#include "modelcast/error.h"
#include "modelcast/producer.h"

namespace {

constexpr int kEscaped = 3;         // an exception other than modelcast::Error left the body
constexpr int kCannotArrange = 77;  // the child could not be held short: skipped, not passed

// Runs `body` in a child and returns its exit status; a child ended by a signal fails the test.
int exit_of_child(const std::function<int()>& body) {
  const pid_t child = fork();
  if (child == -1) {
    ADD_FAILURE() << "fork failed";
    return -1;
  }
  if (child == 0) {
    try {
      _exit(body());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "escaped: %s\n", e.what());
      _exit(kEscaped);
    }
  }
  int status = 0;
  if (!testing_support::child_ended(child, std::chrono::seconds(60), status)) {
    ADD_FAILURE() << "the child did not end within 60 s";
    return -1;
  }
  if (WIFSIGNALED(status)) {
    ADD_FAILURE() << "the child was ended by signal " << WTERMSIG(status);
    return -1;
  }
  return WEXITSTATUS(status);
}

std::size_t open_descriptors() {
  std::size_t count = 0;
  for (int fd = 0; fd < 65536; ++fd) {
    if (fcntl(fd, F_GETFD) != -1) ++count;
  }
  return count;
}

// Builds with `make` at each limit `hold` sets (until it refuses): 0 if every failure named file
// descriptors as Error(kResource) and one happened; 1 if one did not name them; 2 if none failed.
int walk(const std::function<void()>& make, const std::function<bool(int)>& hold) {
  int failures = 0;
  for (int step = 0; hold(step); ++step) {
    try {
      make();
      std::fprintf(stderr, "step %d: made\n", step);
    } catch (const modelcast::Error& e) {
      std::fprintf(stderr, "step %d: %s\n", step, e.what());
      ++failures;
      const std::string what = e.what();
      if (e.code() != modelcast::ErrorCode::kResource ||
          (what.find("file descriptors") == std::string::npos && what.find("Too many open files") == std::string::npos)) {
        return 1;
      }
    }
  }
  return failures > 0 ? 0 : 2;
}

// The descriptor limit, soft and hard, from what is open plus 96 (where both start) down to one
// (down: a process may lower its hard limit, and may not raise it again without CAP_SYS_RESOURCE).
// Below what is open too: the limit bounds descriptor numbers, so how many a limit leaves free
// depends on where the open ones lie (a test runner's pipes on 3 and 4, or on 251), and every
// count of free ones down to none is walked wherever they lie.
std::function<bool(int)> few_descriptors() {
  const rlim_t start = open_descriptors() + 96;
  return [start](int step) {
    if (static_cast<rlim_t>(step) >= start) return false;
    const rlim_t limit = start - static_cast<rlim_t>(step);
    const rlimit held{limit, limit};
    return setrlimit(RLIMIT_NOFILE, &held) == 0;
  };
}

// Makes `make` at every limit of few_descriptors() in a child; expects each failure to name them.
void expect_every_failure_names_descriptors(const std::function<void()>& make) {
  const int code = exit_of_child([&make] { return walk(make, few_descriptors()); });
  EXPECT_EQ(code, 0) << "1: an error not naming file descriptors as a resource; 2: none failed; 3: not a modelcast::Error";
}

TEST(DescriptorLimit, AConsumerShortOfDescriptorsThrowsNamingThemAtEveryLimit) {
  expect_every_failure_names_descriptors(testing_support::make_consumer);
}

TEST(DescriptorLimit, AProducerShortOfDescriptorsThrowsNamingThemAtEveryLimit) {
  expect_every_failure_names_descriptors(testing_support::make_producer);
}

// UCX makes its shared-memory segments in /dev/shm: a full one (here a 1 MiB tmpfs over it, in a
// mount namespace of the child's own) fails the producer's setup, named.
TEST(ShmLimit, AProducerWhoseDevShmIsFullThrowsNamingIt) {
  const int code = exit_of_child([] {
    if (unshare(CLONE_NEWNS) != 0 || mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=1m") != 0) {
      return kCannotArrange;
    }
    const int fill = open("/dev/shm/fill", O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fill == -1) return kCannotArrange;
    const std::vector<char> block(64 * 1024, 1);
    while (write(fill, block.data(), block.size()) > 0) {
    }
    close(fill);
    try {
      testing_support::make_producer();
    } catch (const modelcast::Error& e) {
      std::fprintf(stderr, "%s\n", e.what());
      const bool named = std::string(e.what()).find("/dev/shm") != std::string::npos;
      return e.code() == modelcast::ErrorCode::kResource && named ? 0 : 1;
    }
    return 2;
  });
  if (code == kCannotArrange) GTEST_SKIP() << "cannot mount a small /dev/shm in a mount namespace here";
  EXPECT_EQ(code, 0) << "1: the error does not name /dev/shm as a resource; 2: the producer started";
}

}  // namespace
