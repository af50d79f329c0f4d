// A process left with few free descriptors while a FewDescriptors lives, for tests of what runs
// out of them.
#pragma once

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <vector>

namespace testing_support {

// Descriptors are handed out lowest first below the soft limit: with the limit `left` above the
// highest in use and every free number below that limit held but the top `left`, exactly `left`
// can be opened. Only the soft limit moves (raised back without privilege); both are restored, and
// the held descriptors closed, when it goes. Not for a process whose other threads open or close
// descriptors meanwhile (the count would be off by theirs).
class FewDescriptors {
 public:
  explicit FewDescriptors(int left) {
    getrlimit(RLIMIT_NOFILE, &saved_);
    int highest = 0;
    for (int fd = 0; fd < 65536; ++fd) {
      if (fcntl(fd, F_GETFD) != -1) highest = fd;
    }
    rlimit tight = saved_;
    tight.rlim_cur = static_cast<rlim_t>(highest + 1 + left);
    setrlimit(RLIMIT_NOFILE, &tight);
    for (int fd; (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) != -1;) held_.push_back(fd);
    for (int i = 0; i < left && !held_.empty(); ++i) {
      close(held_.back());
      held_.pop_back();
    }
  }
  ~FewDescriptors() {
    for (int fd : held_) close(fd);
    setrlimit(RLIMIT_NOFILE, &saved_);
  }
  FewDescriptors(const FewDescriptors&) = delete;
  FewDescriptors& operator=(const FewDescriptors&) = delete;

 private:
  rlimit saved_{};
  std::vector<int> held_;
};

}  // namespace testing_support
