#include "transports/ucx/address_layout.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "modelcast/error.h"

namespace modelcast::transport {
namespace {

// The constants of UCX's src/ucp/wireup/address.c and ucp_types.h (unchanged from 1.12 to today).
constexpr unsigned kFormatV1 = 0;
constexpr unsigned kFormatV2 = 1;
constexpr std::uint8_t kVersionMask = 0x0f;
constexpr std::uint8_t kHeaderDebugInfo = 0x01;
constexpr std::uint8_t kHeaderWorkerUuid = 0x02;
constexpr std::uint8_t kHeaderClientId = 0x04;
constexpr std::uint8_t kFlagLast = 0x80;
constexpr std::uint8_t kFlagHasEndpointAddress = 0x40;  // on the interface length byte
constexpr std::uint8_t kFlagNumPaths = 0x40;            // on the device length byte
constexpr std::uint8_t kFlagSysDevice = 0x20;           // on the device length byte
constexpr std::uint8_t kDeviceLengthMask = 0x1f;
constexpr std::uint8_t kIfaceLengthMask = 0x3f;
constexpr std::uint8_t kMdEmptyDevice = 0x80;
constexpr std::uint8_t kMdMaskV2 = 0x7f;
constexpr std::uint8_t kNullResource = 0xff;
constexpr std::size_t kMaxMds = 64;
constexpr std::size_t kMaxResources = 128;
constexpr std::size_t kIfaceAttrV1 = 16;  // float overhead, bandwidth, latency; u32 priority and flags
constexpr std::size_t kIfaceAttrV2 = 8;

[[noreturn]] void refuse(std::size_t at, const std::string& why) {
  throw Error(ErrorCode::kTransport, "UCX worker address refused at byte " + std::to_string(at) + ": " + why);
}

class Reader {
 public:
  explicit Reader(std::span<const std::byte> bytes) : bytes_(bytes) {}

  std::size_t at() const { return at_; }
  bool done() const { return at_ == bytes_.size(); }

  std::uint8_t byte(const char* what) {
    need(1, what);
    return static_cast<std::uint8_t>(bytes_[at_++]);
  }
  std::span<const std::byte> take(std::size_t n, const char* what) {
    need(n, what);
    auto out = bytes_.subspan(at_, n);
    at_ += n;
    return out;
  }
  // A length or index that format v2 extends into the next byte when the field is all ones.
  std::size_t extended(std::uint8_t value, std::uint8_t mask, unsigned format, const char* what) {
    std::size_t v = value & mask;
    return (format == kFormatV2 && v == mask) ? byte(what) : v;
  }

 private:
  void need(std::size_t n, const char* what) {
    if (bytes_.size() - at_ < n) {
      refuse(at_, std::string(what) + " needs " + std::to_string(n) + " bytes, " +
                      std::to_string(bytes_.size() - at_) + " left");
    }
  }

