#include <gtest/gtest.h>
#include <ucp/api/ucp.h>

#include <cstdio>
#include <string>

#include "transports/ucx/ucx_quirks.h"

namespace modelcast::transport {
namespace {

TEST(UcxQuirks, EachVersionGetsTheWorkaroundsItWasNotShownToDoWithout) {
  UcxQuirks all;  // what 1.13 needs
  UcxQuirks wireup_fixed = all;
  wireup_fixed.peer_death_in_tcp_wireup_asserts = false;
  UcxQuirks bound = wireup_fixed;
  bound.single_thread_worker_bound_to_first_thread = true;
  UcxQuirks narrow_namespace = bound;
  narrow_namespace.tcp_loopback_namespace_is_64_bit = false;
  struct Case {
    UcxVersion version;
    UcxQuirks expected;
  };
  const Case cases[] = {
      {{1, 12, 1}, all},           // older than anything measured: everything stays
      {{1, 13, 0}, all},
      {{1, 13, 1}, all},           // Debian 12
      {{1, 13, 99}, all},
      {{1, 14, 0}, wireup_fixed},  // the release that dropped the wire-up assertion
      {{1, 17, 9}, wireup_fixed},
      {{1, 18, 0}, bound},         // single-thread workers tied to their first thread
      {{1, 21, 5}, bound},
      {{1, 22, 0}, narrow_namespace},  // measured: the other defects are still there
      {{1, 30, 0}, narrow_namespace},  // not measured: keeps what 1.22 needed
      {{2, 0, 0}, narrow_namespace},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(ucx_quirks_for(c.version), c.expected)
        << to_string(c.version) << ": got " << to_string(ucx_quirks_for(c.version)) << ", expected "
        << to_string(c.expected);
  }
}

TEST(UcxQuirks, NamesTheWorkaroundsInForce) {
  UcxQuirks none{false, false, false, false, false, false, false, false, false, false};
  EXPECT_EQ(to_string(none), "none");
  UcxQuirks two = none;
  two.matched_receive_ignores_cancel = true;
  two.peer_mode_lacks_shared_memory = true;
  EXPECT_EQ(to_string(two), "matched_receive_ignores_cancel,peer_mode_lacks_shared_memory");
  EXPECT_EQ(to_string(UcxVersion{1, 13, 1}), "1.13.1");
}

// The version comes from the library loaded at run time, which may be newer than the headers this
// was built against (LD_LIBRARY_PATH): it is checked against UCX's own version string.
TEST(UcxQuirks, TheRunningUcxIsDetected) {
  UcxVersion running = running_ucx_version();
  unsigned major = 0, minor = 0, release = 0;
  ASSERT_EQ(std::sscanf(ucp_get_version_string(), "%u.%u.%u", &major, &minor, &release), 3)
      << ucp_get_version_string();
  EXPECT_EQ(running, (UcxVersion{major, minor, release})) << ucp_get_version_string();
  // libucp keeps its ABI forward only: the library is at least the headers' version.
  EXPECT_GE(running, (UcxVersion{UCP_API_MAJOR, UCP_API_MINOR, 0}));
  EXPECT_EQ(running_ucx_quirks(), ucx_quirks_for(running));
}

}  // namespace
}  // namespace modelcast::transport
