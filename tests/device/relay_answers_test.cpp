// The producer's FetchServer on a one-sided relayed fetch (CUDA IPC between device consumers on
// one host): the reader is answered only once the relay has exported its buffer, and it may ask
// again before that answer comes, or after an answer that came too late for it (it had stopped
// waiting). Either way the fetch it gave up is ended, its relay told to unpin, and the new
// request served, not refused as busy. These windows depend on message timing between three
// processes, so they are held open here, in one process, with the stage itself.
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "core/model/manifest.h"
#include "core/producer/digest_worker.h"
#include "core/producer/fetch_server.h"
#include "core/producer/membership.h"
#include "core/producer/snapshot_store.h"
#include "device/device_runtime.h"
#include "transports/transport_set.h"

namespace modelcast {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr std::uint64_t kIncarnation = 11;
constexpr std::uint64_t kBytes = 256u << 10;

device::DeviceRuntime& runtime() { return device::require_device_runtime("the device tests"); }

// A device producer's slots (read over CUDA IPC), version 1 published with its digests, a
// fetch server with relays on, and two device consumers on its host: a holder that serves
// peers and a reader.
struct RelayedReads {
  RelayedReads() : transports({"cuda_ipc"}, transport::Side::kProducer), store(2) {
    for (int i = 0; i < 2; ++i) device_slots.push_back(runtime().allocate(0, kBytes));
    layout.model = "test";
    layout.incarnation = kIncarnation;
    layout.tensors = plan_layout({TensorSpec{"w", DType::kF32, {kBytes / 4}, MemoryKind::kCuda, 0}}, &layout.total_bytes);
    layout.block_bytes = 64u << 10;
    store.allocate(layout.total_bytes, transports, device_slots, 0);
    server = std::make_unique<producer::FetchServer>(
        store, transports, kIncarnation, 10s, [](const std::string&, std::uint64_t, const transport::TransferResult&) {},
        /*relay_fanout=*/1);
    auto slot = store.reserve(10s).slot;
    Manifest manifest = layout;
    manifest.version = 1;
    store.publish(slot, manifest, Clock::now(), /*pin=*/true, producer::SnapshotStore::HostState::kNotCopied);
    store.set_digests(slot, {}, producer::block_digests(store.memory(slot), manifest), nullptr);
    holder = join("holder");
    reader = join("reader");
    // The holder reads version 1 from the producer's slot and installs it: a complete holder.
    auto read = server->start(holder.routing_id, &holder, request(1), Clock::now());
    EXPECT_TRUE(read && read->ok && read->relay.empty() && !read->region.empty());
    protocol::Ack installed;
    installed.incarnation = kIncarnation;
    installed.version = 1;
    installed.fetch_id = 1;
    installed.ok = true;
    EXPECT_TRUE(server->on_ack(holder.routing_id, installed, holder.name, Clock::now()).ok);
  }
  ~RelayedReads() {
    server.reset();
    for (auto* slot : device_slots) runtime().release(slot);
  }

  producer::ConsumerRecord join(const std::string& name) {
    producer::ConsumerRecord record;
    record.name = name;
    record.routing_id = "id-" + name;
    record.host_id = "one-host";
    record.serves_peers = true;
    record.memory = transport::MemoryLocation::cuda(0);
    server->joined(record);
    return record;
  }
  static protocol::FetchRequest request(std::uint64_t fetch_id) {
    protocol::FetchRequest r;
    r.incarnation = kIncarnation;
    r.version = 1;
    r.fetch_id = fetch_id;
    return r;
  }
  // The reader's first request: unanswered, and the holder ordered to export its buffer.
  std::uint64_t ask_first() {
    EXPECT_FALSE(server->start(reader.routing_id, &reader, request(1), Clock::now()))
        << "a one-sided relayed fetch is answered once the relay has exported its buffer";
    auto out = server->take_outgoing();
    EXPECT_EQ(out.size(), 1u);
    const auto* order = out.empty() ? nullptr : std::get_if<protocol::RelayOrder>(&out[0].second);
    EXPECT_TRUE(order && out[0].first == holder.routing_id && order->export_region);
    return order ? order->order_id : 0;
  }
  static protocol::RelayOffer offer(std::uint64_t order_id) {
    protocol::RelayOffer o;
    o.incarnation = kIncarnation;
    o.order_id = order_id;
    o.region = {std::byte{1}};  // passed on to the reader as it is: its content is the relay's
    return o;
  }
  // Cancels among `out` sent to the holder, by order id.
  std::vector<std::uint64_t> cancels(const std::vector<std::pair<std::string, protocol::Message>>& out) const {
    std::vector<std::uint64_t> ids;
    for (const auto& [to, message] : out) {
      if (const auto* c = std::get_if<protocol::RelayCancel>(&message); c && to == holder.routing_id) {
        ids.push_back(c->order_id);
      }
    }
    return ids;
  }

