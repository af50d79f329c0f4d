// One-sided access through the seam, for every transport that offers it: a region exported on
// one side, imported on the other, read without the owner posting anything; ranges outside
// either region and damaged descriptors are refused before anything moves.
#include <gtest/gtest.h>

#include <cstring>
#include <future>
#include <numeric>

#include "common/host_buffer.h"
#include "modelcast/error.h"
#include "transports/transport_registry.h"
#include "transports/ucx/ucx_transport.h"

namespace modelcast::transport {
namespace {

using namespace std::chrono_literals;

TransferResult wait(std::future<TransferResult>& future) {
  if (future.wait_for(30s) != std::future_status::ready) return {false, "timed out"};
  return future.get();
}

class OneSidedRead : public ::testing::TestWithParam<std::string> {
 protected:
  std::unique_ptr<Transport> make() {
    if (GetParam() == "ucx") return make_ucx_transport({.one_sided = true});
    return resolve_transports({GetParam()}).at(0)->make(Side::kProducer);
  }
};

TEST_P(OneSidedRead, AnImportedRegionIsReadExactlyWithoutTheOwnerPosting) {
  auto owner = make();
  auto reader = make();
  ASSERT_TRUE(owner->capabilities().one_sided);
  constexpr std::size_t kSize = 1u << 20;
  HostBuffer source(kSize);
  HostBuffer target(kSize);
  auto* words = reinterpret_cast<std::uint32_t*>(source.data());
  std::iota(words, words + kSize / 4, 11u);
  auto source_region = owner->register_memory(source.data(), source.size(), MemoryLocation::host());
  auto target_region = reader->register_memory(target.data(), target.size(), MemoryLocation::host());
  auto descriptor = owner->export_region(*source_region);

  auto peer = reader->connect(owner->address(), false, nullptr);
  auto remote = reader->import_region(peer, descriptor);
  EXPECT_EQ(remote->length(), kSize);
  // Two reads: a middle piece to the start of the target, then the whole region.
  std::promise<TransferResult> piece, whole;
  reader->post_read(*remote, 4096, *target_region, 0, 8192, [&](const TransferResult& r) { piece.set_value(r); });
  auto piece_future = piece.get_future();
  auto r = wait(piece_future);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(std::memcmp(target.data(), source.data() + 4096, 8192), 0);
  reader->post_read(*remote, 0, *target_region, 0, kSize, [&](const TransferResult& r2) { whole.set_value(r2); });
  auto whole_future = whole.get_future();
  r = wait(whole_future);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(std::memcmp(target.data(), source.data(), kSize), 0);
  remote.reset();  // before the transports that made it
}

TEST_P(OneSidedRead, RangesOutsideEitherRegionAndDamagedDescriptorsAreRefused) {
  auto owner = make();
  auto reader = make();
  HostBuffer source(1u << 16);
  HostBuffer target(1u << 12);
  auto source_region = owner->register_memory(source.data(), source.size(), MemoryLocation::host());
  auto target_region = reader->register_memory(target.data(), target.size(), MemoryLocation::host());
  auto descriptor = owner->export_region(*source_region);
  auto peer = reader->connect(owner->address(), false, nullptr);
  auto remote = reader->import_region(peer, descriptor);
  bool completed = false;
  auto never = [&](const TransferResult&) { completed = true; };
  auto expect_invalid = [&](std::size_t source_offset, std::size_t target_offset, std::size_t length) {
    try {
      reader->post_read(*remote, source_offset, *target_region, target_offset, length, never);
      ADD_FAILURE() << "read of " << length << " at " << source_offset << " -> " << target_offset << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    }
  };
  expect_invalid(source.size() - 8, 0, 16);       // past the remote region's end
  expect_invalid(0, target.size() - 8, 16);       // past the local region's end
  expect_invalid(SIZE_MAX - 4, 0, 16);            // an offset whose sum overflows
  EXPECT_FALSE(completed);

  auto damaged = descriptor;
  damaged.back() ^= std::byte{0x5A};
  EXPECT_THROW(reader->import_region(peer, damaged), Error);
  EXPECT_THROW(reader->import_region(peer, std::span(descriptor).first(descriptor.size() / 2)), Error);
  EXPECT_THROW(reader->import_region(peer + 1000, descriptor), Error) << "a peer that is not connected";
  remote.reset();
}

TEST(OneSidedRead, TheDefaultUcxTransportSaysItHasNoOneSidedAccessAndRefusesExports) {
  auto ucx = resolve_transports({"ucx"}).at(0)->make(Side::kProducer);
  EXPECT_FALSE(ucx->capabilities().one_sided);
  HostBuffer memory(4096);
  auto region = ucx->register_memory(memory.data(), memory.size(), MemoryLocation::host());
  EXPECT_THROW(ucx->export_region(*region), Error);
}

INSTANTIATE_TEST_SUITE_P(Transports, OneSidedRead, ::testing::Values("loopback", "ucx"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace modelcast::transport
