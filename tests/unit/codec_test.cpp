#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include <msgpack.hpp>

#include "core/transfer/chunk_plan.h"
#include "core/wire/connect_host.h"
#include "core/wire/protocol.h"
#include "core/wire/zmq_channel.h"
#include "modelcast/error.h"
#include "join_request.h"

namespace modelcast::protocol {
namespace {

Manifest sample_manifest() {
  Manifest m;
  m.model = "m";
  m.incarnation = 0xABCDEF0123456789ull;
  m.version = 42;
  m.step = -7;
  m.publish_time_ns = 1234567890123;
  m.metadata = {{"lr", "0.1"}, {"epoch", "3"}};
  m.integrity = true;
  m.total_bytes = 512;
  TensorEntry t;
  t.spec = {"w", DType::kBF16, {4, 8}, MemoryKind::kHost, 0};
  t.offset = 256;
  t.size = 64;
  t.digest = 0xDEADBEEFCAFEF00Dull;
  m.block_bytes = 256;
  m.block_digests = {0x1111, 0x2222};
  m.tensors.push_back(t);
  return m;
}

TEST(Codec, RoundTripsEveryMessageType) {
  std::vector<std::byte> address = {std::byte{1}, std::byte{0}, std::byte{255}};
  std::vector<std::byte> signature(64, std::byte{7});
  FetchReply reply{true, Refusal::kNone, "", 9, 1u << 20, true, 3, sample_manifest(), signature, {}, "relay-7"};
  auto join_request = modelcast::testing::ucx_join("model", "consumer", address, "boot-id", 0x1234);
  join_request.offers[0].capabilities.one_sided = true;  // a flag that is not the default
  join_request.memory = transport::MemoryLocation::cuda(3);
  join_request.process = 0xfeedface;
  join_request.serves_peers = true;
  RelayOrder order{21, 22, 23, 24, 65536, {0, 3, 7}, address, false};
  std::vector<Message> messages = {
      Announce{1, 2, 3, 4, std::nullopt},
      join_request,
      JoinReply{false, Refusal::kNoTransport, "no", 5, 6, "loopback", DeliveryPath::kStaged},
      FetchRequest{7, 8, 9, 6},
      reply,
      Ack{10, 11, 12, false, "digest", RelayFault::kBadBlock},
      Ping{13},
      Digests{14, 15, {16, 17}, {18, 19, 20}, signature},
      order,
      RelayCancel{25, 26, true},
      RelayFailed{27, 28, "gone"},
      RelayOffer{29, 30, address},
      Leave{31},
  };
  for (const auto& message : messages) {
    auto decoded = decode(encode(message));
    ASSERT_EQ(decoded.index(), message.index());
  }
  auto join = std::get<JoinRequest>(decode(encode(messages[1])));
  ASSERT_EQ(join.offers.size(), 1u);
  EXPECT_EQ(join.offers[0].name, "ucx");
  EXPECT_EQ(join.offers[0].address, address);
  EXPECT_EQ(join.offers[0].capabilities.reach, transport::Reach::kNetwork);
  EXPECT_TRUE(join.offers[0].capabilities.one_sided);
  EXPECT_TRUE(join.offers[0].capabilities.moves(MemoryKind::kHost, MemoryKind::kHost));
  EXPECT_FALSE(join.offers[0].capabilities.moves(MemoryKind::kCuda, MemoryKind::kHost));
  EXPECT_EQ(join.host_id, "boot-id");
  EXPECT_EQ(join.memory, transport::MemoryLocation::cuda(3));
  EXPECT_EQ(join.process, 0xfeedfaceu);
  EXPECT_EQ(join.session, 0x1234u);
  EXPECT_TRUE(join.serves_peers);
  EXPECT_EQ(std::get<FetchReply>(decode(encode(reply))).relay, "relay-7");
  EXPECT_EQ(std::get<Ack>(decode(encode(messages[5]))).relay_fault, RelayFault::kBadBlock);
  EXPECT_FALSE(std::get<Ack>(decode(encode(messages[5]))).again);
  EXPECT_TRUE(std::get<Ack>(decode(encode(Ack{10, 11, 12, false, "timed out", RelayFault::kNone, true}))).again);
  auto relay_order = std::get<RelayOrder>(decode(encode(messages[8])));
  EXPECT_EQ(relay_order.order_id, 22u);
  EXPECT_EQ(relay_order.fetch_id, 24u);
  EXPECT_EQ(relay_order.block_bytes, 65536u);
  EXPECT_EQ(relay_order.blocks, (std::vector<std::uint32_t>{0, 3, 7}));
  EXPECT_EQ(relay_order.peer_address, address);
  EXPECT_FALSE(relay_order.detect_failure);
  EXPECT_FALSE(relay_order.export_region);
  order.export_region = true;  // a one-sided route's order: pin and export, send nothing
  EXPECT_TRUE(std::get<RelayOrder>(decode(encode(order))).export_region);
  EXPECT_TRUE(std::get<RelayCancel>(decode(encode(messages[9]))).delivered);
  EXPECT_FALSE(std::get<RelayCancel>(decode(encode(RelayCancel{25, 26, false}))).delivered);
  EXPECT_EQ(std::get<RelayFailed>(decode(encode(messages[10]))).error, "gone");
  auto offer = std::get<RelayOffer>(decode(encode(messages[11])));
  EXPECT_EQ(offer.order_id, 30u);
  EXPECT_EQ(offer.region, address);
  EXPECT_EQ(std::get<Leave>(decode(encode(messages[12]))).incarnation, 31u);
  auto join_reply = std::get<JoinReply>(decode(encode(messages[2])));
  EXPECT_EQ(join_reply.refusal, Refusal::kNoTransport);
  EXPECT_EQ(join_reply.transport, "loopback");
  EXPECT_EQ(join_reply.path, DeliveryPath::kStaged);
  EXPECT_EQ(join_reply.incarnation, 5u);
  EXPECT_EQ(join_reply.latest_version, 6u);
  EXPECT_EQ(join_reply.model_bytes, 0u);  // before the producer prepared: not sent at all
  JoinReply sized{true, Refusal::kNone, "", 5, 6, "loopback", DeliveryPath::kHostUcx};
  sized.model_bytes = 258276608;
  EXPECT_EQ(std::get<JoinReply>(decode(encode(sized))).model_bytes, 258276608u);
  EXPECT_EQ(std::get<FetchReply>(decode(encode(reply))).signature, signature);
  EXPECT_TRUE(std::get<FetchReply>(decode(encode(reply))).region.empty());
  reply.region = address;  // a one-sided route's slot export travels with the reply
  EXPECT_EQ(std::get<FetchReply>(decode(encode(reply))).region, address);
  reply.region.clear();
  auto got = std::get<FetchReply>(decode(encode(reply))).manifest;
  auto want = sample_manifest();
  EXPECT_EQ(got.incarnation, want.incarnation);
  EXPECT_EQ(got.step, want.step);
  EXPECT_EQ(got.publish_time_ns, want.publish_time_ns);
  EXPECT_EQ(got.metadata, want.metadata);
  ASSERT_EQ(got.tensors.size(), 1u);
  EXPECT_TRUE(got.tensors[0].spec.same_layout(want.tensors[0].spec));
  EXPECT_EQ(got.tensors[0].offset, 256u);
  EXPECT_EQ(got.tensors[0].digest, want.tensors[0].digest);
  EXPECT_EQ(got.block_bytes, want.block_bytes);
  EXPECT_EQ(got.block_digests, want.block_digests);
  EXPECT_EQ(std::get<FetchReply>(decode(encode(reply))).base_version, 3u);
  // A rank's manifest carries its rank and its run's start; one producer's, neither.
  EXPECT_EQ(got.rank_count, 1u);
  EXPECT_EQ(got.start_time_ns, 0);
  reply.manifest.rank = 2;
  reply.manifest.rank_count = 3;
  reply.manifest.start_time_ns = 1234567000000;
  auto ranked = std::get<FetchReply>(decode(encode(reply))).manifest;
  EXPECT_EQ(ranked.rank, 2u);
  EXPECT_EQ(ranked.rank_count, 3u);
  EXPECT_EQ(ranked.start_time_ns, 1234567000000);
  EXPECT_EQ(ranked.run_id, "");
  reply.manifest.run_id = "job.7";
  EXPECT_EQ(std::get<FetchReply>(decode(encode(reply))).manifest.run_id, "job.7");
  reply.manifest = sample_manifest();
  // Group membership and state travel only where they are set.
  EXPECT_TRUE(join.group.empty());
  EXPECT_FALSE(std::get<Announce>(decode(encode(messages[0]))).group.has_value());
  join_request.group = "tp-server";
  join_request.group_size = 4;
  auto member = std::get<JoinRequest>(decode(encode(join_request)));
  EXPECT_EQ(member.group, "tp-server");
  EXPECT_EQ(member.group_size, 4u);
  Announce to_member{1, 9, 3, 4, GroupState{7, 3}};
  auto heard = std::get<Announce>(decode(encode(to_member)));
  ASSERT_TRUE(heard.group.has_value());
  EXPECT_EQ(heard.version, 9u);
  EXPECT_EQ(heard.group->committed, 7u);
  EXPECT_EQ(heard.group->members, 3u);
  EXPECT_EQ(heard.group->given_up, 0u);
  to_member.group->given_up = 8;
  EXPECT_EQ(std::get<Announce>(decode(encode(to_member))).group->given_up, 8u);
  // A producer's last word travels only when said, to members as to other consumers.
  EXPECT_FALSE(std::get<Announce>(decode(encode(messages[0]))).stopping);
  EXPECT_FALSE(heard.stopping);
  to_member.stopping = true;
  auto last = std::get<Announce>(decode(encode(to_member)));
  EXPECT_TRUE(last.stopping);
  EXPECT_EQ(last.group->given_up, 8u);
  Announce last_heartbeat{1, 2, 3, 4, std::nullopt};
  last_heartbeat.stopping = true;
  EXPECT_TRUE(std::get<Announce>(decode(encode(last_heartbeat))).stopping);
  EXPECT_EQ(std::get<FetchRequest>(decode(encode(messages[3]))).base_version, 6u);
  auto digests = std::get<Digests>(decode(encode(messages[7])));
  EXPECT_EQ(digests.digests, (std::vector<std::uint64_t>{16, 17}));
  EXPECT_EQ(digests.block_digests, (std::vector<std::uint64_t>{18, 19, 20}));
  EXPECT_EQ(digests.signature, signature);
  auto ack = std::get<Ack>(decode(encode(messages[5])));
  EXPECT_EQ(ack.error, "digest");
  EXPECT_FALSE(ack.ok);
}

TEST(Codec, TheBlockListsOfTheLargestModelsDecodeWithinTheDefaultLimits) {
  // With small chunks, a large model was cut into up to 2^20 blocks, and a list of more than
  // max_array block digests was refused by every consumer: the version could never arrive.
  for (const std::uint64_t total : {(std::uint64_t{8} << 30) + 1, std::uint64_t{1} << 40}) {
    const auto plan = transfer::producer_plan(total, transfer::kMinChunkBytes);
    ASSERT_LE(plan.count(), DecodeLimits{}.max_array) << total << " bytes";
    FetchReply reply;
    reply.ok = true;
    reply.chunk_bytes = plan.chunk_bytes;
    reply.manifest = sample_manifest();
    reply.manifest.total_bytes = total;
    reply.manifest.block_bytes = plan.chunk_bytes;
    reply.manifest.block_digests.assign(plan.count(), 0x0123456789ABCDEFull);
    EXPECT_EQ(std::get<FetchReply>(decode(encode(reply))).manifest.block_digests.size(), plan.count());
    Digests digests{1, 42, {7}, reply.manifest.block_digests, {}};
    EXPECT_EQ(std::get<Digests>(decode(encode(digests))).block_digests.size(), plan.count());
  }
}

void expect_protocol_error(std::span<const std::byte> bytes, const std::string& fragment,
                           const DecodeLimits& limits = {}) {
  try {
    decode(bytes, limits);
    FAIL() << "decoded a bad message; expected an error mentioning '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kProtocol);
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(Codec, EveryTruncationIsRejected) {
  auto bytes = encode(FetchReply{true, Refusal::kNone, "", 1, 1024, false, 0, sample_manifest(), {}, {}, {}});
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_THROW(decode(std::span(bytes.data(), n)), Error) << "prefix of " << n << " bytes";
  }
  expect_protocol_error(std::span(bytes.data(), bytes.size() / 2), "truncated");
}

template <typename... Items>
std::vector<std::byte> pack_envelope(Items... items) {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(&buffer);
  pk.pack_array(sizeof...(items));
  (pk.pack(items), ...);
  auto* p = reinterpret_cast<const std::byte*>(buffer.data());
  return {p, p + buffer.size()};
}

TEST(Codec, RejectsForeignAndFutureMessages) {
  std::map<std::string, int> body{{"inc", 1}};
  expect_protocol_error(pack_envelope(0x12345678u, kVersion, std::uint8_t{1}, body), "magic");
  expect_protocol_error(pack_envelope(kMagic, std::uint16_t{kVersion + 1}, std::uint8_t{1}, body),
                        "unsupported protocol version " + std::to_string(kVersion + 1));
  expect_protocol_error(pack_envelope(kMagic, kVersion, std::uint8_t{99}, body), "unknown message type 99");
  expect_protocol_error(pack_envelope(kMagic, kVersion), "envelope");
  expect_protocol_error(pack_envelope(kMagic, kVersion, std::uint8_t{1}, body), "missing field 'ver'");
  std::map<std::string, std::string> wrong{{"inc", "x"}, {"ver", "y"}, {"step", "z"}, {"t_pub", "w"}};
  expect_protocol_error(pack_envelope(kMagic, kVersion, std::uint8_t{1}, wrong), "wrong type");
  std::vector<std::byte> garbage(64, std::byte{0xC1});  // 0xC1 is never valid msgpack
  expect_protocol_error(garbage, "malformed");
  auto good = encode(Announce{1, 2, 3, 4, std::nullopt});
  good.push_back(std::byte{0});
  expect_protocol_error(good, "trailing");
  // An unknown delivery path is named in the message that carried it.
  auto join_request = modelcast::testing::ucx_join("model", "consumer", {std::byte{1}}, "boot-id", 1);
  join_request.path = static_cast<modelcast::DeliveryPath>(9);
  expect_protocol_error(encode(join_request), "join request: unknown delivery path 9");
  expect_protocol_error(encode(JoinReply{true, Refusal::kNone, "", 5, 6, "ucx", static_cast<modelcast::DeliveryPath>(9)}),
                        "join reply: unknown delivery path 9");
}

// Announcements travel with the replies now (protocol 6): the join reply names no announcement
// endpoint, and a consumer of protocol 5 asking to join is answered with a refusal in its own
// protocol's words, which it decodes and reports, instead of silence.
TEST(Codec, AConsumerOfTheLastProtocolIsToldWhyItCannotJoin) {
  EXPECT_EQ(kVersion, 8);
  auto join = encode(modelcast::testing::ucx_join("model", "old", {std::byte{1}}, "boot", 1));
  EXPECT_EQ(foreign_version(join), std::nullopt);  // this build's own
  auto old = join;
  old[6] = std::byte{5};  // the envelope: fixarray, magic as uint32 (5 bytes), then the version
  expect_protocol_error(old, "unsupported protocol version 5");
  ASSERT_EQ(foreign_version(old), std::optional<std::uint16_t>(5));
  EXPECT_EQ(foreign_version(pack_envelope(kMagic, std::uint16_t{300}, std::uint8_t{2}, 0)),
            std::optional<std::uint16_t>(300));
  EXPECT_EQ(foreign_version(pack_envelope(0x12345678u, std::uint16_t{5}, std::uint8_t{2}, 0)), std::nullopt);
  EXPECT_EQ(foreign_version(std::vector<std::byte>(3, std::byte{0x94})), std::nullopt);

  EXPECT_EQ(encode_version_refusal(4), std::nullopt);  // a join reply this build cannot write
  EXPECT_EQ(encode_version_refusal(9), std::nullopt);
  auto refusal = encode_version_refusal(5);
  ASSERT_TRUE(refusal);
  // Exactly protocol 5's join reply: its envelope and its eight fields, the announcement
  // endpoint among them (its decoder requires every one).
  auto handle = msgpack::unpack(reinterpret_cast<const char*>(refusal->data()), refusal->size());
  const auto& root = handle.get();
  ASSERT_EQ(root.type, msgpack::type::ARRAY);
  ASSERT_EQ(root.via.array.size, 4u);
  EXPECT_EQ(root.via.array.ptr[0].as<std::uint32_t>(), kMagic);
  EXPECT_EQ(root.via.array.ptr[1].as<std::uint16_t>(), 5);
  EXPECT_EQ(root.via.array.ptr[2].as<std::uint8_t>(), 3);  // JoinReply
  auto body = root.via.array.ptr[3].as<std::map<std::string, msgpack::object>>();
  std::set<std::string> keys;
  for (const auto& [key, value] : body) keys.insert(key);
  EXPECT_EQ(keys, (std::set<std::string>{"ok", "why", "err", "inc", "pub", "latest", "transport", "path"}));
  EXPECT_FALSE(body.at("ok").as<bool>());
  auto error = body.at("err").as<std::string>();
  EXPECT_NE(error.find("protocol version 8"), std::string::npos) << error;
  EXPECT_NE(error.find("unsupported protocol version 5"), std::string::npos) << error;

  // Protocol 6's join reply has this build's fields: it is one, in a protocol-6 envelope.
  auto six = encode_version_refusal(6);
  ASSERT_TRUE(six);
  EXPECT_EQ(foreign_version(*six), std::optional<std::uint16_t>(6));
  auto as_this = *six;
  as_this[6] = static_cast<std::byte>(kVersion);
  auto reply = std::get<JoinReply>(decode(as_this));
  EXPECT_FALSE(reply.ok);
  EXPECT_NE(reply.error.find("unsupported protocol version 6"), std::string::npos) << reply.error;
  // And protocol 7's (before Leave and relays read over CUDA IPC).
  auto seven = encode_version_refusal(7);
  ASSERT_TRUE(seven);
  EXPECT_EQ(foreign_version(*seven), std::optional<std::uint16_t>(7));
}

std::vector<std::byte> hex_bytes(std::initializer_list<unsigned> values) {
  std::vector<std::byte> bytes;
  for (auto v : values) bytes.push_back(static_cast<std::byte>(v));
  return bytes;
}

// msgpack-c reserves room for a container's declared size before reading it: these once
// ended the process with std::bad_alloc (a 5-byte message sent to the control endpoint).
TEST(Codec, ContainerBombsAreProtocolErrorsNotAllocations) {
  expect_protocol_error(hex_bytes({0xdd, 0xff, 0xff, 0xff, 0xff}), "limits");  // array32 of 2^32-1
  expect_protocol_error(hex_bytes({0xdf, 0xff, 0xff, 0xff, 0xff}), "limits");  // map32 of 2^32-1
  // Strings and binaries are read in place, so a huge declared one is a truncation.
  expect_protocol_error(hex_bytes({0xc6, 0xff, 0xff, 0xff, 0xff}), "truncated");  // bin32 of 4 GiB
  expect_protocol_error(hex_bytes({0xdb, 0xff, 0xff, 0xff, 0xff}), "truncated");  // str32 of 4 GiB
  // The same bomb inside a well-formed envelope, where a manifest's tensors would be.
  auto envelope = pack_envelope(kMagic, kVersion, std::uint8_t{5});
  envelope[0] = std::byte{0x94};  // four elements: the fourth is the bomb
  for (auto b : {0xdd, 0xff, 0xff, 0xff, 0xff}) envelope.push_back(static_cast<std::byte>(b));
  expect_protocol_error(envelope, "limits");
  // Nested containers each declaring the most the limits allow, none filled: each level would
  // reserve 3 MiB before the decode finds the message truncated (43 bytes made 29 MB). A size
  // that the rest of the message cannot hold is refused before anything is reserved.
  auto nested = pack_envelope(kMagic, kVersion, std::uint8_t{1});
  nested[0] = std::byte{0x94};
  for (int level = 0; level < 7; ++level) {
    for (auto b : {0xdd, 0x00, 0x02, 0x00, 0x00}) nested.push_back(static_cast<std::byte>(b));  // array32 of 2^17
  }
  expect_protocol_error(nested, "limits");
  expect_protocol_error(nested, "limits", kRequestLimits);
  // Deep nesting is refused, not recursed into.
  std::vector<std::byte> deep(1000, std::byte{0x91});
  deep.push_back(std::byte{0x00});
  expect_protocol_error(deep, "limits");
}

TEST(Codec, MessagesBeyondTheCallersLimitsAreRefused) {
  auto bytes = encode(FetchReply{true, Refusal::kNone, "", 1, 1024, false, 0, sample_manifest(), {}, {}, {}});
  DecodeLimits small;
  small.max_message_bytes = bytes.size() - 1;
  EXPECT_NO_THROW(decode(bytes));
  EXPECT_THROW(decode(bytes, small), Error);
  DecodeLimits few_tensors;
  few_tensors.max_map = 2;  // the manifest's metadata map has two entries; its body maps more
  EXPECT_THROW(decode(bytes, few_tensors), Error);
}

// A peer's words reach errors and logs: a newline in them would forge a log line, an escape
// sequence drive a terminal, a megabyte make a megabyte line. Decoding hands them over shown.
TEST(Codec, APeersTextIsDecodedPrintableAndCut) {
  const std::string forged = "refused\n[modelcast.consumer] [info] joined\x1b[2J \\x0a\xc3\xa9";
  const std::string shown = "refused\\x0a[modelcast.consumer] [info] joined\\x1b[2J \\x0a\\xc3\\xa9";
  const std::string huge(1u << 19, 'e');
  auto printable = [](const std::string& text) {
    return std::all_of(text.begin(), text.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
  };
  for (const std::string& text : {forged, huge}) {
    SCOPED_TRACE(text.substr(0, 40));
    const bool cut = text.size() > kShownPeerTextBytes;
    auto check = [&](const std::string& decoded) {
      EXPECT_TRUE(printable(decoded)) << decoded;
      if (cut) {
        EXPECT_EQ(decoded, text.substr(0, kShownPeerTextBytes) + "...");
      } else {
        EXPECT_EQ(decoded, shown);  // backslashes as sent: a name the peer escaped reads the same
      }
    };
    check(std::get<JoinReply>(decode(encode(JoinReply{false, Refusal::kBadRequest, text, 1, 0, "ucx"}))).error);
    FetchReply reply{false, Refusal::kNotHeld, text, 9, 0, false, 0, {}, {}, {}, text};
    auto fetch = std::get<FetchReply>(decode(encode(reply)));
    check(fetch.error);
    check(fetch.relay);
    check(std::get<Ack>(decode(encode(Ack{1, 2, 3, false, text, RelayFault::kNone}))).error);
    check(std::get<RelayFailed>(decode(encode(RelayFailed{1, 2, text}))).error);
  }
}

// Random bytes are either a message or a protocol error: never another exception, never a crash.
TEST(Codec, RandomBytesNeverEscapeAsAnythingButProtocolErrors) {
  std::uint64_t state = 0x9E3779B97F4A7C15ull;
  auto next = [&] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  auto seed = encode(FetchReply{true, Refusal::kNone, "", 1, 1024, false, 0, sample_manifest(), {}, {}, {}});
  for (int i = 0; i < 20000; ++i) {
    std::vector<std::byte> bytes = seed;
    int flips = 1 + static_cast<int>(next() % 8);
    for (int f = 0; f < flips; ++f) bytes[next() % bytes.size()] = static_cast<std::byte>(next());
    if (next() % 4 == 0) bytes.resize(next() % bytes.size());
    try {
      decode(bytes);
    } catch (const Error& e) {
      ASSERT_EQ(e.code(), ErrorCode::kProtocol);
    }
  }
}

// Plaintext control planes are allowed only where they reach this machine alone.
TEST(LocalEndpoint, IsExactlyLoopbackOrIpc) {
  for (const char* local : {"ipc:///tmp/x.sock", "tcp://127.0.0.1:7000", "tcp://127.255.0.9:1", "tcp://localhost:7",
                            "tcp://[::1]:7000"}) {
    EXPECT_TRUE(wire::is_local_endpoint(local)) << local;
  }
  for (const char* remote : {"tcp://127.0.0.1.attacker.example:7000", "tcp://127.evil:7000", "tcp://1270.0.0.1:7",
                             "tcp://10.0.0.5:7000", "tcp://128.0.0.1:7000", "tcp://127.0.0.1", "inproc://x"}) {
    EXPECT_FALSE(wire::is_local_endpoint(remote)) << remote;
  }
}

// A host written as an address must read as one (it was taken as a name to resolve, and refused
// as "on another host"); what the resolver or ZeroMQ reads is left alone.
TEST(ConnectHost, RefusesOnlyWhatNoResolverReads) {
  for (const char* fine : {"tcp://127.0.0.1:7", "tcp://127.1:7", "tcp://1234:7", "tcp://localhost:7", "tcp://10.0.0.5:7",
                           "tcp://[::1]:7", "tcp://[fe80::1%eth0]:7", "tcp://[::ffff:127.0.0.1]:7",
                           "tcp://127.0.0.1:0;127.0.0.1:7", "tcp://eth0;10.0.0.5:7", "tcp://[::1];[::1]:7",
                           "tcp://trainer-7.cluster.local:7", "ipc:///tmp/x.sock"}) {
    EXPECT_FALSE(wire::connect_host_problem(fine)) << fine << ": " << *wire::connect_host_problem(fine);
  }
  for (const char* refused : {"tcp://256.1.1.1:7", "tcp://1.2.3.4.5:7", "tcp://[::1:7", "tcp://[::g]:7", "tcp://[fe80::1%]:7",
                              "tcp://[]:7", "tcp://:7", "tcp://*:7", "tcp://0.0.0.0:7", "tcp://[::]:7", "tcp://::1:7"}) {
    EXPECT_TRUE(wire::connect_host_problem(refused)) << refused;
  }
}

// What the producer's service loop relies on when it announces to every joined consumer over its
// ROUTER: a consumer that reads nothing fills its queue, and from then on what is sent to it is
// dropped at once; the loop never waits for it, and the messages to others still go.
TEST(RouterSend, APeerThatReadsNothingHasMessagesDroppedNotWaitedFor) {
  zmq::context_t context;
  zmq::socket_t router(context, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 0);
  router.set(zmq::sockopt::router_mandatory, false);  // as the producer's
  router.set(zmq::sockopt::sndhwm, 10);
  router.bind("inproc://router-send");
  zmq::socket_t stuck(context, zmq::socket_type::dealer), reader(context, zmq::socket_type::dealer);
  for (auto* dealer : {&stuck, &reader}) {
    dealer->set(zmq::sockopt::linger, 0);
    dealer->set(zmq::sockopt::rcvhwm, 10);
    dealer->connect("inproc://router-send");
    wire::send(*dealer, Ping{1});
  }
  std::string stuck_id, reader_id;
  for (auto* id : {&stuck_id, &reader_id}) {
    zmq::pollitem_t item{router.handle(), 0, ZMQ_POLLIN, 0};
    ASSERT_EQ(zmq::poll(&item, 1, std::chrono::seconds(5)), 1);
    auto parts = wire::receive(router);
    ASSERT_TRUE(parts && parts->size() == 2);
    *id = (*parts)[0].to_string();
  }
  const auto started = std::chrono::steady_clock::now();
  std::size_t read = 0;
  for (std::uint64_t i = 1; i <= 10000; ++i) {
    wire::send(router, Announce{1, i, 0, 0, std::nullopt}, &stuck_id);
    if (i % 100 != 0) continue;
    // ZeroMQ hears that a peer has read (and has room again) when the socket processes its
    // commands, as the producer's loop does each time it polls.
    (void)router.get(zmq::sockopt::events);
    wire::send(router, Announce{1, i, 0, 0, std::nullopt}, &reader_id);
    zmq::pollitem_t item{reader.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, std::chrono::seconds(1)) == 1 && wire::receive(reader)) read++;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5));
  EXPECT_EQ(read, 100u) << "a peer that reads lost messages to one that does not";
  std::size_t queued = 0;
  while (wire::receive(stuck)) queued++;
  EXPECT_GT(queued, 0u);
  EXPECT_LE(queued, 40u) << "the stuck peer's queue grew past its high-water marks";
}

}  // namespace
}  // namespace modelcast::protocol
