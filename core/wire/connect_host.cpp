#include "core/wire/connect_host.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <array>

namespace modelcast::wire {

std::optional<std::string> connect_host_problem(const std::string& endpoint) {
  if (endpoint.rfind("tcp://", 0) != 0) return std::nullopt;
  const auto colon = endpoint.rfind(':');
  if (colon == std::string::npos || colon < 6) return std::nullopt;  // no port: check_tcp_port's to say
  const std::string host = endpoint.substr(6, colon - 6);
  if (host.empty()) return "no host before the port: give the producer host's address (127.0.0.1 on this host)";
  // ZeroMQ's "Invalid argument" named nothing, and the plaintext rule called these "on another host".
  if (host == "*" || host == "0.0.0.0" || host == "[::]") {
    return "'" + host + "' is a wildcard a producer binds to, not an address to connect to: give the producer "
           "host's address (127.0.0.1 on this host)";
  }
  if (host.find(':') != std::string::npos && host.front() != '[') {
    return "an IPv6 address goes in brackets (tcp://[" + host + "]:PORT)";
  }
  // A source-address form ("src;dst") is not a plain address and goes through.
  std::array<unsigned char, sizeof(in6_addr)> parsed{};
  if (host.front() == '[') {
    const std::string inner = host.back() == ']' ? host.substr(1, host.size() - 2) : std::string();
    if (inner.empty() || inet_pton(AF_INET6, inner.c_str(), parsed.data()) != 1) {
      return "'" + host + "' is no IPv6 address in brackets";
    }
  } else if (std::all_of(host.begin(), host.end(), [](char c) { return (c >= '0' && c <= '9') || c == '.'; }) &&
             inet_pton(AF_INET, host.c_str(), parsed.data()) != 1) {
    return "'" + host + "' is no IPv4 address (four numbers 0 to 255, dotted)";
  }
  return std::nullopt;
}

}  // namespace modelcast::wire
