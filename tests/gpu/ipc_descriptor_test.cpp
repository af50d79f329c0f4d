// The cuda_ipc transport's region descriptor: what a producer exports reads back exactly, and
// every malformed descriptor a peer could send is refused naming what is wrong.
#include "transports/cuda_ipc/ipc_descriptor.h"

#include <gtest/gtest.h>

#include <string>

#include "modelcast/error.h"

namespace modelcast::cuda_ipc {
namespace {

IpcDescriptor sample() {
  IpcDescriptor d;
  d.exporter = 0x0123456789abcdefULL;
  d.source.slot = 7;
  d.source.device = 3;
  d.source.size = (std::uint64_t{5} << 32) + 11;
  for (std::size_t i = 0; i < d.source.handle.size(); ++i) d.source.handle[i] = std::byte(i * 37 + 1);
  return d;
}

// The error decode_descriptor throws for `bytes`, which must be kProtocol.
std::string refusal(const std::vector<std::byte>& bytes) {
  try {
    decode_descriptor(bytes);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kProtocol) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "a malformed descriptor was accepted";
  return {};
}

TEST(IpcDescriptor, WhatIsExportedDecodesExactly) {
  const auto bytes = encode_descriptor(sample());
  EXPECT_EQ(bytes.size(), kDescriptorBytes);
  EXPECT_EQ(decode_descriptor(bytes), sample());
}

// Little-endian at fixed offsets whatever the host: the layout the header documents.
TEST(IpcDescriptor, FieldsSitWhereTheLayoutSays) {
  const auto bytes = encode_descriptor(sample());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(bytes.data()), 8), "mcipcrg1");
  EXPECT_EQ(bytes[8], std::byte{0xef});   // exporter, lowest byte first
  EXPECT_EQ(bytes[16], std::byte{7});     // slot
  EXPECT_EQ(bytes[20], std::byte{3});     // device
  EXPECT_EQ(bytes[24], std::byte{11});    // size, low word
  EXPECT_EQ(bytes[28], std::byte{5});     // size, high word
  EXPECT_EQ(bytes[32], sample().source.handle[0]);
  EXPECT_EQ(bytes[95], sample().source.handle[63]);
}

TEST(IpcDescriptor, MalformedDescriptorsAreRefusedNamingTheProblem) {
  const auto good = encode_descriptor(sample());
  auto shorter = good;
  shorter.pop_back();
  EXPECT_NE(refusal(shorter).find("95 bytes, expected 96"), std::string::npos);
  auto longer = good;
  longer.push_back(std::byte{0});
  EXPECT_NE(refusal(longer).find("97 bytes"), std::string::npos);
  EXPECT_NE(refusal({}).find("0 bytes"), std::string::npos);
  auto magic = good;
  magic[7] = std::byte{'2'};
  EXPECT_NE(refusal(magic).find("magic"), std::string::npos);
  auto device = good;
  device[23] = std::byte{0x80};  // the sign bit of the device ordinal
  EXPECT_NE(refusal(device).find("negative device"), std::string::npos);
  auto empty = good;
  for (std::size_t i = 24; i < 32; ++i) empty[i] = std::byte{0};
  EXPECT_NE(refusal(empty).find("size 0"), std::string::npos);
}

TEST(IpcDescriptor, AnExportOfNothingOrOfANegativeDeviceIsNotEncoded) {
  auto d = sample();
  d.source.size = 0;
  EXPECT_THROW(encode_descriptor(d), Error);
  d = sample();
  d.source.device = -1;
  EXPECT_THROW(encode_descriptor(d), Error);
}

}  // namespace
}  // namespace modelcast::cuda_ipc
