// Path selection for every (producer memory, consumer memory, same host, UCX CUDA support)
// combination, automatic and with each path forced. The expectations are written out as a
// table, not derived from the rules the code implements.
#include "transports/delivery_path.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "modelcast/error.h"

namespace modelcast {
namespace {

constexpr MemoryKind H = MemoryKind::kHost;
constexpr MemoryKind D = MemoryKind::kCuda;

// One row per combination. Columns: automatic, then forced host_ucx, cuda_ipc, ucx_cuda, staged.
// Cell: the path name expected, or "-" for Error(kInvalidArgument).
struct Row {
  MemoryKind producer, consumer;
  bool same_host, ucx_cuda;
  const char* automatic;
  const char* forced_host_ucx;
  const char* forced_cuda_ipc;
  const char* forced_ucx_cuda;
  const char* forced_staged;
};

const Row kTable[] = {
    //  prod cons same  ucxcuda  auto        host_ucx    cuda_ipc    ucx_cuda    staged
    {H, H, false, false, "host_ucx", "host_ucx", "-", "-", "-"},
    {H, H, false, true, "host_ucx", "host_ucx", "-", "-", "-"},
    {H, H, true, false, "host_ucx", "host_ucx", "-", "-", "-"},
    {H, H, true, true, "host_ucx", "host_ucx", "-", "-", "-"},
    {H, D, false, false, "staged", "-", "-", "-", "staged"},
    {H, D, false, true, "ucx_cuda", "-", "-", "ucx_cuda", "staged"},
    {H, D, true, false, "staged", "-", "-", "-", "staged"},
    {H, D, true, true, "ucx_cuda", "-", "-", "ucx_cuda", "staged"},
    {D, H, false, false, "staged", "-", "-", "-", "staged"},
    {D, H, false, true, "ucx_cuda", "-", "-", "ucx_cuda", "staged"},
    {D, H, true, false, "staged", "-", "-", "-", "staged"},
    {D, H, true, true, "ucx_cuda", "-", "-", "ucx_cuda", "staged"},
    {D, D, false, false, "staged", "-", "-", "-", "staged"},
    {D, D, false, true, "ucx_cuda", "-", "-", "ucx_cuda", "staged"},
    {D, D, true, false, "cuda_ipc", "-", "cuda_ipc", "-", "staged"},
    {D, D, true, true, "cuda_ipc", "-", "cuda_ipc", "ucx_cuda", "staged"},
};

std::string label(const Row& r) {
  return std::string(r.producer == D ? "device" : "host") + "->" + (r.consumer == D ? "device" : "host") +
         (r.same_host ? " same-host" : " cross-host") + (r.ucx_cuda ? " ucx-cuda" : " ucx-host");
}

void expect_cell(const Row& r, std::optional<DeliveryPath> forced, const char* expected) {
  PathQuery q{r.producer, r.consumer, r.same_host, r.ucx_cuda, forced};
  const std::string what = label(r) + " forced=" + (forced ? std::string(delivery_path_name(*forced)) : "auto");
  if (std::string(expected) == "-") {
    try {
      const DeliveryPath got = select_delivery_path(q);
      ADD_FAILURE() << what << ": expected an error, got " << delivery_path_name(got);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << what;
      const std::string message = e.what();
      // The message names the refused path and the combination.
      EXPECT_NE(message.find(std::string(delivery_path_name(*forced))), std::string::npos) << message;
      EXPECT_NE(message.find(r.same_host ? "same host" : "different hosts"), std::string::npos) << message;
    }
  } else {
    EXPECT_EQ(delivery_path_name(select_delivery_path(q)), expected) << what;
  }
}

TEST(DeliveryPath, TableCoversEveryCombinationOnce) {
  std::set<int> seen;
  for (const Row& r : kTable) {
    seen.insert((r.producer == D) * 8 + (r.consumer == D) * 4 + r.same_host * 2 + r.ucx_cuda);
  }
  EXPECT_EQ(seen.size(), 16u);
}

TEST(DeliveryPath, EveryCombinationAutomaticAndForced) {
  for (const Row& r : kTable) {
    expect_cell(r, std::nullopt, r.automatic);
    expect_cell(r, DeliveryPath::kHostUcx, r.forced_host_ucx);
    expect_cell(r, DeliveryPath::kCudaIpc, r.forced_cuda_ipc);
    expect_cell(r, DeliveryPath::kUcxCuda, r.forced_ucx_cuda);
    expect_cell(r, DeliveryPath::kStaged, r.forced_staged);
  }
}

TEST(DeliveryPath, RefusalSaysWhy) {
  try {
    select_delivery_path({D, D, false, true, DeliveryPath::kCudaIpc});
    FAIL() << "cuda_ipc across hosts must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("only on the exporting host"), std::string::npos) << e.what();
  }
  try {
    select_delivery_path({D, H, true, false, DeliveryPath::kUcxCuda});
    FAIL() << "ucx_cuda without UCX CUDA support must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA memory support"), std::string::npos) << e.what();
  }
}

TEST(DeliveryPath, NamesRoundTrip) {
  for (auto path : {DeliveryPath::kHostUcx, DeliveryPath::kCudaIpc, DeliveryPath::kUcxCuda, DeliveryPath::kStaged}) {
    auto parsed = parse_delivery_path(delivery_path_name(path));
    ASSERT_TRUE(parsed.has_value());
    EXPECT_EQ(*parsed, path);
  }
  EXPECT_FALSE(parse_delivery_path("auto").has_value());
  EXPECT_FALSE(parse_delivery_path("").has_value());
  try {
    parse_delivery_path("nvlink");
    FAIL() << "an unknown name must be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("nvlink"), std::string::npos);
  }
}

}  // namespace
}  // namespace modelcast
