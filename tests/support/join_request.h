// Join requests as tests write them by hand (hostile clients, fake consumers, codec round
// trips): one UCX offer of host memory, as a real consumer's default join carries.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/wire/protocol.h"

namespace modelcast::testing {

inline transport::Capabilities ucx_host_capabilities() {
  transport::Capabilities caps;
  caps.reach = transport::Reach::kNetwork;
  caps.one_sided = true;
  return caps;
}

inline protocol::JoinRequest ucx_join(std::string model, std::string name, std::vector<std::byte> address,
                                      std::string host, std::uint64_t session) {
  protocol::JoinRequest join;
  join.model = std::move(model);
  join.consumer_name = std::move(name);
  join.offers = {{"ucx", ucx_host_capabilities(), std::move(address)}};
  join.host_id = std::move(host);
  join.session = session;
  return join;
}

}  // namespace modelcast::testing