  std::span<const std::byte> bytes_;
  std::size_t at_ = 0;
};

// Format v1's floats: overhead, bandwidth, latency (seconds, bytes per second). UCX scores each
// transport pair from them and asserts that no score is negative (select.c: one random byte in
// an overhead or latency made it so and aborted the producer), so neither may be negative; a
// negative bandwidth is how v1 says "shared", and is allowed.
void check_attributes(std::span<const std::byte> attr, unsigned format, std::size_t at) {
  if (format != kFormatV1) return;  // v2 packs unsigned 8-bit codes, all of which decode to finite values
  for (std::size_t i = 0; i < 3; ++i) {
    float value;
    std::memcpy(&value, attr.data() + 4 * i, sizeof value);
    if (!std::isfinite(value)) refuse(at + 4 * i, "an interface attribute is not a finite number");
    if (i != 1 && value < 0) refuse(at + 4 * i, "an interface's overhead or latency is negative");
  }
}

}  // namespace

UcxAddressLayout read_address_layout(std::span<const std::byte> address) {
  Reader in(address);
  UcxAddressLayout layout;
  std::uint8_t header = in.byte("the header");
  layout.format = header & kVersionMask;
  if (layout.format != kFormatV1 && layout.format != kFormatV2) {
    refuse(0, "unknown address format " + std::to_string(layout.format));
  }
  std::uint8_t flags = layout.format == kFormatV1 ? static_cast<std::uint8_t>(header >> 4) : in.byte("the header flags");
  // ucp_ep_create unpacks with the worker-uuid flag, which makes format v1 always carry one.
  if (layout.format == kFormatV1 || (flags & kHeaderWorkerUuid) != 0) in.take(8, "the worker uuid");
  if ((flags & kHeaderClientId) != 0) in.take(8, "the client id");
  if ((flags & kHeaderDebugInfo) != 0) in.take(in.byte("the worker name length"), "the worker name");
  if (in.done() || static_cast<std::uint8_t>(address[in.at()]) == kNullResource) {
    refuse(in.at(), "the address names no transport");
  }
  bool last_device = false;
  while (!last_device) {
    std::size_t device_at = in.at();
    std::uint8_t md = in.byte("a memory domain index");
    bool empty_device = (md & kMdEmptyDevice) != 0;
    if (layout.format == kFormatV2 && in.extended(md, kMdMaskV2, layout.format, "a memory domain index") >= kMaxMds) {
      refuse(device_at, "memory domain index out of range");
    }
    std::uint8_t device = in.byte("a device address length");
    last_device = (device & kFlagLast) != 0;
    std::size_t device_length = in.extended(device, kDeviceLengthMask, layout.format, "a device address length");
    if ((device & kFlagNumPaths) != 0) in.byte("a device's path count");
    if ((device & kFlagSysDevice) != 0) in.byte("a system device");
    auto device_address = in.take(device_length, "a device address");
    bool last_iface = empty_device;
    while (!last_iface) {
      if (layout.entries.size() == kMaxResources) refuse(in.at(), "more than 128 transport entries");
      std::size_t entry_at = in.at();
      UcxAddressEntry entry;
      auto checksum = in.take(2, "a transport checksum");
      std::memcpy(&entry.transport_checksum, checksum.data(), 2);
      entry.device_address_length = device_length;
      for (std::size_t i = 0; i < 2 && i < device_length; ++i) {
        entry.device_head[i] = static_cast<std::uint8_t>(device_address[i]);
      }
      std::memcpy(entry.device_start.data(), device_address.data(), std::min<std::size_t>(8, device_length));
      check_attributes(in.take(layout.format == kFormatV1 ? kIfaceAttrV1 : kIfaceAttrV2, "interface attributes"),
                       layout.format, entry_at + 2);
      std::uint8_t iface = in.byte("an interface address length");
      last_iface = (iface & kFlagLast) != 0;
      // Endpoint addresses travel in wireup messages, never in a worker address.
      if ((iface & kFlagHasEndpointAddress) != 0) refuse(entry_at, "a worker address with an endpoint address");
      entry.iface_address_length = in.extended(iface, kIfaceLengthMask, layout.format, "an interface address length");
      auto iface_address = in.take(entry.iface_address_length, "an interface address");
      std::memcpy(entry.iface_start.data(), iface_address.data(), std::min<std::size_t>(8, iface_address.size()));
      layout.entries.push_back(entry);
    }
  }
  if (!in.done()) refuse(in.at(), std::to_string(address.size() - in.at()) + " bytes after the last entry");
  return layout;
}

namespace {

// The shared-memory transports' two forms of an address (src/uct/base/uct_iface.c
// uct_iface_get_local_address, src/uct/sm/mm/posix/mm_posix.c, src/uct/sm/scopy/cma/cma_iface.c):
// `plain` bytes in the default namespace, `extended` with the namespace id appended, which UCX
// reads when bit `flag_bit` of the address's first word is set.
struct NamespacedForm {
  std::size_t plain = 0, extended = 0;
  std::size_t word_bytes = 8;  // the flag's word: a uint64_t, or cma's 4-byte pid_t
  int flag_bit = -1;           // -1: the transport has one form (lengths must equal ours)
};

bool is_shared_memory(std::uint16_t checksum) {
  return checksum == kPosixTransportChecksum || checksum == kSysvTransportChecksum ||
         checksum == kCmaTransportChecksum || checksum == kXpmemTransportChecksum ||
         checksum == kKnemTransportChecksum;
}

// The device address of a shared-memory transport: a system id, then the IPC namespace's id.
NamespacedForm device_form(std::uint16_t checksum) {
  return is_shared_memory(checksum) ? NamespacedForm{8, 16, 8, 63} : NamespacedForm{};
}

// The interface address: posix's segment id then the PID namespace's id (flag bit 60 of the
// segment id); cma's pid (a 4-byte pid_t) then, 8-aligned, the PID namespace's id (bit 31).
NamespacedForm iface_form(std::uint16_t checksum) {
  if (checksum == kPosixTransportChecksum) return {8, 16, 8, 60};
  if (checksum == kCmaTransportChecksum) return {4, 16, 4, 31};
  return {};
}

// Whether a peer's address part of `peer` bytes may stand beside ours of `own`: equal lengths for
// a transport of one form; for a namespaced one, ours one of its two forms and the peer's the form
// its flag announces (a set flag on the plain length would make UCX read past the address).
bool length_fits(std::size_t peer, std::size_t own, const NamespacedForm& form, const std::array<std::byte, 8>& start) {
  if (form.flag_bit < 0) return peer == own;
  if (own != form.plain && own != form.extended) return peer == own;
  std::uint64_t word = 0;  // in this host's byte order, as UCX packed it
  if (form.word_bytes == 4) {
    std::uint32_t narrow = 0;
    std::memcpy(&narrow, start.data(), 4);
    word = narrow;
  } else {
    std::memcpy(&word, start.data(), 8);
  }
  const bool flagged = ((word >> form.flag_bit) & 1u) != 0;
  return peer == (flagged ? form.extended : form.plain);
}

// UCX's TCP transport (src/uct/tcp/tcp.h): a device address is a flags byte, the address family
// and then an IPv4 or IPv6 address, or for a loopback device an 8-byte system id and a network
// namespace id (UcxQuirks::tcp_loopback_namespace_is_64_bit); the interface address is the
// 2-byte port.
bool tcp_entry_well_formed(const UcxAddressEntry& entry, const UcxQuirks& ucx) {
  constexpr std::uint8_t kLoopback = 0x01;
  constexpr std::uint8_t kFamilyInet = 2, kFamilyInet6 = 10;  // Linux's AF_INET, AF_INET6
  if (entry.iface_address_length != 2 || entry.device_address_length < 2) return false;
  std::uint8_t flags = entry.device_head[0], family = entry.device_head[1];
  if ((flags & ~kLoopback) != 0) return false;
  if (family != kFamilyInet && family != kFamilyInet6) return false;
  if ((flags & kLoopback) != 0) {
    return entry.device_address_length == 2 + 8 + (ucx.tcp_loopback_namespace_is_64_bit ? 8 : 4);
  }
  return entry.device_address_length == 2 + (family == kFamilyInet ? 4 : 16);
}

}  // namespace

void check_peer_address(std::span<const std::byte> peer, const UcxAddressLayout& own, const UcxQuirks& ucx) {
  UcxAddressLayout layout = read_address_layout(peer);
  if (layout.format != own.format) {
    throw Error(ErrorCode::kTransport, "UCX worker address in format " + std::to_string(layout.format) +
                                           ", this UCX packs format " + std::to_string(own.format));
  }
  for (const auto& entry : layout.entries) {
    bool runs_tcp = std::any_of(own.entries.begin(), own.entries.end(),
                                [](const auto& mine) { return mine.transport_checksum == kTcpTransportChecksum; });
    if (entry.transport_checksum == kTcpTransportChecksum && runs_tcp) {
      if (!tcp_entry_well_formed(entry, ucx)) {
        throw Error(ErrorCode::kTransport, "UCX worker address refused: a TCP entry with device and interface "
                                           "addresses of " + std::to_string(entry.device_address_length) + " and " +
                                               std::to_string(entry.iface_address_length) +
                                               " bytes, not in any form UCX's TCP transport packs");
      }
      continue;
    }
    bool known = false, same_lengths = false;
    const auto device = device_form(entry.transport_checksum), iface = iface_form(entry.transport_checksum);
    for (const auto& mine : own.entries) {
      if (mine.transport_checksum != entry.transport_checksum) continue;
      known = true;
      same_lengths = same_lengths ||
                     (length_fits(entry.device_address_length, mine.device_address_length, device, entry.device_start) &&
                      length_fits(entry.iface_address_length, mine.iface_address_length, iface, entry.iface_start));
    }
    if (known && !same_lengths) {
      throw Error(ErrorCode::kTransport,
                  "UCX worker address refused: transport " + std::to_string(entry.transport_checksum) +
                      " with device and interface addresses of " + std::to_string(entry.device_address_length) +
                      " and " + std::to_string(entry.iface_address_length) +
                      " bytes, which this UCX never packs for it");
    }
  }
}

}  // namespace modelcast::transport
