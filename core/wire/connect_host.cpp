#include "core/wire/connect_host.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>

namespace modelcast::wire {

std::optional<std::string> connect_host_problem(const std::string& endpoint) {
  if (endpoint.rfind("tcp://", 0) != 0) return std::nullopt;
  const auto colon = endpoint.rfind(':');
  if (colon == std::string::npos || colon < 6) return std::nullopt;  // no port: check_tcp_port's to say
  const std::string host = endpoint.substr(6, colon - 6);
  // ZeroMQ's source-address form ("tcp://SRC;HOST:PORT", SRC an interface or an address with a
  // port of its own) is left to ZeroMQ whole.
  if (host.find(';') != std::string::npos) return std::nullopt;
  if (host.empty()) return "no host before the port: give the producer host's address (127.0.0.1 on this host)";
  // ZeroMQ's "Invalid argument" named nothing, and the plaintext rule called these "on another host".
  if (host == "*" || host == "0.0.0.0" || host == "[::]") {
    return "'" + host + "' is a wildcard a producer binds to, not an address to connect to: give the producer "
           "host's address (127.0.0.1 on this host)";
  }
  if (host.find(':') != std::string::npos && host.front() != '[') {
    return "an IPv6 address goes in brackets (tcp://[" + host + "]:PORT)";
  }
  // Written as an address, it must read as one: the resolver's rules (inet_aton's shorthand such
  // as 127.1 included, as getaddrinfo takes it), an IPv6 address's zone (%eth0) not its to read.
  if (host.front() == '[') {
    std::string inner = host.back() == ']' ? host.substr(1, host.size() - 2) : std::string();
    const auto zone = inner.find('%');
    const bool zone_named = zone == std::string::npos || zone + 1 < inner.size();
    if (zone != std::string::npos) inner.resize(zone);
    in6_addr v6{};
    if (inner.empty() || !zone_named || inet_pton(AF_INET6, inner.c_str(), &v6) != 1) {
      return "'" + host + "' is no IPv6 address in brackets";
    }
  } else if (in_addr v4{};
             std::all_of(host.begin(), host.end(), [](char c) { return (c >= '0' && c <= '9') || c == '.'; }) &&
             inet_aton(host.c_str(), &v4) == 0) {
    return "'" + host + "' is no IPv4 address (four numbers 0 to 255, dotted)";
  }
  return std::nullopt;
}

}  // namespace modelcast::wire
