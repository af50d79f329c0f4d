// The producer's digest thread hashes a snapshot right behind publish()'s copy: never a byte the
// copy has not passed, and it reports only after the copy is finished and handed on.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <vector>

#include "common/digest.h"
#include "core/model/manifest.h"
#include "core/producer/copy_progress.h"
#include "core/producer/digest_worker.h"

namespace modelcast {
namespace {

Manifest eight_blocks() {
  Manifest layout;
  layout.tensors = plan_layout({{"a", DType::kF32, {100000}}, {"b", DType::kU8, {77}}, {"c", DType::kF64, {40001}}},
                               &layout.total_bytes);
  layout.block_bytes = (layout.total_bytes + 7) / 8;
  return layout;
}

// The copy writes each block only just before it says it has passed it; the slot holds other
// bytes (an older version's) until then. Digests of anything the copy had not passed would be
// of those older bytes.
TEST(DigestWorker, HashesEachBlockOnlyOnceTheCopyHasPassedItAndReportsAfterTheCopyIsFinished) {
  const Manifest layout = eight_blocks();
  std::vector<std::byte> slot(layout.total_bytes, std::byte{0xee});
  std::vector<std::byte> version(layout.total_bytes);
  for (std::size_t i = 0; i < version.size(); ++i) version[i] = static_cast<std::byte>(i * 131 + 17);

  std::promise<std::vector<std::uint64_t>> reported;
  auto digests = reported.get_future();
  producer::DigestWorker worker([&](std::size_t slot_index, std::uint64_t number, std::vector<std::uint64_t> blocks) {
    EXPECT_EQ(slot_index, 2u);
    EXPECT_EQ(number, 9u);
    reported.set_value(std::move(blocks));
  });
  auto copied = std::make_shared<producer::CopyProgress>();
  worker.submit(2, 9, slot.data(), layout, copied);
  // Nothing is copied yet: a worker that did not wait would hash the old bytes and report them
  // well within this bound (a bound on catching that, not a synchronisation: it must not happen).
  constexpr auto kLongEnoughToCatchAnEarlyReport = std::chrono::milliseconds(300);
  EXPECT_EQ(digests.wait_for(kLongEnoughToCatchAnEarlyReport), std::future_status::timeout);
  for (std::uint64_t at = 0; at < layout.total_bytes; at += layout.block_bytes / 3) {
    const auto end = std::min(at + layout.block_bytes / 3, layout.total_bytes);
    std::memcpy(slot.data() + at, version.data() + at, end - at);
    copied->advance(end);
  }
  // Every byte is copied, but the copy is not finished (the version not yet handed on).
  EXPECT_EQ(digests.wait_for(kLongEnoughToCatchAnEarlyReport), std::future_status::timeout);
  copied->finish();
  ASSERT_EQ(digests.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  EXPECT_EQ(digests.get(), producer::block_digests(version.data(), layout));
}

}  // namespace
}  // namespace modelcast
