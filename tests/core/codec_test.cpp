#include <gtest/gtest.h>

#include <msgpack.hpp>

#include "core/protocol.h"
#include "modelcast/error.h"

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
  m.tensors.push_back(t);
  return m;
}

TEST(Codec, RoundTripsEveryMessageType) {
  std::vector<std::byte> address = {std::byte{1}, std::byte{0}, std::byte{255}};
  FetchReply reply{true, "", 9, 1u << 20, true, sample_manifest()};
  std::vector<Message> messages = {
      Announce{1, 2, 3, 4},
      JoinRequest{"model", "consumer", address, "boot-id"},
      JoinReply{false, "no", 5, "tcp://127.0.0.1:1", 6, "ucx"},
      FetchRequest{7, 8, 9},
      reply,
      Ack{10, 11, 12, false, "digest"},
      Ping{13},
      Digests{14, 15, {16, 17}},
  };
  for (const auto& message : messages) {
    auto decoded = decode(encode(message));
    ASSERT_EQ(decoded.index(), message.index());
  }
  auto join = std::get<JoinRequest>(decode(encode(messages[1])));
  EXPECT_EQ(join.transport_address, address);
  EXPECT_EQ(join.host_id, "boot-id");
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
  auto digests = std::get<Digests>(decode(encode(messages[7])));
  EXPECT_EQ(digests.digests, (std::vector<std::uint64_t>{16, 17}));
  auto ack = std::get<Ack>(decode(encode(messages[5])));
  EXPECT_EQ(ack.error, "digest");
  EXPECT_FALSE(ack.ok);
}

void expect_protocol_error(std::span<const std::byte> bytes, const std::string& fragment) {
  try {
    decode(bytes);
    FAIL() << "decoded a bad message; expected an error mentioning '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kProtocol);
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(Codec, EveryTruncationIsRejected) {
  auto bytes = encode(FetchReply{true, "", 1, 1024, false, sample_manifest()});
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
  auto good = encode(Announce{1, 2, 3, 4});
  good.push_back(std::byte{0});
  expect_protocol_error(good, "trailing");
}

}  // namespace
}  // namespace modelcast::protocol
