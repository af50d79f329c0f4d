// Choosing a transport by capability: which names a user's list selects, which offer and
// delivery path serve each (memory, memory, distance) combination, and the refusal when none
// does. Capabilities here are written out by hand, so device paths are checked without a GPU.
#include "transports/cuda_ipc/cuda_ipc_transport.h"
#include "transports/transport_registry.h"

#include <gtest/gtest.h>

#include "modelcast/error.h"

namespace modelcast::transport {
namespace {

constexpr MemoryKind H = MemoryKind::kHost;
constexpr MemoryKind D = MemoryKind::kCuda;

Capabilities caps(std::vector<MemoryPair> pairs, Reach reach, bool two_sided, bool one_sided) {
  Capabilities c;
  c.pairs = std::move(pairs);
  c.reach = reach;
  c.two_sided = two_sided;
  c.one_sided = one_sided;
  return c;
}

const Capabilities kUcxHostOnly = caps({{H, H}}, Reach::kNetwork, true, true);
const Capabilities kUcxWithCuda = caps({{H, H}, {H, D}, {D, H}, {D, D}}, Reach::kNetwork, true, true);
const Capabilities kLoopback = caps({{H, H}}, Reach::kProcess, true, true);
const Capabilities kCudaIpc = caps({{D, D}}, Reach::kHost, false, true);

std::string chosen(std::vector<TransportOffer> producer, std::vector<TransportOffer> consumer, RouteQuery q) {
  auto route = choose_route(producer, consumer, q);
  return consumer[route.consumer_offer].name + "/" + std::string(delivery_path_name(route.path));
}

TEST(TransportRegistry, AUsersListSelectsKnownTransportsInItsOrder) {
  auto defaults = resolve_transports({});
  // cuda_ipc only where the process has a device (a GPU, or the simulated device).
  ASSERT_EQ(defaults.size(), modelcast::transport::cuda_ipc_available() ? 2u : 1u);
  EXPECT_EQ(defaults[0]->name, "ucx");
  for (const auto* entry : defaults) EXPECT_NE(entry->name, "loopback") << "loopback must not be on by default";
  auto both = resolve_transports({"loopback", "ucx"});
  ASSERT_EQ(both.size(), 2u);
  EXPECT_EQ(both[0]->name, "loopback");
  EXPECT_EQ(both[1]->name, "ucx");
  try {
    resolve_transports({"rdma-magic"});
    FAIL() << "an unknown transport was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("'rdma-magic'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("ucx, cuda_ipc, loopback"), std::string::npos) << e.what();
  }
  EXPECT_THROW(resolve_transports({"ucx", "ucx"}), Error);
}

TEST(TransportRegistry, TheConsumersPreferenceWinsAmongOffersThatReach) {
  std::vector<TransportOffer> producer = {{"ucx", kUcxHostOnly, {}}, {"loopback", kLoopback, {}}};
  std::vector<TransportOffer> consumer = {{"loopback", kLoopback, {}}, {"ucx", kUcxHostOnly, {}}};
  EXPECT_EQ(chosen(producer, consumer, {H, H, Reach::kProcess, {}}), "loopback/host_ucx");
  // Another process on the same host: loopback does not reach it, UCX does.
  EXPECT_EQ(chosen(producer, consumer, {H, H, Reach::kHost, {}}), "ucx/host_ucx");
  EXPECT_EQ(chosen(producer, consumer, {H, H, Reach::kNetwork, {}}), "ucx/host_ucx");
  // The consumer prefers UCX: it gets UCX even in one process.
  std::vector<TransportOffer> ucx_first = {{"ucx", kUcxHostOnly, {}}, {"loopback", kLoopback, {}}};
  EXPECT_EQ(chosen(producer, ucx_first, {H, H, Reach::kProcess, {}}), "ucx/host_ucx");
}

TEST(TransportRegistry, NoCommonTransportIsAnErrorThatSaysWhatEachSideOffered) {
  std::vector<TransportOffer> producer = {{"ucx", kUcxHostOnly, {}}, {"loopback", kLoopback, {}}};
  std::vector<TransportOffer> only_loopback = {{"loopback", kLoopback, {}}};
  try {
    choose_route(producer, only_loopback, {H, H, Reach::kHost, {}});
    FAIL() << "loopback was chosen for another process";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTransport);
    std::string what = e.what();
    EXPECT_NE(what.find("distance 'host'"), std::string::npos) << what;
    EXPECT_NE(what.find("consumer offers loopback (host->host; reach process"), std::string::npos) << what;
  }
  // Same name, but the producer's side lacks it: names only pair instances, never route alone.
  std::vector<TransportOffer> producer_ucx_only = {{"ucx", kUcxHostOnly, {}}};
  EXPECT_THROW(choose_route(producer_ucx_only, only_loopback, {H, H, Reach::kProcess, {}}), Error);
  // Capabilities decide on both sides: a consumer whose UCX cannot take device memory.
  std::vector<TransportOffer> producer_cuda = {{"ucx", kUcxWithCuda, {}}};
  std::vector<TransportOffer> consumer_host_ucx = {{"ucx", kUcxHostOnly, {}}};
  EXPECT_EQ(chosen(producer_cuda, consumer_host_ucx, {D, H, Reach::kNetwork, {}}), "ucx/staged");
}

