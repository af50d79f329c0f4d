// The attach protocol's tensor entries: a part's place and an fp8 tensor's scales travel to the
// client as written, and an entry whose box does not fit its whole tensor, or whose scales do
// not cover it, is refused, named.
#include <gtest/gtest.h>

#include "daemon/attach/protocol.h"
#include "modelcast/error.h"

namespace {

using modelcastd::attach::Reply;
using modelcastd::attach::TensorEntry;

Reply with(std::vector<TensorEntry> tensors) {
  Reply reply;
  reply.manifest.emplace();
  reply.manifest->hold = 3;
  reply.manifest->buffer_bytes = 1 << 20;
  reply.manifest->tensors = std::move(tensors);
  return reply;
}

TEST(AttachProtocol, APartsPlaceAndFp8ScalesRoundTrip) {
  TensorEntry part{"w", modelcast::DType::kBF16, {64, 16}, 0, 2048, {0, 16}, {64, 32}, {}, 0};
  TensorEntry scaled{"h", modelcast::DType::kF8E4M3, {256}, 4096, 256, {}, {}, {0.5f, 0.25f}, 128};
  TensorEntry plain{"b", modelcast::DType::kF32, {32}, 8192, 128, {}, {}, {}, 0};
  auto bytes = modelcastd::attach::encode(with({part, scaled, plain}));
  auto decoded = modelcastd::attach::decode_reply(bytes);
  ASSERT_TRUE(decoded.manifest);
  const auto& t = decoded.manifest->tensors;
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].box_offset, part.box_offset);
  EXPECT_EQ(t[0].whole_shape, part.whole_shape);
  EXPECT_TRUE(t[0].scales.empty());
  EXPECT_EQ(t[1].scales, scaled.scales);
  EXPECT_EQ(t[1].scale_block, 128u);
  EXPECT_TRUE(t[1].whole_shape.empty());
  EXPECT_TRUE(t[2].whole_shape.empty());
  EXPECT_TRUE(t[2].scales.empty());
}

TEST(AttachProtocol, ABoxOutsideItsWholeTensorIsRefusedNamingTheTensor) {
  TensorEntry outside{"w", modelcast::DType::kBF16, {64, 16}, 0, 2048, {0, 20}, {64, 32}, {}, 0};
  TensorEntry ranks{"v", modelcast::DType::kBF16, {64, 16}, 0, 2048, {0}, {64}, {}, 0};
  // A client dequantizes with scales[i / scale_block]: too few would read past them.
  TensorEntry few{"h", modelcast::DType::kF8E4M3, {256}, 0, 256, {}, {}, {0.5f}, 128};
  TensorEntry zero{"z", modelcast::DType::kF8E4M3, {256}, 0, 256, {}, {}, {0.0f}, 0};
  for (const auto& [entry, why] : {std::pair{outside, "a box outside the whole tensor"},
                                   std::pair{ranks, "a box that does not match its shape"},
                                   std::pair{few, "1 fp8 scales for 2 blocks"},
                                   std::pair{zero, "an fp8 scale that is not finite and > 0"}}) {
    auto bytes = modelcastd::attach::encode(with({entry}));
    try {
      modelcastd::attach::decode_reply(bytes);
      ADD_FAILURE() << entry.name << " accepted";
    } catch (const modelcast::Error& e) {
      EXPECT_EQ(e.code(), modelcast::ErrorCode::kProtocol);
      EXPECT_NE(std::string(e.what()).find("'" + entry.name + "' has " + why), std::string::npos) << e.what();
    }
  }
}

// msgpack-c reserves room for a container's declared elements before reading them: a request of
// a few bytes declaring nested arrays of the most the limits allow each would reserve megabytes
// before the decode found it truncated. A size the message cannot hold is refused first.
TEST(AttachProtocol, ContainerSizesTheMessageCannotHoldAreRefusedBeforeAnythingIsReserved) {
  std::vector<char> nested;
  for (int level = 0; level < 7; ++level) {
    for (unsigned char b : {0xdd, 0x00, 0x02, 0x00, 0x00}) nested.push_back(static_cast<char>(b));  // array32 of 2^17
  }
  for (bool request : {true, false}) {
    try {
      if (request) {
        modelcastd::attach::decode_request(nested);
      } else {
        modelcastd::attach::decode_reply(nested);
      }
      ADD_FAILURE() << "decoded";
    } catch (const modelcast::Error& e) {
      EXPECT_EQ(e.code(), modelcast::ErrorCode::kProtocol);
      EXPECT_NE(std::string(e.what()).find("size overflow"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
