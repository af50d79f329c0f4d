// Whether a library that aborts when it cannot open a descriptor can be started now.
//
// Why: libzmq (a context's first socket: its threads' epoll and event descriptors) and UCX (its
// asynchronous-events thread's epoll and pipe) assert when such a descriptor cannot be had, so a
// process at its limit of open files would be ended inside a constructor; asked first, the caller
// gets an error instead. A probe, not a reservation: a descriptor opened elsewhere in between can
// still take the room.
#pragma once

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "modelcast/error.h"

namespace modelcast {

// Throws Error(kResource) naming `what` unless `count` more descriptors can be open at once now.
// Any thread.
inline void check_descriptors_free(int count, const std::string& what) {
  std::vector<int> probes;
  int error = 0;
  for (int i = 0; i < count; ++i) {
    const int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd == -1) {
      error = errno;
      break;
    }
    probes.push_back(fd);
  }
  for (int fd : probes) close(fd);
  // Only running out says anything; /dev/null missing (a bare chroot) leaves nothing to probe with.
  if (error != EMFILE && error != ENFILE) return;
  rlimit files{};
  const bool limit_known = getrlimit(RLIMIT_NOFILE, &files) == 0;
  throw Error(ErrorCode::kResource,
              "cannot start " + what + ": it needs " + std::to_string(count) + " file descriptors, and " +
                  std::strerror(error) +
                  (error == EMFILE && limit_known
                       ? " (this process's limit, `ulimit -n`, is " + std::to_string(files.rlim_cur) + ")"
                       : std::string()));
}

}  // namespace modelcast
