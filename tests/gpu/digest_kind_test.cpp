// The manifest's digest kind: which kind a producer picks, and its optional wire field.
#include "core/cuda/digest_kind.h"
#include "core/cuda/digest_kind_codec.h"

#include <gtest/gtest.h>

#include "modelcast/error.h"

namespace modelcast {
namespace {

constexpr MemoryKind H = MemoryKind::kHost;
constexpr MemoryKind D = MemoryKind::kCuda;

TEST(DigestKind, ChosenByWhereTheBytesCanBeHashed) {
  // producer, consumer, staged -> kind
  EXPECT_EQ(digest_kind_for(H, H, false), DigestKind::kXxh3_64);
  EXPECT_EQ(digest_kind_for(H, D, true), DigestKind::kXxh3_64);   // hashed in the bounce buffers
  EXPECT_EQ(digest_kind_for(H, D, false), DigestKind::kPmix64);   // ucx_cuda: straight into the device
  EXPECT_EQ(digest_kind_for(D, H, true), DigestKind::kPmix64);
  EXPECT_EQ(digest_kind_for(D, H, false), DigestKind::kPmix64);
  EXPECT_EQ(digest_kind_for(D, D, false), DigestKind::kPmix64);
  EXPECT_EQ(digest_kind_for(D, D, true), DigestKind::kPmix64);
  EXPECT_EQ(digest_kind_name(DigestKind::kXxh3_64), "xxh3-64");
  EXPECT_EQ(digest_kind_name(DigestKind::kPmix64), "pmix64-v1");
}

msgpack::object_handle manifest_with(DigestKind kind) {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(&buffer);
  pk.pack_map(1 + digest_kind_field_count(kind));
  pk.pack("model"); pk.pack("m");
  pack_digest_kind_field(pk, kind);
  return msgpack::unpack(buffer.data(), buffer.size());
}

TEST(DigestKind, WireFieldRoundTripsAndIsAbsentForXxh3) {
  auto xxh3 = manifest_with(DigestKind::kXxh3_64);
  EXPECT_EQ(xxh3.get().via.map.size, 1u);  // host-only manifests are unchanged on the wire
  EXPECT_EQ(unpack_digest_kind_field(xxh3.get()), DigestKind::kXxh3_64);
  auto pmix = manifest_with(DigestKind::kPmix64);
  EXPECT_EQ(pmix.get().via.map.size, 2u);
  EXPECT_EQ(unpack_digest_kind_field(pmix.get()), DigestKind::kPmix64);
}

TEST(DigestKind, BadValuesAreProtocolErrors) {
  auto with_value = [](auto value) {
    msgpack::sbuffer buffer;
    msgpack::packer<msgpack::sbuffer> pk(&buffer);
    pk.pack_map(1);
    pk.pack("dkind");
    pk.pack(value);
    return msgpack::unpack(buffer.data(), buffer.size());
  };
  for (const auto& handle : {with_value(7), with_value(-1), with_value(std::string("pmix"))}) {
    try {
      unpack_digest_kind_field(handle.get());
      ADD_FAILURE() << "accepted a bad digest kind";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kProtocol);
    }
  }
}

}  // namespace
}  // namespace modelcast
