// The layout of a UCX worker address, read with every length checked against the bytes there,
// and the check a peer's address passes before UCX sees it.
//
// Why we read UCX's format ourselves: ucp_address_unpack (UCX 1.13 and every later release) is
// given no length and trusts each length byte inside the address, and the transports then
// dereference what it found. One bit flipped in a consumer's address (and the seal recomputed)
// crashed the producer inside ucp_ep_create: an interface address length of 0 hands the cma
// transport a NULL address, a longer one makes UCX read past the buffer. Worker addresses come
// from peers, so before one reaches UCX we walk it the way ucp_address_unpack does (address
// formats v1 and v2, the non-unified mode UCX uses by default), require that it ends exactly at
// its last byte, and that every entry for a transport this UCX runs has lengths that transport
// packs, so that it never reads more than a genuine peer's address holds. TCP's device address
// has one of three forms, told by its own first two bytes (IPv4, IPv6, or loopback with a
// system id and a namespace id, whose width depends on the UCX version); every other
// transport's lengths must be the ones this UCX's own address gives it (self is fixed-size;
// InfiniBand devices of one fabric pack alike), except that the shared-memory transports append a
// namespace id when the process runs outside the host's default namespaces (a container), with a
// flag in the address's first word that makes UCX read it: a peer in other namespaces than ours
// packs the other length, accepted when its flag agrees with it.
// Entries for transports we do not run are only bounds-checked: UCX compares their checksum
// and reads nothing else of them.
//
// What this cannot see: values of the right length (a port, a pid, a shared-memory segment id).
// The transports treat those as a peer's say-so and fail cleanly on wrong ones, except that a
// shared-memory peer can always fault the processes that map its memory; the README says so.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "transports/ucx/ucx_quirks.h"

namespace modelcast::transport {

struct UcxAddressEntry {
  std::uint16_t transport_checksum = 0;  // UCX's tl_name_csum: which transport (tcp, cma, posix...)
  std::size_t device_address_length = 0;
  std::size_t iface_address_length = 0;
  // The device address's first two bytes (zero where it is shorter): TCP's flags and family.
  std::uint8_t device_head[2] = {0, 0};
  // The first 8 bytes of the device and interface addresses (zero past a shorter one): where the
  // shared-memory transports keep the flag that says a namespace id follows.
  std::array<std::byte, 8> device_start{};
  std::array<std::byte, 8> iface_start{};
};

// ucs_crc16_string of the transport names, UCX's checksums of them (a unit test holds each to UCX's).
inline constexpr std::uint16_t kTcpTransportChecksum = 6607;
inline constexpr std::uint16_t kPosixTransportChecksum = 54183;
inline constexpr std::uint16_t kSysvTransportChecksum = 21389;
inline constexpr std::uint16_t kCmaTransportChecksum = 35655;
inline constexpr std::uint16_t kXpmemTransportChecksum = 33757;
inline constexpr std::uint16_t kKnemTransportChecksum = 4983;

struct UcxAddressLayout {
  unsigned format = 0;  // UCX's UCP_OBJECT_VERSION: 0 is address format v1, 1 is v2
  std::vector<UcxAddressEntry> entries;
};

// The layout of `address` (a packed ucp worker address). Throws Error(kTransport) naming the
// byte where it stops making sense: unknown format, a length past the end, trailing bytes, an
// endpoint address (never in a worker address), non-finite attributes, too many entries.
UcxAddressLayout read_address_layout(std::span<const std::byte> address);

// Throws Error(kTransport) unless `peer` reads as a layout (read_address_layout) in the format of
// `own`, names at least one transport, and each of its entries for a transport `own` has is in a
// form that transport packs (see above; `ucx`: the UCX that will read it, for TCP's loopback form).
void check_peer_address(std::span<const std::byte> peer, const UcxAddressLayout& own, const UcxQuirks& ucx);

}  // namespace modelcast::transport
