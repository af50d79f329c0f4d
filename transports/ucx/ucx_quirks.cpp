// The version-to-work-arounds table: pure, without UCX, so that the address fuzzer links it.
#include "transports/ucx/ucx_quirks.h"

#include <utility>

namespace modelcast::transport {

UcxQuirks ucx_quirks_for(UcxVersion version) {
  UcxQuirks quirks;  // every work-around: 1.13, and whatever was not measured
  // The assertion was removed upstream (pull request 8175), first released in 1.14.0: shown by
  // the source, since the fault tests avoid the window on purpose.
  if (version >= UcxVersion{1, 14, 0}) quirks.peer_death_in_tcp_wireup_asserts = false;
  // Everything else was reproduced unchanged on 1.22.0 (scripts/ucx-defects/): no threshold.
  // Upstream commit bdd207e6ba, first released in 1.18.0; met on 1.22.0 by every UCX unit test.
  if (version >= UcxVersion{1, 18, 0}) quirks.single_thread_worker_bound_to_first_thread = true;
  // Upstream commit ef3890931a (ucs_sys_ns_t from ino_t to uint32_t), first released in 1.22.0.
  if (version >= UcxVersion{1, 22, 0}) quirks.tcp_loopback_namespace_is_64_bit = false;
  return quirks;
}

std::string to_string(UcxVersion version) {
  return std::to_string(version.major) + "." + std::to_string(version.minor) + "." + std::to_string(version.release);
}

std::string to_string(const UcxQuirks& quirks) {
  const std::pair<bool, const char*> fields[] = {
      {quirks.matched_receive_ignores_cancel, "matched_receive_ignores_cancel"},
      {quirks.sends_to_dead_near_peer_never_end, "sends_to_dead_near_peer_never_end"},
      {quirks.destroying_busy_worker_asserts, "destroying_busy_worker_asserts"},
      {quirks.indirect_ids_assert_on_stuck_sends, "indirect_ids_assert_on_stuck_sends"},
      {quirks.direct_ids_unsafe_for_receivers, "direct_ids_unsafe_for_receivers"},
      {quirks.peer_mode_lacks_shared_memory, "peer_mode_lacks_shared_memory"},
      {quirks.peer_death_in_tcp_wireup_asserts, "peer_death_in_tcp_wireup_asserts"},
      {quirks.single_thread_worker_bound_to_first_thread, "single_thread_worker_bound_to_first_thread"},
      {quirks.tcp_loopback_namespace_is_64_bit, "tcp_loopback_namespace_is_64_bit"},
      {quirks.forced_close_of_busy_tcp_endpoint_may_assert, "forced_close_of_busy_tcp_endpoint_may_assert"},
  };
  std::string out;
  for (const auto& [on, name] : fields) {
    if (!on) continue;
    if (!out.empty()) out += ",";
    out += name;
  }
  return out.empty() ? "none" : out;
}

}  // namespace modelcast::transport
