// modelcast-ucx-sink-peer: a consumer-side UCX transport that is reached and never receives.
// Prints its address as one line of hex, then waits for stdin to close. A test kills it to have
// a peer on its host that dies with sends to it in flight.
#include <cstdio>
#include <iostream>
#include <string>

#include "transports/ucx/ucx_transport.h"

int main() {
  // As a consumer makes its transport (ucx_factory.cpp: receivers use indirect ids).
  auto transport = modelcast::transport::make_ucx_transport({.indirect_endpoint_ids = true});
  std::string hex;
  for (std::byte b : transport->address()) {
    char pair[3];
    std::snprintf(pair, sizeof pair, "%02x", static_cast<unsigned>(b));
    hex += pair;
  }
  std::printf("%s\n", hex.c_str());
  std::fflush(stdout);
  std::string line;
  while (std::getline(std::cin, line)) {
  }
  return 0;
}
