// The host a consumer connects to, checked before ZeroMQ sees it. Its own file (no ZeroMQ) so
// that modelcastd's config check compiles the same rule (libmodelcast keeps its symbols hidden).
#pragma once

#include <optional>
#include <string>

namespace modelcast::wire {

// Why a consumer cannot connect to `endpoint`'s host (tcp:// only), or nothing: a wildcard a
// producer binds to, no host, an unbracketed IPv6 address, or what is plainly an address (digits
// and dots, or brackets) but none the resolver reads. ZeroMQ would take the last as a name to
// resolve. A source-address form (SRC;HOST) is not looked into.
std::optional<std::string> connect_host_problem(const std::string& endpoint);

}  // namespace modelcast::wire