  std::vector<void*> device_slots;
  transport::TransportSet transports;
  producer::SnapshotStore store;
  Manifest layout;
  std::unique_ptr<producer::FetchServer> server;
  producer::ConsumerRecord holder, reader;
};

TEST(RelayAnswers, AReaderAskingAgainAfterAnAnswerCameTooLateGetsServedAndTheRelayUnpins) {
  RelayedReads r;
  const auto order = r.ask_first();
  ASSERT_TRUE(r.server->relay_offered(r.holder.routing_id, r.offer(order), Clock::now()));
  auto answered = r.server->take_outgoing();
  ASSERT_EQ(answered.size(), 1u);
  const auto* reply = std::get_if<protocol::FetchReply>(&answered[0].second);
  ASSERT_TRUE(reply && reply->ok && reply->fetch_id == 1 && reply->relay == "holder");

  // The reader had stopped waiting and dropped that answer: it asks again.
  auto again = r.server->start(r.reader.routing_id, &r.reader, r.request(2), Clock::now());
  EXPECT_FALSE(again) << "answered at once (" << (again ? again->error : "") << ") instead of relayed again";
  auto out = r.server->take_outgoing();
  EXPECT_EQ(r.cancels(out), std::vector<std::uint64_t>{order})
      << "the holder keeps the export it made for the dropped answer pinned until told";
  // The holder did answer, so it is asked again, for the new fetch.
  ASSERT_EQ(out.size(), 2u);
  const auto* reorder = std::get_if<protocol::RelayOrder>(&out[1].second);
  ASSERT_TRUE(reorder && out[1].first == r.holder.routing_id);
  EXPECT_EQ(reorder->fetch_id, 2u);
  EXPECT_NE(reorder->order_id, order);
  EXPECT_TRUE(r.server->take_unanswered_relays().empty()) << "the relay answered: it is not to blame";
}

TEST(RelayAnswers, AReaderAskingAgainBeforeTheRelayExportedIsServedByTheProducer) {
  RelayedReads r;
  const auto order = r.ask_first();

  auto again = r.server->start(r.reader.routing_id, &r.reader, r.request(2), Clock::now());
  ASSERT_TRUE(again) << "the producer serves a reader whose relay never answered";
  EXPECT_TRUE(again->ok) << again->error;
  EXPECT_TRUE(again->relay.empty()) << "served by relay '" << again->relay << "' again";
  EXPECT_FALSE(again->region.empty()) << "the reader reads the producer's slot";
  EXPECT_EQ(r.cancels(r.server->take_outgoing()), std::vector<std::uint64_t>{order})
      << "a relay only slow to export pins its buffer when the order reaches it; the cancel unpins it";
  auto unanswered = r.server->take_unanswered_relays();
  ASSERT_EQ(unanswered.size(), 1u);
  EXPECT_EQ(unanswered[0].relay, "holder");
  EXPECT_EQ(unanswered[0].consumer, r.reader.routing_id);
  // The offer that comes after all is for a fetch no longer waiting: nothing is answered.
  EXPECT_FALSE(r.server->relay_offered(r.holder.routing_id, r.offer(order), Clock::now()));
  EXPECT_TRUE(r.server->take_outgoing().empty());
}

}  // namespace
}  // namespace modelcast
