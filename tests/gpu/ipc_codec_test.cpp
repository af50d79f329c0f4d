// The FetchReply's optional "ipc" field: round trip, absence, and malformed values refused.
#include "transports/cuda_ipc/ipc_codec.h"

#include <gtest/gtest.h>

#include <functional>

#include "modelcast/error.h"

namespace modelcast::cuda_ipc {
namespace {

// A FetchReply-like body: {"ok": true, <ipc field if any>, "fetch": 7}, as protocol.cpp packs it.
msgpack::object_handle body_with(const std::optional<IpcExport>& ipc) {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(&buffer);
  pk.pack_map(2 + ipc_field_count(ipc));
  pk.pack("ok"); pk.pack(true);
  pack_ipc_field(pk, ipc);
  pk.pack("fetch"); pk.pack(7);
  return msgpack::unpack(buffer.data(), buffer.size());
}

// A body whose "ipc" value is written by `write`.
msgpack::object_handle body_raw(const std::function<void(msgpack::packer<msgpack::sbuffer>&)>& write) {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(&buffer);
  pk.pack_map(1);
  pk.pack("ipc");
  write(pk);
  return msgpack::unpack(buffer.data(), buffer.size());
}

IpcExport sample() {
  IpcExport e;
  e.slot = 2;
  e.device = 3;
  e.size = (std::uint64_t{5} << 30) + 17;  // > 4 GiB: 64-bit sizes survive
  for (std::size_t i = 0; i < kHandleBytes; ++i) e.handle[i] = static_cast<std::byte>(i * 37 + 1);
  return e;
}

std::string protocol_error(const msgpack::object& body) {
  try {
    unpack_ipc_field(body);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kProtocol);
    return e.what();
  }
  return "(no error)";
}

TEST(IpcCodec, RoundTrip) {
  auto handle = body_with(sample());
  auto decoded = unpack_ipc_field(handle.get());
  ASSERT_TRUE(decoded.has_value());
  EXPECT_EQ(*decoded, sample());
  EXPECT_EQ(handle.get().via.map.size, 3u);  // the count matched what was packed
}

TEST(IpcCodec, AbsentFieldIsNullopt) {
  auto handle = body_with(std::nullopt);
  EXPECT_EQ(handle.get().via.map.size, 2u);
  EXPECT_FALSE(unpack_ipc_field(handle.get()).has_value());
}

TEST(IpcCodec, MalformedValuesAreProtocolErrors) {
  using Pk = msgpack::packer<msgpack::sbuffer>;
  auto full = [](Pk& pk, std::uint32_t handle_bytes, bool with_slot, int device) {
    pk.pack_map(with_slot ? 4 : 3);
    if (with_slot) { pk.pack("slot"); pk.pack(1); }
    pk.pack("dev"); pk.pack(device);
    pk.pack("size"); pk.pack(4096);
    pk.pack("handle");
    std::string bytes(handle_bytes, 'h');
    pk.pack_bin(handle_bytes);
    pk.pack_bin_body(bytes.data(), handle_bytes);
  };
  EXPECT_NE(protocol_error(body_raw([&](Pk& pk) { full(pk, 63, true, 0); }).get()).find("63 bytes"), std::string::npos);
  EXPECT_NE(protocol_error(body_raw([&](Pk& pk) { full(pk, 65, true, 0); }).get()).find("65 bytes"), std::string::npos);
  EXPECT_NE(protocol_error(body_raw([&](Pk& pk) { full(pk, 64, false, 0); }).get()).find("missing field 'slot'"),
            std::string::npos);
  EXPECT_NE(protocol_error(body_raw([&](Pk& pk) { full(pk, 64, true, -1); }).get()).find("negative device"),
            std::string::npos);
  EXPECT_NE(protocol_error(body_raw([](Pk& pk) { pk.pack("not a map"); }).get()).find("not a map"), std::string::npos);
  EXPECT_NE(protocol_error(body_raw([](Pk& pk) {
              pk.pack_map(4);
              pk.pack("slot"); pk.pack(std::uint64_t{1} << 40);  // does not fit 32 bits
              pk.pack("dev"); pk.pack(0);
              pk.pack("size"); pk.pack(1);
              pk.pack("handle"); pk.pack(std::string(64, 'h'));  // also: a string, not binary
            }).get()).find("'slot' has the wrong type"),
            std::string::npos);
  EXPECT_NE(protocol_error(body_raw([](Pk& pk) {
              pk.pack_map(4);
              pk.pack("slot"); pk.pack(1);
              pk.pack("dev"); pk.pack(0);
              pk.pack("size"); pk.pack(1);
              pk.pack("handle"); pk.pack(std::string(64, 'h'));
            }).get()).find("'handle' is not binary"),
            std::string::npos);
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer>(&buffer).pack(5);
  EXPECT_NE(protocol_error(msgpack::unpack(buffer.data(), buffer.size()).get()).find("body is not a map"), std::string::npos);
}

}  // namespace
}  // namespace modelcast::cuda_ipc
