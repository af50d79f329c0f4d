// UCX blobs as they travel between peers (worker addresses in joins, packed remote keys in
// exported regions): sealed, and checked before UCX sees them.
//
// Addresses arrive over the network, so they travel sealed: magic, length and an XXH3 of the UCX
// bytes, all checked before UCX sees them. The seal is computable by anyone, so it only catches
// accidents; address_layout.h reads a worker address the way UCX will before UCX sees it, and
// addresses from strangers are kept out by authenticating the control plane.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace modelcast::transport {

inline constexpr std::size_t kAddressHeader = 4 + 4 + 8;

// Magic, length and XXH3 of `body`, then `body`.
std::vector<std::byte> seal(std::uint32_t magic, std::span<const std::byte> body);
// The body inside; throws Error(kTransport) naming `what` for a bad magic, length or checksum.
std::span<const std::byte> unseal(std::uint32_t magic, const char* what, std::span<const std::byte> sealed);

std::vector<std::byte> seal_address(const std::byte* ucx_address, std::size_t length);
// The UCX bytes inside; throws Error(kTransport) for a bad magic, length or checksum.
std::span<const std::byte> unseal_address(std::span<const std::byte> sealed);

}  // namespace modelcast::transport
