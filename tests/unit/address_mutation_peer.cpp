// modelcast-address-mutation-peer: hands a producer-side UCX transport the live address of a
// consumer-side one, changed one way at a time (every single-bit flip, then seeded byte
// replacements), each re-sealed so that only UCX's own reading stands between it and a crash.
// Prints "try I" before each connect and "ok I" or "refused I" after it, so a test that sees
// the process die knows which mutation killed it and can go on from the next.
//
//   modelcast-address-mutation-peer FIRST REPLACEMENTS SEED DETECT_FAILURE
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "modelcast/error.h"
#include "transports/ucx/address_seal.h"
#include "transports/ucx/ucx_transport.h"

namespace transport = modelcast::transport;

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s FIRST REPLACEMENTS SEED DETECT_FAILURE\n", argv[0]);
    return 2;
  }
  std::size_t first = std::stoul(argv[1]);
  std::size_t replacements = std::stoul(argv[2]);
  std::uint64_t seed = std::stoull(argv[3]);
  bool detect_failure = std::string(argv[4]) == "1";

  auto consumer = transport::make_ucx_transport({.indirect_endpoint_ids = true});
  auto producer = transport::make_ucx_transport();
  auto sealed = consumer->address();
  std::vector<std::byte> body(sealed.begin() + transport::kAddressHeader, sealed.end());
  std::size_t flips = body.size() * 8;
  std::printf("mutations %zu\n", flips + replacements);
  std::fflush(stdout);

  std::mt19937_64 random(seed);
  std::vector<std::pair<std::size_t, std::byte>> replace(replacements);
  for (auto& [at, value] : replace) {
    at = random() % body.size();
    value = static_cast<std::byte>(random() % 256);
  }
  auto attempt = [&](const std::string& label, const std::vector<std::byte>& candidate) {
    std::printf("try %s\n", label.c_str());
    std::fflush(stdout);
    try {
      auto peer = producer->connect(transport::seal_address(candidate.data(), candidate.size()), detect_failure,
                                    nullptr);
      producer->disconnect(peer);
      std::printf("ok %s\n", label.c_str());
    } catch (const modelcast::Error& e) {
      std::printf("refused %s %s\n", label.c_str(), e.what());
    }
    std::fflush(stdout);
  };
  if (first == 0) attempt("original", body);
  for (std::size_t i = first; i < flips + replacements; ++i) {
    auto candidate = body;
    if (i < flips) {
      candidate[i / 8] ^= static_cast<std::byte>(1u << (i % 8));
    } else {
      auto [at, value] = replace[i - flips];
      if (candidate[at] == value) value ^= std::byte{0xff};
      candidate[at] = value;
    }
    attempt(std::to_string(i), candidate);
  }
  std::printf("done\n");
  std::fflush(stdout);
  return 0;
}
