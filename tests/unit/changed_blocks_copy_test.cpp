// publish()'s copy of only the changed blocks: the digests it computes from the trainer's
// tensors are those of the slot it leaves (the digest thread's, bit for bit), the slot ends up
// byte for byte as a whole copy would leave it, and only blocks that differ are written.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <thread>

#include "core/producer/changed_blocks_copy.h"
#include "core/producer/digest_worker.h"
#include "common/host_buffer.h"

namespace modelcast::producer {
namespace {

// Tensors of odd sizes (so that the layout has gaps between them), one empty, laid out as
// publish() lays them, with blocks that cut across tensors and tensors that span blocks.
struct Model {
  Manifest layout;
  std::vector<std::vector<std::byte>> tensors;
  std::vector<const std::byte*> sources() const {
    std::vector<const std::byte*> s;
    for (const auto& t : tensors) s.push_back(t.data());
    return s;
  }
  // What a whole copy leaves in a slot.
  void copy_whole(std::byte* slot) const {
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      if (!tensors[i].empty()) std::memcpy(slot + layout.tensors[i].offset, tensors[i].data(), tensors[i].size());
    }
  }
};

Model make_model(std::uint64_t block_bytes, std::uint32_t seed) {
  Model m;
  std::vector<TensorSpec> specs;
  const std::int64_t counts[] = {70001, 0, 3, 150000, 99999, 1};
  for (std::size_t i = 0; i < std::size(counts); ++i) {
    specs.push_back({"t" + std::to_string(i), DType::kU8, {counts[i]}});
  }
  m.layout.tensors = plan_layout(specs, &m.layout.total_bytes);
  m.layout.block_bytes = block_bytes;
  std::mt19937_64 random(seed);
  for (auto count : counts) {
    std::vector<std::byte> t(static_cast<std::size_t>(count));
    for (auto& b : t) b = static_cast<std::byte>(random());
    m.tensors.push_back(std::move(t));
  }
  return m;
}

TEST(ChangedBlocksCopy, DigestsAreTheSlotsAndTheSlotIsAWholeCopyWhateverTheBlocks) {
  for (std::uint64_t block : {std::uint64_t{4096}, std::uint64_t{65536}, std::uint64_t{100000}, std::uint64_t{1} << 20}) {
    SCOPED_TRACE("blocks of " + std::to_string(block));
    Model m = make_model(block, 1);
    HostBuffer slot(m.layout.total_bytes), whole(m.layout.total_bytes);
    // Gaps hold whatever the slot held: make them not zero, as a copy must never write them.
    std::memset(slot.data(), 0x5c, slot.size());
    std::memset(whole.data(), 0x5c, whole.size());
    m.copy_whole(whole.data());
    // Nothing known about the slot: every block is copied.
    auto first = copy_changed_blocks(slot.data(), m.layout, m.sources(), {}, false);
    EXPECT_EQ(std::memcmp(slot.data(), whole.data(), m.layout.total_bytes), 0);
    EXPECT_EQ(first.block_digests, block_digests(whole.data(), m.layout));
    EXPECT_EQ(first.blocks_copied, block_count(m.layout));
    // One byte of one tensor changes: the blocks it lies in, and only those, are copied.
    const std::size_t tensor = 3, index = 77777;
    m.tensors[tensor][index] ^= std::byte{0xff};
    const std::uint64_t at = m.layout.tensors[tensor].offset + index;
    m.copy_whole(whole.data());
    auto second = copy_changed_blocks(slot.data(), m.layout, m.sources(), first.block_digests, true);
    EXPECT_EQ(std::memcmp(slot.data(), whole.data(), m.layout.total_bytes), 0);
    EXPECT_EQ(second.block_digests, block_digests(whole.data(), m.layout));
    EXPECT_EQ(second.blocks_copied, 1u);
    const std::uint64_t changed_block = at / block;
    for (std::size_t b = 0; b < second.block_digests.size(); ++b) {
      EXPECT_EQ(second.block_digests[b] != first.block_digests[b], b == changed_block) << "block " << b;
    }
    EXPECT_LE(second.bytes_copied, block);
    EXPECT_GT(second.bytes_copied, 0u);
    // Nothing changed: nothing copied.
    auto third = copy_changed_blocks(slot.data(), m.layout, m.sources(), second.block_digests, false);
    EXPECT_EQ(third.blocks_copied, 0u);
    EXPECT_EQ(third.bytes_copied, 0u);
    EXPECT_EQ(third.block_digests, second.block_digests);
  }
}

TEST(ChangedBlocksCopy, BlocksTheSlotDoesNotHoldAreCopiedEvenWhereTheNewestVersionHasThem) {
  // The slot holds an older version than the newest: a block that changed back and forth must
  // be compared with what the slot holds, not with the newest version.
  Model m = make_model(65536, 2);
  HostBuffer slot(m.layout.total_bytes);
  auto older = copy_changed_blocks(slot.data(), m.layout, m.sources(), {}, false);
  auto snapshot_of_older = std::vector<std::byte>(slot.data(), slot.data() + m.layout.total_bytes);
  m.tensors[0][5] ^= std::byte{1};  // the next version (in another slot) changes a byte
  HostBuffer reference(m.layout.total_bytes);
  std::memcpy(reference.data(), snapshot_of_older.data(), snapshot_of_older.size());
  m.copy_whole(reference.data());
  auto copied = copy_changed_blocks(slot.data(), m.layout, m.sources(), older.block_digests, false);
  EXPECT_EQ(copied.blocks_copied, 1u);
  EXPECT_EQ(std::memcmp(slot.data(), reference.data(), m.layout.total_bytes), 0);
}

TEST(ChangedBlocksCopy, AHelperSharesTheBlocksAndOneThatStartsLateChangesNothing) {
  Model m = make_model(4096, 3);  // about 80 blocks to share
  HostBuffer alone(m.layout.total_bytes), shared(m.layout.total_bytes), late(m.layout.total_bytes);
  auto held = copy_changed_blocks(alone.data(), m.layout, m.sources(), {}, false).block_digests;
  copy_changed_blocks(shared.data(), m.layout, m.sources(), {}, false);
  copy_changed_blocks(late.data(), m.layout, m.sources(), {}, false);
  for (std::size_t i = 0; i < m.tensors[3].size(); i += 9000) m.tensors[3][i] ^= std::byte{0x11};
  auto expected = copy_changed_blocks(alone.data(), m.layout, m.sources(), held, false);
  ASSERT_GT(expected.blocks_copied, 1u);
  // A helper on a thread of its own, as the digest thread is.
  std::thread helper_thread;
  std::size_t tasks = 0;
  auto with_helper = copy_changed_blocks(shared.data(), m.layout, m.sources(), held, true,
                                         [&](std::function<void()> task) {
                                           ++tasks;
                                           helper_thread = std::thread(std::move(task));
                                         });
  helper_thread.join();
  EXPECT_EQ(tasks, 1u);
  EXPECT_EQ(with_helper.block_digests, expected.block_digests);
  EXPECT_EQ(with_helper.blocks_copied, expected.blocks_copied);
  EXPECT_EQ(with_helper.bytes_copied, expected.bytes_copied);
  EXPECT_EQ(std::memcmp(shared.data(), alone.data(), m.layout.total_bytes), 0);
  // A helper that runs only after the call returned (a busy digest thread): the caller did every
  // block, and the late task touches nothing.
  std::function<void()> parked;
  auto without = copy_changed_blocks(late.data(), m.layout, m.sources(), held, false,
                                     [&](std::function<void()> task) { parked = std::move(task); });
  EXPECT_EQ(without.block_digests, expected.block_digests);
  EXPECT_EQ(without.bytes_copied, expected.bytes_copied);
  std::vector<std::byte> after(late.data(), late.data() + m.layout.total_bytes);
  m.tensors[0][0] ^= std::byte{0x22};  // were the late task to copy anything, this would show
  ASSERT_TRUE(parked);
  parked();
  EXPECT_EQ(std::memcmp(late.data(), after.data(), after.size()), 0);
  EXPECT_EQ(std::memcmp(late.data(), alone.data(), m.layout.total_bytes), 0);
}

TEST(ChangedBlocksCopy, HashingFirstPaysOnlyWhileAFifthOfTheBlocksOrFewerChanged) {
  const std::vector<std::uint64_t> held(10, 7);
  auto with_changed = [&](std::size_t n) {
    auto newest = held;
    for (std::size_t i = 0; i < n; ++i) newest[i] = 8;
    return newest;
  };
  EXPECT_TRUE(copy_changed_blocks_pays(held, with_changed(0)));
  EXPECT_TRUE(copy_changed_blocks_pays(held, with_changed(2)));
  EXPECT_FALSE(copy_changed_blocks_pays(held, with_changed(3)));
  EXPECT_FALSE(copy_changed_blocks_pays(held, with_changed(10)));
  EXPECT_FALSE(copy_changed_blocks_pays({}, {})) << "a slot whose bytes are not known must be copied whole";
  EXPECT_FALSE(copy_changed_blocks_pays(held, {})) << "no newest digests: the share changed is not known";
  EXPECT_FALSE(copy_changed_blocks_pays(held, std::vector<std::uint64_t>(9, 7)));
}

}  // namespace
}  // namespace modelcast::producer
