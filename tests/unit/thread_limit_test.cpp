// A process at its limit of threads: the library's constructors throw Error(kResource) naming the
// thread they could not start, instead of letting std::system_error out or, for ZeroMQ's threads,
// of libzmq's assert ending the process. Each case runs in a forked child under RLIMIT_NPROC = 1
// (as a user of its own, which takes root to switch to: the kernel does not hold root to the limit),
// where no thread starts.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "common/library_thread.h"
#include "common/log.h"
#include "core/consumer/producer_link.h"
#include "core/producer/control_plane.h"
#include "bare_endpoints.h"
#include "forked_child.h"
#include "modelcast/consumer.h"
#include "modelcast/error.h"
#include "modelcast/producer.h"

namespace {

constexpr int kCannotLimit = 77;   // the child could not be held to the limit: skipped, not passed
constexpr int kNoError = 10;       // the call under test returned
constexpr int kWrongError = 11;    // a modelcast::Error of another code, or not naming a thread
constexpr int kForeignError = 12;  // something other than modelcast::Error

// Runs `body` in a child whose user may have `limit` processes and threads (the child is one), and
// returns how it ended: 0 for Error(kResource) naming a thread, else one of the codes above, or -1
// with a failure recorded if a signal ended it.
int exit_under_thread_limit(rlim_t limit, const std::function<void()>& body) {
  const pid_t child = fork();
  if (child == -1) {
    ADD_FAILURE() << "fork failed";
    return -1;
  }
  if (child == 0) {
    // A user of this child's own: the limit counts every process and thread of the user, and
    // another test's child (ctest runs several at once) or any other process of ours would share
    // it. Root only: without privilege no process can change its user.
    if (geteuid() != 0) _exit(kCannotLimit);
    // From this child's process id: no other child has it; a user namespace that maps only the
    // first 65536 ids gets one of those.
    uid_t own = static_cast<uid_t>(1000000 + getpid());
    if (setgid(own) != 0 || setuid(own) != 0) {
      own = static_cast<uid_t>(30000 + getpid() % 30000);
      if (setgid(own) != 0 || setuid(own) != 0) _exit(kCannotLimit);
    }
    rlimit held{};
    if (getrlimit(RLIMIT_NPROC, &held) != 0 || held.rlim_max < limit) _exit(kCannotLimit);
    held.rlim_cur = 1;  // the soft limit only: an unprivileged process cannot raise a hard one again
    if (setrlimit(RLIMIT_NPROC, &held) != 0) _exit(kCannotLimit);
    bool limited = false;
    try {
      std::thread([] {}).join();
    } catch (const std::system_error&) {
      limited = true;
    }
    // Another process of this user would make the limit mean less than it says.
    if (!limited) _exit(kCannotLimit);
    held.rlim_cur = limit;
    if (setrlimit(RLIMIT_NPROC, &held) != 0) _exit(kCannotLimit);
    try {
      body();
    } catch (const modelcast::Error& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      const bool names_thread = std::string(e.what()).find("thread") != std::string::npos;
      _exit(e.code() == modelcast::ErrorCode::kResource && names_thread ? 0 : kWrongError);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "foreign error: %s\n", e.what());
      _exit(kForeignError);
    }
    _exit(kNoError);
  }
  int status = 0;
  if (!testing_support::child_ended(child, std::chrono::seconds(60), status)) {
    ADD_FAILURE() << "the child did not end within 60 s at a limit of " << limit;
    return -1;
  }
  if (WIFSIGNALED(status)) {
    ADD_FAILURE() << "the child was ended by signal " << WTERMSIG(status) << " at a limit of " << limit;
    return -1;
  }
  return WEXITSTATUS(status);
}

// Where no thread can start.
void expect_resource_error_under_thread_limit(const std::function<void()>& body) {
  const int code = exit_under_thread_limit(1, body);
  if (code == kCannotLimit) GTEST_SKIP() << "cannot hold a child to RLIMIT_NPROC here";
  EXPECT_EQ(code, 0) << "10: no error, 11: another error code, 12: not a modelcast::Error";
}

TEST(ThreadLimit, ALibraryThreadThatCannotStartIsAResourceErrorNamingIt) {
  expect_resource_error_under_thread_limit([] {
    auto thread = modelcast::library_thread("test", [] {});
    thread.join();
  });
}

TEST(ThreadLimit, ControlPlaneWhoseZeroMQThreadsCannotStartThrowsInsteadOfAborting) {
  expect_resource_error_under_thread_limit([] {
    auto options = testing_support::loopback_producer_options();
    modelcast::producer::ControlPlane control(options, *modelcast::log::get("producer"));
  });
}

TEST(ThreadLimit, ProducerLinkWhoseZeroMQThreadsCannotStartThrowsInsteadOfAborting) {
  expect_resource_error_under_thread_limit([] {
    auto options = testing_support::unjoined_consumer_options();
    modelcast::consumer::ProducerLink link(options);
  });
}

TEST(ThreadLimit, ProducerAndConsumerThrowAResourceError) {
  expect_resource_error_under_thread_limit(testing_support::make_producer);
  expect_resource_error_under_thread_limit(testing_support::make_consumer);
}

// Every limit from none to enough: wherever the threads run out (the transport's, ZeroMQ's, the
// service's), construction throws or succeeds, and the process lives.
TEST(ThreadLimit, AtEveryLimitProducerAndConsumerEitherStartOrThrowNeverAbort) {
  const std::function<void()> make_producer = testing_support::make_producer;
  const std::function<void()> make_consumer = testing_support::make_consumer;
  for (const auto& [name, body] : {std::pair{"Producer", make_producer}, std::pair{"Consumer", make_consumer}}) {
    bool started = false;
    for (rlim_t limit = 1; limit <= 32 && !started; ++limit) {
      const int code = exit_under_thread_limit(limit, body);
      if (code == kCannotLimit) GTEST_SKIP() << "cannot hold a child to RLIMIT_NPROC here";
      ASSERT_TRUE(code == 0 || code == kNoError) << name << " at a limit of " << limit << ": exit " << code;
      started = code == kNoError;
    }
    EXPECT_TRUE(started) << name << " did not start with 32 threads allowed";
  }
}

}  // namespace
