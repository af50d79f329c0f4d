// The producer's device staging (DeviceSnapshots) on the device MODELCAST_DEVICE selects: the
// device-to-host copy of a version is reported prefix by prefix, and every prefix reported is
// really in the host slot when it is reported (the fetch server sends chunks on that word).
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>

#include <gtest/gtest.h>

#include "device/device_runtime.h"
#include "core/producer/device_snapshots.h"
#include "modelcast/error.h"

using modelcast::producer::DeviceSnapshots;

namespace {

modelcast::device::DeviceRuntime& runtime() { return modelcast::device::require_device_runtime("the device tests"); }

struct Report {
  DeviceSnapshots::Step step;
  std::uint64_t host_bytes;
  bool prefix_in_host;
  std::string error;
};

// Records what the staging thread reports, checking each reported prefix against `expected`
// in `host` as it is reported.
struct Reports {
  Reports(const std::vector<std::byte>& expected_bytes, const std::vector<std::byte>& host_slot)
      : expected(expected_bytes), host(host_slot) {}
  const std::vector<std::byte>& expected;
  const std::vector<std::byte>& host;
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<Report> list;

  DeviceSnapshots::Staged callback() {
    return [this](DeviceSnapshots::Step step, std::size_t, const modelcast::Manifest&, DeviceSnapshots::Clock::time_point,
                  std::uint64_t host_bytes, const std::string& error) {
      bool in_host = std::equal(expected.begin(), expected.begin() + static_cast<std::ptrdiff_t>(host_bytes), host.begin());
      std::lock_guard lock(mutex);
      list.push_back({step, host_bytes, in_host, error});
      cv.notify_all();
    };
  }
  // Waits until `n` reports are in (false after 30 s).
  bool wait_for(std::size_t n) {
    std::unique_lock lock(mutex);
    return cv.wait_for(lock, std::chrono::seconds(30), [&] { return list.size() >= n; });
  }
};

}  // namespace

TEST(DeviceSnapshots, TheHostCopyIsReportedPieceByPieceAndEachReportedPrefixIsInTheHostSlot) {
  auto& rt = runtime();
  const std::uint64_t piece = 64 << 10;
  const std::uint64_t total = piece * 5 + piece / 2;  // six pieces, the last one short
  std::vector<std::byte> expected(total);
  for (std::size_t i = 0; i < total; ++i) expected[i] = static_cast<std::byte>((i * 131) ^ (i >> 9));
  std::vector<std::byte> host(total, std::byte{0});

  Reports recorded(expected, host);
  DeviceSnapshots snapshots(rt, 0, 1, total, recorded.callback(), DeviceSnapshots::Options{piece, 2});
  rt.copy_async(snapshots.slots()[0], expected.data(), total, nullptr);
  rt.synchronize_stream(nullptr);

  modelcast::Manifest manifest;
  manifest.version = 1;
  manifest.total_bytes = total;
  manifest.integrity = false;
  snapshots.stage(0, manifest, host.data(), DeviceSnapshots::Clock::now());
  ASSERT_TRUE(recorded.wait_for(7));  // digested, five prefixes, on host
  snapshots.stop();
  const auto& reports = recorded.list;

  ASSERT_EQ(reports.size(), 7u);  // digested, five prefixes, on host
  EXPECT_EQ(reports.front().step, DeviceSnapshots::Step::kDigested);
  for (std::size_t i = 1; i <= 5; ++i) {
    EXPECT_EQ(reports[i].step, DeviceSnapshots::Step::kHostPrefix);
    EXPECT_EQ(reports[i].host_bytes, piece * i);
    EXPECT_TRUE(reports[i].prefix_in_host) << "prefix " << reports[i].host_bytes << " reported before it was copied";
  }
  EXPECT_EQ(reports.back().step, DeviceSnapshots::Step::kOnHost);
  EXPECT_EQ(reports.back().host_bytes, total);
  EXPECT_EQ(reports.back().error, "");
  EXPECT_EQ(host, expected);
}

// HostCopy::kOnRequest: the version is digested and reported readable from the device, and the
// host slot is left alone until copy_to_host() asks; then the copy is reported as usual. A copy
// asked for a version the slot no longer holds fails, saying so.
TEST(DeviceSnapshots, AVersionStagedOnRequestIsCopiedToTheHostOnlyWhenAsked) {
  auto& rt = runtime();
  const std::uint64_t piece = 64 << 10;
  const std::uint64_t total = piece * 3;
  std::vector<std::byte> expected(total);
  for (std::size_t i = 0; i < total; ++i) expected[i] = static_cast<std::byte>((i * 37) ^ (i >> 7));
  std::vector<std::byte> host(total, std::byte{0});

  Reports recorded(expected, host);
  DeviceSnapshots snapshots(rt, 0, 1, total, recorded.callback(), DeviceSnapshots::Options{piece, 2});
  rt.copy_async(snapshots.slots()[0], expected.data(), total, nullptr);
  rt.synchronize_stream(nullptr);
  const auto& reports = recorded.list;

  modelcast::Manifest manifest;
  manifest.version = 4;
  manifest.total_bytes = total;
  manifest.integrity = false;
  snapshots.stage(0, manifest, host.data(), DeviceSnapshots::Clock::now(), DeviceSnapshots::HostCopy::kOnRequest);
  ASSERT_TRUE(recorded.wait_for(1));
  // A later job runs after the staging of version 4 is over: nothing more was reported for it.
  snapshots.copy_to_host(0, 3);
  ASSERT_TRUE(recorded.wait_for(2));
  {
    std::lock_guard lock(recorded.mutex);
    EXPECT_EQ(reports[0].step, DeviceSnapshots::Step::kDigestedDeviceOnly);
    EXPECT_EQ(reports[0].error, "");
    EXPECT_EQ(reports[1].step, DeviceSnapshots::Step::kOnHost) << "version 4 was copied without being asked";
    EXPECT_NE(reports[1].error.find("version 3 is no longer in its device slot"), std::string::npos)
        << reports[1].error;
  }
  EXPECT_TRUE(std::all_of(host.begin(), host.end(), [](std::byte b) { return b == std::byte{0}; }))
      << "the host slot was written before the copy was asked for";

  snapshots.copy_to_host(0, 4);
  ASSERT_TRUE(recorded.wait_for(5));  // two prefixes, then on host
  snapshots.stop();
  ASSERT_EQ(reports.size(), 5u);
  for (std::size_t i = 2; i <= 3; ++i) {
    EXPECT_EQ(reports[i].step, DeviceSnapshots::Step::kHostPrefix);
    EXPECT_EQ(reports[i].host_bytes, piece * (i - 1));
    EXPECT_TRUE(reports[i].prefix_in_host);
  }
  EXPECT_EQ(reports[4].step, DeviceSnapshots::Step::kOnHost);
  EXPECT_EQ(reports[4].error, "");
  EXPECT_EQ(reports[4].host_bytes, total);
  EXPECT_EQ(host, expected);
}

TEST(DeviceSnapshots, AZeroPieceSizeIsRefused) {
  auto& rt = runtime();
  auto none = [](DeviceSnapshots::Step, std::size_t, const modelcast::Manifest&, DeviceSnapshots::Clock::time_point,
                 std::uint64_t, const std::string&) {};
  EXPECT_THROW(DeviceSnapshots(rt, 0, 1, 1024, none, DeviceSnapshots::Options{0, 2}), modelcast::Error);
  EXPECT_THROW(DeviceSnapshots(rt, 0, 1, 1024, none, DeviceSnapshots::Options{4096, 0}), modelcast::Error);
}