TEST(TransportRegistry, DevicePathsFollowCapabilitiesAndDistance) {
  std::vector<TransportOffer> producer = {{"cuda_ipc", kCudaIpc, {}}, {"ucx", kUcxHostOnly, {}}};
  std::vector<TransportOffer> consumer = {{"cuda_ipc", kCudaIpc, {}}, {"ucx", kUcxHostOnly, {}}};
  // Device to device on one host: the consumer reads the exported slot.
  EXPECT_EQ(chosen(producer, consumer, {D, D, Reach::kHost, {}}), "cuda_ipc/cuda_ipc");
  // Across hosts CUDA IPC does not reach; UCX without CUDA memory stages through host buffers.
  EXPECT_EQ(chosen(producer, consumer, {D, D, Reach::kNetwork, {}}), "ucx/staged");
  // Device to host never uses CUDA IPC.
  EXPECT_EQ(chosen(producer, consumer, {D, H, Reach::kHost, {}}), "ucx/staged");
  // A UCX that moves CUDA memory on both sides carries device memory itself.
  std::vector<TransportOffer> cuda_ucx = {{"ucx", kUcxWithCuda, {}}};
  EXPECT_EQ(chosen(cuda_ucx, cuda_ucx, {D, D, Reach::kNetwork, {}}), "ucx/ucx_cuda");
  EXPECT_EQ(chosen(cuda_ucx, cuda_ucx, {H, D, Reach::kNetwork, {}}), "ucx/ucx_cuda");
  // Forced: the path the user names, or a clear refusal.
  EXPECT_EQ(chosen(producer, consumer, {D, D, Reach::kHost, DeliveryPath::kStaged}), "ucx/staged");
  EXPECT_THROW(choose_route(producer, consumer, {D, D, Reach::kNetwork, DeliveryPath::kCudaIpc}), Error);
  EXPECT_THROW(choose_route(producer, consumer, {D, D, Reach::kHost, DeliveryPath::kUcxCuda}), Error)
      << "no offered UCX moves device memory";
}

TEST(TransportRegistry, DistanceComesFromBootIdsAndProcessTokens) {
  EXPECT_EQ(distance_between("boot-a", 5, "boot-a", 5), Reach::kProcess);
  EXPECT_EQ(distance_between("boot-a", 5, "boot-a", 6), Reach::kHost);
  EXPECT_EQ(distance_between("boot-a", 5, "boot-b", 5), Reach::kNetwork);
  EXPECT_EQ(distance_between("", 5, "", 5), Reach::kNetwork) << "a peer that did not say is far";
  EXPECT_EQ(distance_between("boot-a", 0, "boot-a", 0), Reach::kHost) << "a zero token is no process";
}

TEST(TransportRegistry, CapabilityPairsSurviveTheWireAndUnknownKindsAreRefused) {
  EXPECT_EQ(decode_pairs(encode_pairs(kUcxWithCuda.pairs)), kUcxWithCuda.pairs);
  try {
    decode_pairs({0x07});
    FAIL() << "an unknown memory kind was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kProtocol);
  }
}

}  // namespace
}  // namespace modelcast::transport
