/* Runs a command as a child subreaper (PR_SET_CHILD_SUBREAPER, kept across exec): what the
   command's descendants leave when their parents end is given to it, as to a container's PID 1.
   Lets the daemon's tests run it as a container runs it, without a PID namespace (root). */
#include <stdio.h>
#include <string.h>
#include <errno.h>
#include <sys/prctl.h>
#include <unistd.h>

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: as_subreaper PROGRAM [ARG...]\n");
    return 2;
  }
  if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    fprintf(stderr, "as_subreaper: prctl: %s\n", strerror(errno));
    return 2;
  }
  execv(argv[1], argv + 1);
  fprintf(stderr, "as_subreaper: cannot run %s: %s\n", argv[1], strerror(errno));
  return 2;
}
