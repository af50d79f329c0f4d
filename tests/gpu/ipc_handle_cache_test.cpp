// The consumer's cache of opened CUDA IPC handles, with counting fake open/close functions.
#include "transports/cuda_ipc/ipc_handle_cache.h"

#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "modelcast/error.h"

namespace modelcast::cuda_ipc {
namespace {

IpcExport slot_export(std::uint32_t slot, std::uint8_t handle_tag) {
  IpcExport e;
  e.slot = slot;
  e.device = 0;
  e.size = 1 << 20;
  e.handle.fill(std::byte{handle_tag});
  return e;
}

// Hands out distinct fake addresses; records every open and close.
struct FakeCuda {
  std::vector<IpcExport> opened;
  std::vector<void*> closed;
  std::map<void*, IpcExport> live;
  std::uintptr_t next = 0x1000;
  bool fail_next_open = false;

  IpcOps ops() {
    return IpcOps{[this](const IpcExport& source) -> void* {
                    if (fail_next_open) {
                      fail_next_open = false;
                      throw Error(ErrorCode::kTransport, "cudaIpcOpenMemHandle failed");
                    }
                    void* base = reinterpret_cast<void*>(next);
                    next += 0x1000;
                    opened.push_back(source);
                    live[base] = source;
                    return base;
                  },
                  [this](void* base, const IpcExport& source) {
                    EXPECT_EQ(live.count(base), 1u) << "closed something not open (double close?)";
                    if (live.count(base)) {
                      EXPECT_EQ(live[base], source);
                    }
                    live.erase(base);
                    closed.push_back(base);
                  }};
  }
};

TEST(IpcHandleCache, OpensOncePerSlotAcrossVersions) {
  FakeCuda fake;
  IpcHandleCache cache(fake.ops());
  void* slot0 = nullptr;
  for (int version = 0; version < 5; ++version) {  // versions cycle through slots 0, 1, 2
    for (std::uint32_t slot = 0; slot < 3; ++slot) {
      auto mapping = cache.acquire(42, slot_export(slot, static_cast<std::uint8_t>(slot + 1)));
      ASSERT_NE(mapping, nullptr);
      EXPECT_EQ(mapping->source.slot, slot);
      EXPECT_EQ(mapping->incarnation, 42u);
      if (slot == 0) {
        if (version == 0) slot0 = mapping->base;
        EXPECT_EQ(mapping->base, slot0) << "slot 0 was reopened";
      }
    }
  }
  EXPECT_EQ(fake.opened.size(), 3u);
  EXPECT_EQ(cache.opens(), 3u);
  EXPECT_EQ(cache.size(), 3u);
  EXPECT_TRUE(fake.closed.empty());
}

TEST(IpcHandleCache, NewIncarnationClosesTheOldOnes) {
  FakeCuda fake;
  IpcHandleCache cache(fake.ops());
  void* a = cache.acquire(1, slot_export(0, 1))->base;
  void* b = cache.acquire(1, slot_export(1, 2))->base;
  auto fresh = cache.acquire(2, slot_export(0, 9));  // restarted producer, same slot number
  EXPECT_NE(fresh->base, a);
  EXPECT_EQ(fresh->incarnation, 2u);
  ASSERT_EQ(fake.closed.size(), 2u);
  EXPECT_TRUE((fake.closed[0] == a && fake.closed[1] == b) || (fake.closed[0] == b && fake.closed[1] == a));
  EXPECT_EQ(cache.size(), 1u);
}

TEST(IpcHandleCache, ChangedHandleForASlotReopens) {
  FakeCuda fake;
  IpcHandleCache cache(fake.ops());
  void* first = cache.acquire(7, slot_export(0, 1))->base;
  void* second = cache.acquire(7, slot_export(0, 2))->base;  // the producer reallocated slot 0
  EXPECT_NE(first, second);
  ASSERT_EQ(fake.closed.size(), 1u);
  EXPECT_EQ(fake.closed[0], first);
  EXPECT_EQ(fake.opened.size(), 2u);
}

// A reader done with a relay's buffer lets its mapping go, and only that one.
TEST(IpcHandleCache, ForgetClosesOneMappingAtOnceOrWhenReleased) {
  FakeCuda fake;
  IpcHandleCache cache(fake.ops());
  void* kept = cache.acquire(5, slot_export(0, 1))->base;
  void* gone = cache.acquire(5, slot_export(1, 2))->base;
  cache.forget(5, 1);
  ASSERT_EQ(fake.closed.size(), 1u);
  EXPECT_EQ(fake.closed[0], gone);
  EXPECT_EQ(cache.acquire(5, slot_export(0, 1))->base, kept);
  cache.forget(6, 0);  // another exporter's slot 0: not this one
  EXPECT_EQ(cache.size(), 1u);
  auto held = cache.acquire(5, slot_export(0, 1));  // a read still in flight
  cache.forget(5, 0);
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(fake.closed.size(), 1u) << "closed while held";
  held.reset();
  ASSERT_EQ(fake.closed.size(), 2u);
  EXPECT_EQ(fake.closed[1], kept);
}

TEST(IpcHandleCache, HeldMappingStaysOpenUntilReleased) {
  FakeCuda fake;
  IpcHandleCache cache(fake.ops());
  auto held = cache.acquire(1, slot_export(0, 1));  // e.g. a copy out of it is in flight
  cache.acquire(2, slot_export(0, 2));              // evicts it from the cache...
  EXPECT_TRUE(fake.closed.empty()) << "closed while held";
  void* base = held->base;
  held.reset();  // ...and the close happens at release
  ASSERT_EQ(fake.closed.size(), 1u);
  EXPECT_EQ(fake.closed[0], base);
}

TEST(IpcHandleCache, CapacityEvictsLeastRecentlyUsed) {
  FakeCuda fake;
  IpcHandleCache cache(fake.ops(), 2);
  void* s0 = cache.acquire(1, slot_export(0, 1))->base;
  void* s1 = cache.acquire(1, slot_export(1, 2))->base;
  cache.acquire(1, slot_export(0, 1));  // slot 0 used again: slot 1 is now the oldest
  cache.acquire(1, slot_export(2, 3));
  ASSERT_EQ(fake.closed.size(), 1u);
  EXPECT_EQ(fake.closed[0], s1);
  EXPECT_EQ(cache.acquire(1, slot_export(0, 1))->base, s0);
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(fake.opened.size(), 3u);
}

TEST(IpcHandleCache, FailedOpenCachesNothing) {
  FakeCuda fake;
  IpcHandleCache cache(fake.ops());
  fake.fail_next_open = true;
  EXPECT_THROW(cache.acquire(1, slot_export(0, 1)), Error);
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.opens(), 0u);
  auto mapping = cache.acquire(1, slot_export(0, 1));  // the next try opens for real
  EXPECT_EQ(fake.opened.size(), 1u);
  EXPECT_EQ(cache.size(), 1u);
}

TEST(IpcHandleCache, DestructionAndClearCloseEverythingExactlyOnce) {
  FakeCuda fake;
  std::shared_ptr<const Mapping> survivor;
  {
    IpcHandleCache cache(fake.ops());
    cache.acquire(1, slot_export(0, 1));
    cache.acquire(1, slot_export(1, 2));
    cache.clear();
    EXPECT_EQ(fake.closed.size(), 2u);
    cache.acquire(1, slot_export(0, 1));
    survivor = cache.acquire(1, slot_export(2, 3));
  }
  EXPECT_EQ(fake.closed.size(), 3u);  // slot 0's second mapping; slot 2 is still held
  survivor.reset();
  EXPECT_EQ(fake.closed.size(), 4u);
  EXPECT_TRUE(fake.live.empty());
  EXPECT_EQ(fake.opened.size(), 4u);
}

TEST(IpcHandleCache, RejectsMissingOps) {
  EXPECT_THROW(IpcHandleCache(IpcOps{}), Error);
  FakeCuda fake;
  EXPECT_THROW(IpcHandleCache(fake.ops(), 0), Error);
}

}  // namespace
}  // namespace modelcast::cuda_ipc
