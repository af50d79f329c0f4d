// The check a peer's UCX worker address passes before UCX reads it (transports/ucx/address_layout.h).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include <ucs/algorithm/crc.h>

#include "child_process.h"
#include "hostile_scale.h"
#include "modelcast/error.h"
#include "transports/ucx/address_layout.h"
#include "transports/ucx/address_seal.h"
#include "transports/ucx/ucx_transport.h"

namespace modelcast::transport {
namespace {

std::vector<std::byte> live_address() {
  auto transport = make_ucx_transport();
  auto sealed = transport->address();
  return {sealed.begin() + kAddressHeader, sealed.end()};
}

std::string refusal(const std::vector<std::byte>& peer, const UcxAddressLayout& own,
                    const UcxQuirks& ucx = running_ucx_quirks()) {
  try {
    check_peer_address(peer, own, ucx);
    return "";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTransport);
    return e.what();
  }
}

TEST(AddressLayout, ReadsThisUcxsOwnAddressToItsLastByte) {
  auto address = live_address();
  auto layout = read_address_layout(address);
  ASSERT_FALSE(layout.entries.empty());
  bool has_an_interface_address = false;
  for (const auto& entry : layout.entries) has_an_interface_address |= entry.iface_address_length > 0;
  EXPECT_TRUE(has_an_interface_address);
  EXPECT_EQ(refusal(address, layout), "");
}

TEST(AddressLayout, RefusesWhatUcxWouldReadPastOrMisread) {
  auto address = live_address();
  auto own = read_address_layout(address);

  ASSERT_FALSE(address.empty());
  // A copy without the last byte (pop_back made GCC 12 warn, array-bounds, of an empty vector).
  std::vector<std::byte> truncated(address.begin(), address.end() - 1);
  EXPECT_NE(refusal(truncated, own).find("left"), std::string::npos) << refusal(truncated, own);

  auto trailing = address;
  trailing.push_back(std::byte{0});
  EXPECT_NE(refusal(trailing, own).find("after the last entry"), std::string::npos);

  auto unknown_format = address;
  unknown_format[0] = (unknown_format[0] & std::byte{0xf0}) | std::byte{0x0e};
  EXPECT_NE(refusal(unknown_format, own).find("unknown address format"), std::string::npos);

  // Another UCX's address that reads well but packs a known transport with other lengths: the
  // case that crashed the producer (cma given a zero-length interface address).
  UcxAddressLayout other = own;
  for (auto& entry : other.entries) entry.iface_address_length += 1;
  EXPECT_NE(refusal(address, other).find("never packs"), std::string::npos);

  // Entries of transports this UCX does not run are only bounds-checked.
  for (auto& entry : other.entries) entry.transport_checksum ^= 0x5a5a;
  EXPECT_EQ(refusal(address, other), "");
}

// A format-v1 worker address as UCX packs one, for devices each with one transport.
struct Device {
  std::vector<std::uint8_t> address;
  std::uint16_t checksum;
  std::size_t iface_length;
  std::vector<std::uint8_t> iface = {};  // the interface address's bytes; empty: iface_length bytes of 9
};
std::vector<std::byte> packed(const std::vector<Device>& devices) {
  std::vector<std::uint8_t> out{0x20, 1, 2, 3, 4, 5, 6, 7, 8};  // v1, worker uuid
  for (std::size_t d = 0; d < devices.size(); ++d) {
    const auto& device = devices[d];
    out.push_back(static_cast<std::uint8_t>(d));  // memory domain
    out.push_back(static_cast<std::uint8_t>(device.address.size() | (d + 1 == devices.size() ? 0x80 : 0)));
    out.insert(out.end(), device.address.begin(), device.address.end());
    out.push_back(static_cast<std::uint8_t>(device.checksum & 0xff));
    out.push_back(static_cast<std::uint8_t>(device.checksum >> 8));
    std::vector<std::uint8_t> attributes{0, 0, 0, 0, 0, 0, 0x80, 0x4e, 0, 0, 0, 0, 0x10, 0, 0, 0};  // bandwidth 1e9
    out.insert(out.end(), attributes.begin(), attributes.end());
    out.push_back(static_cast<std::uint8_t>(device.iface_length | 0x80));
    if (device.iface.empty()) {
      out.insert(out.end(), device.iface_length, 9);
    } else {
      out.insert(out.end(), device.iface.begin(), device.iface.end());
    }
  }
  std::vector<std::byte> bytes;
  for (auto b : out) bytes.push_back(static_cast<std::byte>(b));
  return bytes;
}

TEST(AddressLayout, TcpEntriesAreCheckedByTheFormsUcxsTcpPacksOthersByThisUcxsOwnLengths) {
  EXPECT_EQ(kTcpTransportChecksum, ucs_crc16_string("tcp"));
  const std::uint16_t cma = ucs_crc16_string("cma");
  // Loopback: system id and namespace id, the latter 64-bit before UCX 1.22 and 32-bit from it.
  std::vector<std::uint8_t> loopback(18, 0), loopback_122(14, 0), ipv4{0, 2, 10, 0, 0, 5}, ipv6(18, 0);
  loopback[0] = 1, loopback[1] = 2, ipv6[1] = 10;
  loopback_122[0] = 1, loopback_122[1] = 2;
  const UcxQuirks ucx_113 = ucx_quirks_for({1, 13, 1}), ucx_122 = ucx_quirks_for({1, 22, 0});
  {
    auto own = read_address_layout(packed({{loopback_122, kTcpTransportChecksum, 2}}));
    EXPECT_EQ(refusal(packed({{loopback_122, kTcpTransportChecksum, 2}}), own, ucx_122), "");
    EXPECT_NE(refusal(packed({{loopback, kTcpTransportChecksum, 2}}), own, ucx_122).find("TCP entry"),
              std::string::npos);
    EXPECT_NE(refusal(packed({{loopback_122, kTcpTransportChecksum, 2}}), own, ucx_113).find("TCP entry"),
              std::string::npos);
  }
  // The rest as UCX 1.13 packs it.
  auto own = read_address_layout(packed({{loopback, kTcpTransportChecksum, 2}, {{7, 7, 7, 7, 7, 7, 7, 7}, cma, 8}}));

  // A peer whose TCP device is not a loopback one (another host, or eth0 beside lo) packs
  // another length than ours; so does IPv6. Both are TCP's own forms.
  EXPECT_EQ(refusal(packed({{ipv4, kTcpTransportChecksum, 2}}), own, ucx_113), "");
  EXPECT_EQ(refusal(packed({{ipv6, kTcpTransportChecksum, 2}}), own, ucx_113), "");
  EXPECT_EQ(refusal(packed({{loopback, kTcpTransportChecksum, 2}}), own, ucx_113), "");

  auto bad_family = ipv4;
  bad_family[1] = 7;
  EXPECT_NE(refusal(packed({{bad_family, kTcpTransportChecksum, 2}}), own, ucx_113).find("TCP entry"),
            std::string::npos);
  auto short_loopback = ipv4;
  short_loopback[0] = 1;  // says loopback, carries an IPv4 address's length
  EXPECT_NE(refusal(packed({{short_loopback, kTcpTransportChecksum, 2}}), own, ucx_113).find("TCP entry"),
            std::string::npos);
  EXPECT_NE(refusal(packed({{ipv4, kTcpTransportChecksum, 0}}), own, ucx_113).find("TCP entry"), std::string::npos);

  // cma with a zero-length interface address: UCX hands cma a NULL address (the crash).
  EXPECT_NE(refusal(packed({{{7, 7, 7, 7, 7, 7, 7, 7}, cma, 0}}), own, ucx_113).find("never packs"), std::string::npos);
  EXPECT_EQ(refusal(packed({{{7, 7, 7, 7, 7, 7, 7, 7}, cma, 8}}), own, ucx_113), "");
  // A transport we do not run: only its bounds matter.
  EXPECT_EQ(refusal(packed({{{1, 2, 3}, 0x4242, 0}}), own, ucx_113), "");
}

// UCX's shared-memory transports append a namespace id when their process runs outside the
// host's default namespaces (a container), and say so with a flag in the address's first word: a
// consumer in another PID namespace packs posix's interface address in 16 bytes where ours has 8,
// and was refused ("never packs"), so no container could join a producer on its host. The other
// form is accepted when its flag agrees with its length; a flag on the short form would make UCX
// read the id past the address, and is refused.
TEST(AddressLayout, SharedMemoryAddressesOfAnotherNamespaceAreAcceptedWhenTheirFlagAgrees) {
  EXPECT_EQ(kPosixTransportChecksum, ucs_crc16_string("posix"));
  EXPECT_EQ(kSysvTransportChecksum, ucs_crc16_string("sysv"));
  EXPECT_EQ(kCmaTransportChecksum, ucs_crc16_string("cma"));
  EXPECT_EQ(kXpmemTransportChecksum, ucs_crc16_string("xpmem"));
  EXPECT_EQ(kKnemTransportChecksum, ucs_crc16_string("knem"));
  // `length` bytes, 9 but for bit `flag` of the first `word` bytes (host order, as UCX packs).
  auto with_flag = [](std::size_t length, std::size_t word, int flag, bool set) {
    std::vector<std::uint8_t> bytes(length, 0);
    if (set) bytes[static_cast<std::size_t>(flag) / 8] = static_cast<std::uint8_t>(1u << (flag % 8));
    EXPECT_LT(static_cast<std::size_t>(flag) / 8, word);
    return bytes;
  };
  const std::vector<std::uint8_t> system_id{7, 7, 7, 7, 7, 7, 7, 7};
  // This process in the default namespaces, as UCX 1.13 packs it: posix's segment id (8 bytes),
  // cma's pid (4), sysv's segment id (8), each device a system id (8).
  auto own = read_address_layout(packed({{system_id, kPosixTransportChecksum, 8},
                                         {system_id, kCmaTransportChecksum, 4},
                                         {system_id, kSysvTransportChecksum, 8}}));
  auto posix = [&](std::size_t length, bool flag) {
    return refusal(packed({{system_id, kPosixTransportChecksum, length, with_flag(length, 8, 60, flag)}}), own);
  };
  EXPECT_EQ(posix(16, true), "");   // another PID namespace: the segment id, then its id
  EXPECT_EQ(posix(8, false), "");
  EXPECT_NE(posix(16, false).find("never packs"), std::string::npos);
  EXPECT_NE(posix(8, true).find("never packs"), std::string::npos);
  auto cma = [&](std::size_t length, bool flag) {
    return refusal(packed({{system_id, kCmaTransportChecksum, length, with_flag(length, 4, 31, flag)}}), own);
  };
  EXPECT_EQ(cma(16, true), "");  // a 4-byte pid, then (8-aligned) the PID namespace's id
  EXPECT_NE(cma(16, false).find("never packs"), std::string::npos);
  EXPECT_NE(cma(4, true).find("never packs"), std::string::npos);
  EXPECT_NE(cma(8, true).find("never packs"), std::string::npos);
  // Every shared-memory device address: the system id, then (bit 63) the IPC namespace's id.
  auto sysv_device = [&](std::size_t length, bool flag, std::size_t iface) {
    return refusal(packed({{with_flag(length, 8, 63, flag), kSysvTransportChecksum, iface}}), own);
  };
  EXPECT_EQ(sysv_device(16, true, 8), "");
  EXPECT_NE(sysv_device(16, false, 8).find("never packs"), std::string::npos);
  EXPECT_NE(sysv_device(8, true, 8).find("never packs"), std::string::npos);
  // sysv's interface address has one form.
  EXPECT_NE(sysv_device(8, false, 16).find("never packs"), std::string::npos);
}

// UCX scores transports from an address's overhead, bandwidth and latency and asserts that no
// score is negative: one random byte that made a latency negative aborted the producer (found by
// bench/run.sh hostile, 4,000 byte replacements). Negative overhead or latency is refused; a
// negative bandwidth is format v1's way of saying "shared", and passes.
TEST(AddressLayout, ANegativeOverheadOrLatencyIsRefusedANegativeSharedBandwidthIsNot) {
  const std::uint16_t cma = ucs_crc16_string("cma");
  const std::vector<std::uint8_t> device{7, 7, 7, 7, 7, 7, 7, 7};
  auto own = read_address_layout(packed({{device, cma, 8}}));
  const std::size_t attributes = 9 + 2 + device.size() + 2;  // header, domain and length, device, checksum
  auto with = [&](std::size_t field, float value) {
    auto address = packed({{device, cma, 8}});
    std::memcpy(address.data() + attributes + 4 * field, &value, sizeof value);
    return refusal(address, own);
  };
  EXPECT_NE(with(0, -1e-6f).find("overhead or latency is negative"), std::string::npos) << with(0, -1e-6f);
  EXPECT_NE(with(2, -3e-7f).find("overhead or latency is negative"), std::string::npos) << with(2, -3e-7f);
  EXPECT_EQ(with(1, -1e9f), "");
  EXPECT_EQ(with(2, 3e-7f), "");
}

TEST(AddressLayout, AProducerSurvivesEverySingleBitFlipAndRandomByteOfALiveAddress) {
  // Each mutation goes to a real ucp_ep_create in a child process; the child says which it is
  // trying, so a crash names its mutation and the run goes on from the next one.
  for (const char* detect_failure : {"0", "1"}) {
    std::size_t next = 0, total = 0, accepted = 0, refused = 0;
    std::vector<std::string> crashes;
    bool original_accepted = false;
    for (int run = 0; run < 64; ++run) {
      testing_support::ChildProcess peer({MODELCAST_ADDRESS_MUTATION_PEER, std::to_string(next),
                                          std::to_string(400 * testing_support::hostile_scale()), "7",
                                          detect_failure});
      int status = peer.wait();
      std::string last_try;
      for (const auto& line : peer.lines()) {
        if (line.rfind("mutations ", 0) == 0) total = std::stoul(line.substr(10));
        if (line.rfind("try ", 0) == 0) last_try = line.substr(4);
        if (line.rfind("ok ", 0) == 0) ++accepted;
        if (line.rfind("refused ", 0) == 0) ++refused;
        original_accepted |= line == "ok original";
      }
      if (status == 0) break;
      ASSERT_FALSE(last_try.empty() || last_try == "original") << "the peer failed before any mutation: " << status;
      crashes.push_back(last_try + " (status " + std::to_string(status) + ")");
      next = std::stoul(last_try) + 1;
    }
    EXPECT_TRUE(original_accepted);
    EXPECT_TRUE(crashes.empty()) << "detect_failure=" << detect_failure << ": " << crashes.size()
                                 << " mutations killed the producer side, first: " << crashes.front();
    EXPECT_EQ(accepted + refused, total + 1);  // every mutation answered, and the original
    EXPECT_GT(refused, 50u);  // the check and UCX both answered some
    RecordProperty(std::string("accepted_") + detect_failure, static_cast<int>(accepted));
  }
}

}  // namespace
}  // namespace modelcast::transport
