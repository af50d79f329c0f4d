// The producer's and consumer's stages in one process over the loopback transport, without
// UCX or ZeroMQ: a version goes from a snapshot slot through FetchServer and FetchClient into
// the VersionStore, and each stage's decisions are checked on their own.
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "common/digest.h"
#include "common/host_buffer.h"
#include "core/consumer/fetch_client.h"
#include "core/consumer/shaping_target.h"
#include "core/consumer/verifier.h"
#include "core/consumer/version_store.h"
#include "core/producer/digest_worker.h"
#include "core/producer/fetch_server.h"
#include "core/producer/group_commit.h"
#include "core/producer/membership.h"
#include "core/producer/snapshot_store.h"
#include "modelcast/error.h"
#include "test_model.h"
#include "transports/loopback/loopback_transport.h"
#include "transports/transport_set.h"
#include "transports/ucx/ucx_transport.h"

namespace modelcast {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Completions arrive on the transports' threads; the test's "service loop" takes them here.
template <typename T>
class Mailbox {
 public:
  void push(T item) {
    {
      std::lock_guard lock(mutex_);
      items_.push_back(std::move(item));
    }
    cv_.notify_all();
  }
  std::optional<T> pop(std::chrono::milliseconds timeout = 10s) {
    std::unique_lock lock(mutex_);
    if (!cv_.wait_for(lock, timeout, [&] { return !items_.empty(); })) return std::nullopt;
    T item = std::move(items_.front());
    items_.pop_front();
    return item;
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<T> items_;
};

constexpr std::uint64_t kIncarnation = 7;

// A producer's side: slots holding the test model, a fetch server, one joined consumer.
struct ProducerSide {
  explicit ProducerSide(std::shared_ptr<transport::Transport> consumer_transport)
      : model(testmodel::make(1024)), transports({"loopback"}, transport::Side::kProducer), store(3) {
    std::vector<TensorSpec> specs;
    for (auto& t : model) specs.push_back(t.spec);
    layout.model = "test";
    layout.incarnation = kIncarnation;
    layout.tensors = plan_layout(specs, &layout.total_bytes);
    layout.block_bytes = 64u << 10;  // the chunk size below: blocks are chunks
    store.allocate(layout.total_bytes, transports);
    server = std::make_unique<producer::FetchServer>(
        store, transports, kIncarnation, 10s,
        [box = sends_box](const std::string&, std::uint64_t, const transport::TransferResult& r) { box->push(r.ok); });
    server->set_chunk_option(64u << 10);  // several chunks for a 1 MiB model
    consumer.routing_id = "consumer-1";
    consumer.name = "c";
    consumer.peer = transports.at(0).connect(consumer_transport->address(), false, nullptr);
  }

  // Publishes `version` (bytes of testmodel seed 1, or of `content` when given, changed by
  // `change`), digests and all, as the service loop would.
  void publish(std::uint64_t version,
               producer::SnapshotStore::HostState host = producer::SnapshotStore::HostState::kReady,
               std::uint64_t content = 0, const std::function<void(std::byte*)>& change = {}) {
    auto slot = store.reserve(10s).slot;
    testmodel::fill(model, 1, content ? content : version);
    Manifest manifest = layout;
    manifest.version = version;
    for (std::size_t i = 0; i < model.size(); ++i) {
      std::memcpy(store.memory(slot) + manifest.tensors[i].offset, model[i].words.data(), manifest.tensors[i].size);
    }
    if (change) change(store.memory(slot));
    store.publish(slot, manifest, Clock::now(), /*pin=*/true, host);
    store.set_digests(slot, {}, producer::block_digests(store.memory(slot), manifest), nullptr);
    last_slot = slot;
  }
  std::size_t last_slot = 0;

  std::vector<testmodel::Tensor> model;
  // Destroyed after the transports, as in the producer: their last send completions call it.
  std::unique_ptr<producer::FetchServer> server;
  std::shared_ptr<Mailbox<bool>> sends_box = std::make_shared<Mailbox<bool>>();
  Mailbox<bool>& sends = *sends_box;
  transport::TransportSet transports;
  producer::SnapshotStore store;  // its registrations go before the transports
  Manifest layout;
  producer::ConsumerRecord consumer;
};

struct ConsumerSide {
  explicit ConsumerSide(std::size_t buffers = 3)
      : transport(transport::make_loopback_transport()),
        store(buffers, {}),
        client([box = chunks_box](const consumer::ChunkDone& done) { box->push(done); }, true) {
    policy.model = "test";
    store.use_transport(transport);
  }
  std::shared_ptr<transport::Transport> transport;
  consumer::VersionStore store;
  // Shared with the completions: receives still posted when this side is destroyed complete,
  // failed, when the transport (held by its buffers too) goes.
  std::shared_ptr<Mailbox<consumer::ChunkDone>> chunks_box = std::make_shared<Mailbox<consumer::ChunkDone>>();
  Mailbox<consumer::ChunkDone>& chunks = *chunks_box;
  consumer::FetchClient client;
  consumer::VerifierPolicy policy;

  // Asks `p` for `version` (a delta against `base`, when not 0); the checked answer. Throws if
  // there is none.
  protocol::FetchReply answer(ProducerSide& p, std::uint64_t version, std::uint64_t base = 0) {
    auto request = client.begin(kIncarnation, version, base, Clock::now());
    auto reply = p.server->start(p.consumer.routing_id, &p.consumer, request, Clock::now());
    if (!reply || !reply->ok) {
      throw std::runtime_error("version " + std::to_string(version) + " not served: " + (reply ? reply->error : "parked"));
    }
    if (base == 0 && reply->base_version != 0) throw std::runtime_error("a delta answered for a whole version");
    consumer::check_reply(policy, *reply);
    return *reply;
  }
  // `version` fetched whole from `p`, installed and acked: the base of a later delta.
  std::shared_ptr<detail::InstalledVersion> install_whole(ProducerSide& p, std::uint64_t version) {
    auto got = run(answer(p, version));
    if (!got.failure.empty()) throw std::runtime_error("version " + std::to_string(version) + ": " + got.failure);
    auto installed = std::make_shared<detail::InstalledVersion>();
    installed->manifest = got.manifest;
    installed->buffer = got.buffer;
    store.install(installed);
    if (!p.server->on_ack(p.consumer.routing_id, {kIncarnation, version, got.fetch_id, true, ""}, "c", Clock::now()).ok) {
      throw std::runtime_error("version " + std::to_string(version) + ": ack refused");
    }
    return installed;
  }

  // Runs the fetch to its end as the consumer's loop would; returns the finished fetch.
  consumer::FinishedFetch run(const protocol::FetchReply& reply) {
    consumer::check_reply(policy, reply);
    auto finished = client.accept(reply, store.take_buffer(reply.manifest.total_bytes), Clock::now());
    while (!finished) {
      auto chunk = chunks.pop();
      if (!chunk) throw std::runtime_error("a chunk never arrived");
      finished = client.on_chunk(*chunk, Clock::now());
    }
    return std::move(*finished);
  }
};

TEST(Stages, AVersionGoesFromASlotToAnInstalledViewBitExact) {
  ConsumerSide c;
  ProducerSide p(c.transport);
  p.publish(1);
  auto request = c.client.begin(kIncarnation, 1, 0, Clock::now());
  auto reply = p.server->start(p.consumer.routing_id, &p.consumer, request, Clock::now());
  ASSERT_TRUE(reply && reply->ok) << (reply ? reply->error : "parked");
  EXPECT_FALSE(reply->digests_pending);
  EXPECT_EQ(reply->chunk_bytes, 64u << 10);
  EXPECT_EQ(p.store.reader_leases(), 1u);

  auto done = c.run(*reply);
  ASSERT_EQ(done.failure, "");
  // Every block was hashed as it landed, and each matches the producer's digest.
  EXPECT_EQ(done.blocks.size(), block_count(done.manifest));
  EXPECT_NO_THROW(consumer::check_blocks(done.manifest, done.blocks));
  auto installed = std::make_shared<detail::InstalledVersion>();
  installed->manifest = done.manifest;
  installed->buffer = done.buffer;
  c.store.install(installed);
  auto view = c.store.acquire();
  ASSERT_TRUE(view);
  EXPECT_EQ(view.version(), 1u);
  EXPECT_EQ(testmodel::check(view, 1), "");

  auto ack = p.server->on_ack(p.consumer.routing_id, {kIncarnation, 1, request.fetch_id, true, ""}, "c", Clock::now());
  EXPECT_TRUE(ack.known && ack.ok);
  EXPECT_EQ(ack.delivery.bytes, p.layout.total_bytes);
  EXPECT_EQ(p.store.reader_leases(), 0u);
}

TEST(Stages, ACorruptByteIsCaughtByItsBlocksDigestNamingTheTensor) {
  ConsumerSide c;
  ProducerSide p(c.transport);
  p.publish(1);
  // A byte changes on the way (what a bad link or a stray write would do): here in the slot,
  // after its digests were taken, so what is sent no longer matches them.
  const auto& t3 = p.layout.tensors[3];
  p.store.memory(p.last_slot)[t3.offset + 5] ^= std::byte{0x40};
  auto request = c.client.begin(kIncarnation, 1, 0, Clock::now());
  auto reply = p.server->start(p.consumer.routing_id, &p.consumer, request, Clock::now());
  ASSERT_TRUE(reply && reply->ok);
  auto done = c.run(*reply);
  ASSERT_EQ(done.failure, "");
  try {
    consumer::check_blocks(done.manifest, done.blocks);
    FAIL() << "a corrupt block passed";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIntegrity);
    const auto block = (t3.offset + 5) / p.layout.block_bytes;
    EXPECT_NE(std::string(e.what()).find("block " + std::to_string(block) + " "), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'t3')"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("of version 1 failed its digest check"), std::string::npos) << e.what();
  }
}

// A buffer made ahead is the one the next version takes (its size tells it apart from one
// allocated for the version), one made for a model over twice as large is dropped, and making
// buffers ahead never goes past the configured count.
TEST(Stages, ReceiveBuffersMadeAheadAreTakenButNeverPastTheCount) {
  constexpr std::uint64_t kBytes = 3u << 20;
  constexpr std::uint64_t kMost = 64 * kBytes;  // the largest model the consumer takes: no bound here
  consumer::VersionStore store(2, {});
  store.use_transport(transport::make_loopback_transport());
  store.allocate_ahead(kBytes + kBytes / 2, kMost);
  auto first = store.take_buffer(kBytes);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->memory.size(), kBytes + kBytes / 2);

  store.allocate_ahead(8 * kBytes, kMost);
  auto second = store.take_buffer(kBytes);
  ASSERT_TRUE(second);
  EXPECT_EQ(second->memory.size(), kBytes);

  store.allocate_ahead(kBytes, kMost);  // both held by readers: no third
  EXPECT_FALSE(store.take_buffer(kBytes));
  EXPECT_FALSE(store.buffer_available());

  // A free buffer large enough is taken again; nothing is made beside it.
  std::byte* freed = second->memory.data();
  second.reset();
  store.allocate_ahead(kBytes, kMost);
  auto again = store.take_buffer(kBytes);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->memory.data(), freed);
}

// The size a producer states at the join is its word: past the largest model this consumer takes
// (max_model_bytes, half the memory), a buffer made ahead would map and touch memory for a
// version that is refused when it comes.
TEST(Stages, NoReceiveBufferIsMadeAheadPastTheLargestModelTheConsumerTakes) {
  constexpr std::uint64_t kBytes = 2u << 20;
  consumer::VersionStore store(2, {});
  store.use_transport(transport::make_loopback_transport());
  store.allocate_ahead(kBytes + kBytes / 2, kBytes);
  auto buffer = store.take_buffer(kBytes);
  ASSERT_TRUE(buffer);
  EXPECT_EQ(buffer->memory.size(), kBytes) << "a buffer of the size past the bound was made ahead and taken";
  store.allocate_ahead(kBytes + kBytes / 2, 2 * kBytes);  // within the bound: made
  auto ahead = store.take_buffer(kBytes);
  ASSERT_TRUE(ahead);
  EXPECT_EQ(ahead->memory.size(), kBytes + kBytes / 2);
}

// A buffer whose relay sends were given up while still posted (to a receiver that died on this
// host, which UCX never ends) may still be read by them: the store never releases it, not when a
// larger model drops it from the pool nor when the transport changes. Another is released.
TEST(Stages, AReceiveBufferWithSendsGivenUpIsNeverReleased) {
  constexpr std::uint64_t kBytes = 1u << 20;
  consumer::VersionStore store(2, {});
  store.use_transport(transport::make_loopback_transport());
  auto stuck = store.take_buffer(kBytes);
  auto plain = store.take_buffer(kBytes);
  ASSERT_TRUE(stuck && plain);
  stuck->sends_given_up = 1;
  std::weak_ptr<detail::ReceiveBuffer> stuck_weak = stuck, plain_weak = plain;
  stuck.reset();
  plain.reset();
  auto larger = store.take_buffer(2 * kBytes);  // the two small ones leave the pool
  ASSERT_TRUE(larger);
  EXPECT_TRUE(plain_weak.expired()) << "a buffer too small for the model was kept";
  EXPECT_FALSE(stuck_weak.expired()) << "a buffer relay sends may still read was released";

  larger->sends_given_up = 1;
  std::weak_ptr<detail::ReceiveBuffer> larger_weak = larger;
  larger.reset();
  store.use_transport(transport::make_loopback_transport());
  EXPECT_FALSE(larger_weak.expired()) << "a retired transport's buffer relay sends may still read was released";
}

// The memory of shaped views (parts, conversions) is made ahead too: the next version takes it
// (its size tells it apart) when no free member fits, and never past the count of buffers.
TEST(Stages, ShapedViewMemoryMadeAheadIsTakenButNeverPastTheCount) {
  constexpr std::size_t kBytes = 3u << 20;
  consumer::ShapingTarget target(2);
  auto first = std::make_shared<detail::InstalledVersion>();
  target.take(kBytes + kBytes / 2);
  target.install(*first);
  target.allocate_ahead(kBytes + kBytes / 2);
  auto second = std::make_shared<detail::InstalledVersion>();
  target.take(kBytes);
  target.install(*second);
  target.allocate_ahead(kBytes);  // both buffers held by versions: nothing more is made
  ASSERT_TRUE(second->shaped_memory);
  EXPECT_EQ(second->shaped_memory->size(), kBytes + kBytes / 2);
  EXPECT_NE(second->shaped_memory->data(), first->shaped_memory->data());
  EXPECT_THROW(target.take(kBytes), Error);

  // Once a version is gone, its memory is taken again; nothing is made beside it.
  const std::byte* freed = first->shaped_memory->data();
  first.reset();
  target.allocate_ahead(kBytes);
  auto third = std::make_shared<detail::InstalledVersion>();
  EXPECT_EQ(target.take(kBytes), freed);
  target.install(*third);
}

TEST(Stages, FetchServerRefusesBusySupersededAndStaleRequestsAndParksTheUpcomingVersion) {
  ConsumerSide c;
  ProducerSide p(c.transport);
  p.publish(1);
  auto first = p.server->start(p.consumer.routing_id, &p.consumer, {kIncarnation, 1, 1}, Clock::now());
  ASSERT_TRUE(first && first->ok);
  auto busy = p.server->start(p.consumer.routing_id, &p.consumer, {kIncarnation, 1, 2}, Clock::now());
  EXPECT_EQ(busy->refusal, protocol::Refusal::kBusy);
  auto stale = p.server->start(p.consumer.routing_id, &p.consumer, {kIncarnation + 1, 1, 3}, Clock::now());
  EXPECT_EQ(stale->refusal, protocol::Refusal::kStaleIncarnation);
  auto stranger = p.server->start("stranger", nullptr, {kIncarnation, 1, 4}, Clock::now());
  EXPECT_EQ(stranger->refusal, protocol::Refusal::kNotJoined);
  // The consumer left: its lease ends with it, and its fetch counts as undelivered once.
  EXPECT_EQ(p.server->drop(p.consumer.routing_id), 1u);
  EXPECT_EQ(p.store.reader_leases(), 0u);
  EXPECT_EQ(p.server->drop(p.consumer.routing_id), 0u);

  p.publish(2);
  auto superseded = p.server->start(p.consumer.routing_id, &p.consumer, {kIncarnation, 1, 5}, Clock::now());
  EXPECT_EQ(superseded->refusal, protocol::Refusal::kNotHeld);
  // Announced and still being copied: the request waits, and is handed back once published.
  p.server->expect(3);
  EXPECT_FALSE(p.server->start(p.consumer.routing_id, &p.consumer, {kIncarnation, 3, 6}, Clock::now()));
  EXPECT_FALSE(p.server->start(p.consumer.routing_id, &p.consumer, {kIncarnation, 3, 7}, Clock::now()));
  p.publish(3);
  auto parked = p.server->published(3);
  ASSERT_EQ(parked.size(), 1u);  // one per connection, the newest
  EXPECT_EQ(parked[0].second.fetch_id, 7u);
}

// A device version is published before its host copy exists: a two-sided fetch is answered at
// once and each chunk is sent only when the host copy has reached it. The host slot holds
// garbage beyond the staged prefix, as it does while the device-to-host copy runs; a chunk sent
// early would carry it and fail the digests.
TEST(Stages, TwoSidedFetchesOfADeviceVersionSendEachChunkOnlyOnceTheHostCopyHasIt) {
  ConsumerSide c;
  ProducerSide p(c.transport);
  p.publish(1, producer::SnapshotStore::HostState::kPending);
  std::vector<std::byte> staged(p.store.memory(p.last_slot), p.store.memory(p.last_slot) + p.layout.total_bytes);
  std::memset(p.store.memory(p.last_slot), 0xEE, p.layout.total_bytes);
  auto request = c.client.begin(kIncarnation, 1, 0, Clock::now());
  auto reply = p.server->start(p.consumer.routing_id, &p.consumer, request, Clock::now());
  ASSERT_TRUE(reply && reply->ok) << "a fetch of a version being staged waited for the whole host copy";
  consumer::check_reply(c.policy, *reply);
  ASSERT_FALSE(c.client.accept(*reply, c.store.take_buffer(reply->manifest.total_bytes), Clock::now()));
  const std::uint64_t chunk = reply->chunk_bytes;
  const std::size_t chunks = static_cast<std::size_t>((p.layout.total_bytes + chunk - 1) / chunk);
  ASSERT_GE(chunks, 4u);

  // The staging thread reports prefixes that need not fall on chunk boundaries.
  std::uint64_t staged_bytes = 0;
  std::optional<consumer::FinishedFetch> done;
  for (std::uint64_t prefix : {chunk / 2, chunk * 2 + chunk / 3, chunk * 3}) {
    std::memcpy(p.store.memory(p.last_slot) + staged_bytes, staged.data() + staged_bytes, prefix - staged_bytes);
    staged_bytes = prefix;
    p.store.set_host_prefix(p.last_slot, prefix);
    EXPECT_TRUE(p.server->host_progress(1).empty());
    // Exactly the chunks the prefix covers arrive.
    while (c.client.received_bytes() < prefix / chunk * chunk) {
      auto arrived = c.chunks.pop();
      ASSERT_TRUE(arrived) << "a chunk within the staged prefix was not sent";
      done = c.client.on_chunk(*arrived, Clock::now());
      ASSERT_FALSE(done);
    }
    EXPECT_EQ(c.client.received_bytes(), prefix / chunk * chunk);
  }
  std::memcpy(p.store.memory(p.last_slot) + staged_bytes, staged.data() + staged_bytes,
              p.layout.total_bytes - staged_bytes);
  p.store.set_host_state(p.last_slot, true);
  EXPECT_TRUE(p.server->host_progress(1).empty());
  while (!done) {
    auto arrived = c.chunks.pop();
    ASSERT_TRUE(arrived) << "the rest was not sent once the host copy was complete";
    done = c.client.on_chunk(*arrived, Clock::now());
  }
  EXPECT_EQ(done->failure, "");
  EXPECT_NO_THROW(consumer::check_blocks(done->manifest, done->blocks));
  EXPECT_EQ(std::memcmp(done->buffer->memory.data(), staged.data(), staged.size()), 0);
  EXPECT_TRUE(p.server->on_ack(p.consumer.routing_id, {kIncarnation, 1, request.fetch_id, true, ""}, "c", Clock::now()).ok);
}

// A device version published without its host copy (every consumer read the device slot): the
// first two-sided fetch is answered at once and has the copy made, once; its chunks wait for
// the copy as for any version being staged (the host slot holds garbage until then: a chunk
// sent early would carry it).
TEST(Stages, ATwoSidedFetchOfADeviceVersionNotCopiedToTheHostHasItCopiedOnce) {
  ConsumerSide c;
  ProducerSide p(c.transport);
  p.publish(1, producer::SnapshotStore::HostState::kNotCopied);
  std::vector<std::byte> staged(p.store.memory(p.last_slot), p.store.memory(p.last_slot) + p.layout.total_bytes);
  std::memset(p.store.memory(p.last_slot), 0xEE, p.layout.total_bytes);
  EXPECT_TRUE(p.server->take_host_copies().empty());

  auto request = c.client.begin(kIncarnation, 1, 0, Clock::now());
  auto reply = p.server->start(p.consumer.routing_id, &p.consumer, request, Clock::now());
  ASSERT_TRUE(reply && reply->ok) << (reply ? reply->error : "parked");
  consumer::check_reply(c.policy, *reply);
  ASSERT_FALSE(c.client.accept(*reply, c.store.take_buffer(reply->manifest.total_bytes), Clock::now()));
  auto copies = p.server->take_host_copies();
  ASSERT_EQ(copies.size(), 1u) << "the fetch did not ask for the host copy";
  EXPECT_EQ(copies[0], std::make_pair(p.last_slot, std::uint64_t{1}));
  EXPECT_TRUE(p.server->take_host_copies().empty());
  EXPECT_EQ(p.store.host_state(1), producer::SnapshotStore::HostState::kPending);
  EXPECT_FALSE(p.store.begin_host_copy(1)) << "a second fetch would start a second copy";

  std::memcpy(p.store.memory(p.last_slot), staged.data(), staged.size());
  p.store.set_host_state(p.last_slot, true);
  EXPECT_TRUE(p.server->host_progress(1).empty());
  std::optional<consumer::FinishedFetch> done;
  while (!done) {
    auto arrived = c.chunks.pop();
    ASSERT_TRUE(arrived) << "the chunks were not sent once the host copy was complete";
    done = c.client.on_chunk(*arrived, Clock::now());
  }
  EXPECT_EQ(done->failure, "");
  EXPECT_EQ(std::memcmp(done->buffer->memory.data(), staged.data(), staged.size()), 0);
}

// The host copy fails while a fetch is half sent: the fetch is withdrawn (its lease released, the
// consumer told with a refusal of the same fetch id), and later fetches are refused saying why.
TEST(Stages, AFetchHalfSentWhenTheHostCopyFailsIsWithdrawnAndLaterOnesRefused) {
  ConsumerSide c;
  ProducerSide p(c.transport);
  p.publish(1, producer::SnapshotStore::HostState::kPending);
  auto request = c.client.begin(kIncarnation, 1, 0, Clock::now());
  auto reply = p.server->start(p.consumer.routing_id, &p.consumer, request, Clock::now());
  ASSERT_TRUE(reply && reply->ok);
  ASSERT_FALSE(c.client.accept(*reply, c.store.take_buffer(reply->manifest.total_bytes), Clock::now()));
  p.store.set_host_prefix(p.last_slot, reply->chunk_bytes);
  EXPECT_TRUE(p.server->host_progress(1).empty());
  ASSERT_FALSE(c.client.on_chunk(*c.chunks.pop(), Clock::now()));
  EXPECT_EQ(p.store.reader_leases(), 1u);

  p.store.set_host_state(p.last_slot, false);
  auto withdrawn = p.server->host_failed(1, "device lost");
  ASSERT_EQ(withdrawn.size(), 1u);
  EXPECT_EQ(withdrawn[0].routing_id, p.consumer.routing_id);
  EXPECT_FALSE(withdrawn[0].refusal.ok);
  EXPECT_EQ(withdrawn[0].refusal.fetch_id, request.fetch_id);
  EXPECT_NE(withdrawn[0].refusal.error.find("could not be copied to host memory: device lost"), std::string::npos)
      << withdrawn[0].refusal.error;
  EXPECT_EQ(p.store.reader_leases(), 0u) << "the withdrawn fetch still holds its lease";
  EXPECT_TRUE(c.client.withdraws(withdrawn[0].refusal));
  EXPECT_FALSE(c.client.answers(withdrawn[0].refusal)) << "a withdrawal taken for a first answer";
  c.client.abort();

  auto refused = p.server->start(p.consumer.routing_id, &p.consumer, {kIncarnation, 1, 9}, Clock::now());
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->refusal, protocol::Refusal::kNotHeld);
  EXPECT_NE(refused->error.find("could not be copied to host memory"), std::string::npos) << refused->error;
}

// Device versions are staged one after another while the next is already announced: a fetch
// for either waits, none is refused as superseded.
TEST(Stages, SeveralAnnouncedVersionsAllWaitForTheirPublication) {
  ConsumerSide c;
  ProducerSide p(c.transport);
  p.publish(1);
  p.server->expect(2);
  p.server->expect(3);
  EXPECT_FALSE(p.server->start(p.consumer.routing_id, &p.consumer, {kIncarnation, 2, 1}, Clock::now()));
  EXPECT_FALSE(p.server->start("consumer-2", &p.consumer, {kIncarnation, 3, 2}, Clock::now()));
  p.publish(2);
  EXPECT_EQ(p.server->published(2).size(), 2u);
  // 3 is still announced and unpublished: asking for it still waits.
  EXPECT_FALSE(p.server->start("consumer-2", &p.consumer, {kIncarnation, 3, 3}, Clock::now()));
}

// A lease that lapses while its sends are in flight: a transport may go on reading the slot
// until each send reports its end, so the slot stays held until then and the consumer is cut off
// (closing its connection is what ends the sends), told so with a refusal of that fetch.
TEST(Stages, ALeaseThatLapsesWithSendsInFlightHoldsItsSlotUntilTheyEndAndCutsTheConsumerOff) {
  ConsumerSide c;
  ProducerSide p(c.transport);
  p.publish(1);
  const auto slot_of_1 = p.last_slot;
  auto now = Clock::now();
  auto reply = p.server->start(p.consumer.routing_id, &p.consumer, {kIncarnation, 1, 1}, now);
  ASSERT_TRUE(reply && reply->ok);
  const std::size_t chunks = (reply->manifest.total_bytes + reply->chunk_bytes - 1) / reply->chunk_bytes;
  ASSERT_GT(chunks, 1u);
  // The sends' completions are held back: as far as the server knows, all are in flight.
  auto expired = p.store.take_expired(now + 11s);
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_TRUE(p.server->expired(expired[0]).cut_off);
  auto cut = p.server->take_cut_off();
  ASSERT_EQ(cut.size(), 1u);
  EXPECT_EQ(cut[0].routing_id, p.consumer.routing_id);
  EXPECT_EQ(cut[0].sends, chunks);
  ASSERT_TRUE(cut[0].refusal.has_value());
  EXPECT_EQ(cut[0].refusal->fetch_id, 1u);
  EXPECT_EQ(cut[0].refusal->refusal, protocol::Refusal::kNotHeld);
  EXPECT_EQ(p.store.reader_leases(), 0u);
  EXPECT_EQ(p.store.draining_slots(), 1u);
  // Two more versions: neither may go into version 1's slot while its sends are in flight.
  p.publish(2);
  EXPECT_NE(p.last_slot, slot_of_1);
  p.publish(3);
  EXPECT_NE(p.last_slot, slot_of_1);
  // It cannot arrive any more: a late ack is not a delivery.
  EXPECT_FALSE(p.server->on_ack(p.consumer.routing_id, {kIncarnation, 1, 1, true, ""}, "c", now + 12s).known);
  // The sends end (closing the connection ends them): the slot is free after the last one.
  for (std::size_t i = 0; i < chunks; ++i) {
    ASSERT_TRUE(p.sends.pop());
    EXPECT_EQ(p.store.draining_slots(), 1u);
    p.server->on_send_done(p.consumer.routing_id, 1, false, now + 12s);
  }
  EXPECT_EQ(p.store.draining_slots(), 0u);
  auto reserved = p.store.reserve(10s);
  EXPECT_EQ(reserved.slot, slot_of_1);
  EXPECT_EQ(reserved.sends_abandoned, 0u);
  p.store.cancel(reserved.slot);
}

// Sends that never report their end (to a consumer on this host killed mid-transfer, UCX's
// flushing close never ends) hold their slot until a writer's grace runs out. The server forgets
// them too, at the next fetch it retires, rather than keep an entry for every consumer ever cut
// off mid-transfer.
TEST(Stages, SendsAWriterGaveUpOnAreForgottenByTheServerToo) {
  ConsumerSide c;
  ProducerSide p(c.transport);
  auto fetch_and_lapse = [&](const std::string& routing_id, std::uint64_t version, std::uint64_t fetch_id) {
    const auto now = Clock::now();
    auto reply = p.server->start(routing_id, &p.consumer, {kIncarnation, version, fetch_id}, now);
    ASSERT_TRUE(reply && reply->ok);
    auto expired = p.store.take_expired(now + 11s);
    ASSERT_EQ(expired.size(), 1u);
    EXPECT_TRUE(p.server->expired(expired[0]).cut_off);
    EXPECT_EQ(p.server->take_cut_off().size(), 1u);
  };
  p.publish(1);
  const auto slot_of_1 = p.last_slot;
  fetch_and_lapse("consumer-1", 1, 1);
  ASSERT_FALSE(HasFailure());
  EXPECT_EQ(p.server->draining(), 1u);
  p.publish(2);
  auto reply = p.server->start("consumer-2", &p.consumer, {kIncarnation, 2, 1}, Clock::now());
  ASSERT_TRUE(reply && reply->ok);
  p.publish(3);
  // Version 2's slot leased, 3's the newest: the next version can go only where version 1's sends
  // never ended, once the writer's grace is over.
  p.publish(4);
  EXPECT_EQ(p.last_slot, slot_of_1);
  EXPECT_EQ(p.store.draining_slots(), 0u);
  // consumer-2's fetch ends with its sends in flight: its entry is the only one.
  auto expired = p.store.take_expired(Clock::now() + 11s);
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_TRUE(p.server->expired(expired[0]).cut_off);
  EXPECT_EQ(p.server->draining(), 1u) << "the sends the writer gave up on are still awaited";
  EXPECT_EQ(p.store.draining_slots(), 1u);
}

// Version 1, published and received whole by the consumer (its chunk sends are still queued:
// the producer has heard of none of their ends).
struct FetchedWhole {
  std::size_t slot = 0;
  protocol::FetchRequest request;
  protocol::FetchReply reply;
  std::size_t chunks() const { return (reply.manifest.total_bytes + reply.chunk_bytes - 1) / reply.chunk_bytes; }
};
FetchedWhole publish_and_fetch_version_1(ConsumerSide& c, ProducerSide& p) {
  FetchedWhole f;
  p.publish(1);
  f.slot = p.last_slot;
  f.request = c.client.begin(kIncarnation, 1, 0, Clock::now());
  auto reply = p.server->start(p.consumer.routing_id, &p.consumer, f.request, Clock::now());
  EXPECT_TRUE(reply && reply->ok);
  if (reply) f.reply = *reply;
  EXPECT_EQ(c.run(f.reply).failure, "");
  return f;
}

// An ack of a complete version frees the slot at once, although the sends' completions have not
// reached the producer yet: the consumer has every byte, so nothing reads the slot for it any
// more (waiting for the completions stalled publish() for the drain grace on every slot).
TEST(Stages, AnOkAckFreesTheSlotBeforeTheSendsReportTheirEnd) {
  ConsumerSide c;
  ProducerSide p(c.transport);
  const auto fetched = publish_and_fetch_version_1(c, p);
  ASSERT_FALSE(HasFailure());
  // The consumer has it all; the producer has heard of none of its sends' ends.
  EXPECT_TRUE(p.server->on_ack(p.consumer.routing_id, {kIncarnation, 1, fetched.request.fetch_id, true, ""}, "c", Clock::now()).ok);
  EXPECT_EQ(p.store.reader_leases(), 0u);
  EXPECT_EQ(p.store.draining_slots(), 0u);
  p.publish(2);
  p.publish(3);  // the empty slots go first
  p.publish(4);  // then the oldest: version 1's, neither held nor draining
  EXPECT_EQ(p.last_slot, fetched.slot);
  // The completions that come later are ignored.
  for (std::size_t i = 0; i < fetched.chunks(); ++i) {
    ASSERT_TRUE(p.sends.pop());
    EXPECT_FALSE(p.server->on_send_done(p.consumer.routing_id, fetched.request.fetch_id, true, Clock::now()));
  }
  EXPECT_EQ(p.store.draining_slots(), 0u);
}

// A fetch whose sends have all completed waits for its ack; a writer that needs the slot ends
// the lease, nothing reads the slot any more, and an ack that comes later still counts, saying
// how long after its publication the version arrived (read from the slot, which the writer now
// has, such a delivery said 0).
TEST(Stages, ALeaseRevokedAfterItsSendsCompletedFreesTheSlotAndALateAckStillCounts) {
  ConsumerSide c;
  ProducerSide p(c.transport);
  const auto fetched = publish_and_fetch_version_1(c, p);
  ASSERT_FALSE(HasFailure());
  for (std::size_t i = 0; i < fetched.chunks(); ++i) {
    ASSERT_TRUE(p.sends.pop());
    p.server->on_send_done(p.consumer.routing_id, fetched.request.fetch_id, true, Clock::now());
  }
  p.publish(2);
  p.publish(3);
  auto other = p.store.lease(2, "other", Clock::now(), 1h, 0);  // only version 1's slot is left
  ASSERT_TRUE(other);
  auto reserved = p.store.reserve(50ms);  // revokes the lease on version 1
  EXPECT_EQ(reserved.slot, fetched.slot);
  auto expired = p.store.take_expired(Clock::now());
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_FALSE(p.server->expired(expired[0]).cut_off);
  EXPECT_TRUE(p.server->take_cut_off().empty()) << "a consumer with no sends in flight was cut off";
  const auto acked_at = Clock::now() + 1h;  // an ack an hour after the publication
  auto late = p.server->on_ack(p.consumer.routing_id, {kIncarnation, 1, fetched.request.fetch_id, true, ""}, "c",
                               acked_at);
  EXPECT_TRUE(late.known && late.ok && late.after_lease);
  EXPECT_EQ(late.delivery.version, 1u);
  EXPECT_GE(late.delivery.since_publish, 1h);
  EXPECT_LT(late.delivery.since_publish, 2h);
  EXPECT_FALSE(
      p.server->on_ack(p.consumer.routing_id, {kIncarnation, 1, fetched.request.fetch_id, true, ""}, "c", Clock::now()).known);
  p.store.cancel(reserved.slot);
}

// A fetch that fails is one failed delivery, however many of the ways it can end report it: a
// send failure counted it, and then the consumer's failure ack, or its lease's end with sends
// still in flight, counted it again.
TEST(Stages, AFetchWhoseSendFailedCountsAsFailedOnceHoweverItEnds) {
  for (const bool by_ack : {true, false}) {
    SCOPED_TRACE(by_ack ? "ended by the consumer's ack" : "ended by its lease");
    ConsumerSide c;
    ProducerSide p(c.transport);
    p.publish(1);
    const auto now = Clock::now();
    auto reply = p.server->start(p.consumer.routing_id, &p.consumer, {kIncarnation, 1, 1}, now);
    ASSERT_TRUE(reply && reply->ok);
    ASSERT_TRUE(p.sends.pop());
    EXPECT_TRUE(p.server->on_send_done(p.consumer.routing_id, 1, false, now)) << "the send failure was not counted";
    if (by_ack) {
      auto outcome = p.server->on_ack(p.consumer.routing_id, {kIncarnation, 1, 1, false, "transfer failed"}, "c", now);
      ASSERT_TRUE(outcome.known);
      EXPECT_FALSE(outcome.counts_as_failed) << "counted twice";
    } else {
      auto expired = p.store.take_expired(now + 11s);
      ASSERT_EQ(expired.size(), 1u);
      auto expiry = p.server->expired(expired[0]);
      EXPECT_TRUE(expiry.cut_off);
      EXPECT_FALSE(expiry.counts_as_failed) << "counted twice";
      p.server->take_cut_off();
    }
  }
  // Without a send failure, the ack's failure is the one count.
  ConsumerSide c;
  ProducerSide p(c.transport);
  p.publish(1);
  auto reply = p.server->start(p.consumer.routing_id, &p.consumer, {kIncarnation, 1, 1}, Clock::now());
  ASSERT_TRUE(reply && reply->ok);
  auto outcome = p.server->on_ack(p.consumer.routing_id, {kIncarnation, 1, 1, false, "rejected"}, "c", Clock::now());
  EXPECT_TRUE(outcome.known && outcome.counts_as_failed);
}

// A relay that leaves mid-fetch: the fetch it relayed is withdrawn with a refusal to its
// consumer, which the service counts as a failed delivery; drop() counted it as well.
TEST(Stages, AFetchWithdrawnBecauseItsRelayLeftCountsAsFailedOnce) {
  ConsumerSide c;
  ProducerSide p(c.transport);
  p.server = std::make_unique<producer::FetchServer>(
      p.store, p.transports, kIncarnation, 10s,
      [box = p.sends_box](const std::string&, std::uint64_t, const transport::TransferResult& r) { box->push(r.ok); },
      /*relay_fanout=*/1);
  p.server->set_chunk_option(64u << 10);
  producer::ConsumerRecord relay = p.consumer;
  relay.routing_id = "relay";
  relay.name = "relay";
  relay.serves_peers = true;
  relay.host_id = "h";
  producer::ConsumerRecord other = p.consumer;
  other.routing_id = "other";
  other.name = "other";
  other.host_id = "h";
  p.server->joined(relay);
  p.server->joined(other);
  p.publish(1);
  auto first = p.server->start("relay", &relay, c.client.begin(kIncarnation, 1, 0, Clock::now()), Clock::now());
  ASSERT_TRUE(first && first->ok && first->relay.empty());
  auto got = c.run(*first);
  ASSERT_EQ(got.failure, "");
  ASSERT_TRUE(p.server->on_ack("relay", {kIncarnation, 1, got.fetch_id, true, ""}, "relay", Clock::now()).ok);
  auto relayed = p.server->start("other", &other, {kIncarnation, 1, 77}, Clock::now());
  ASSERT_TRUE(relayed && relayed->ok);
  ASSERT_EQ(relayed->relay, "relay");
  (void)p.server->take_outgoing();  // the relay order
  EXPECT_EQ(p.server->drop("relay"), 0u) << "the relayed fetch was counted by drop() and by its refusal";
  std::size_t refusals = 0;
  for (auto& [to, message] : p.server->take_outgoing()) {
    if (auto* reply = std::get_if<protocol::FetchReply>(&message); reply && !reply->ok && to == "other") ++refusals;
  }
  EXPECT_EQ(refusals, 1u);
}

// A transfer that keeps moving holds its lease however long it takes (here six lease_timeouts,
// a chunk every 8 s against a 10 s lease); once its sends stop completing, it lapses one
// lease_timeout after the last. The consumer's side counts the same way.
TEST(Stages, ATransferThatKeepsProgressingKeepsItsLeaseAndOneThatStopsLosesIt) {
  ConsumerSide c;
  ProducerSide p(c.transport);
  p.publish(1);
  const auto t0 = Clock::now();
  auto request = c.client.begin(kIncarnation, 1, 0, t0);
  auto reply = p.server->start(p.consumer.routing_id, &p.consumer, request, t0);
  ASSERT_TRUE(reply && reply->ok);
  ASSERT_FALSE(c.client.accept(*reply, c.store.take_buffer(reply->manifest.total_bytes), t0));
  auto last = t0;
  for (int i = 1; i <= 7; ++i) {
    last = t0 + i * 8s;
    EXPECT_TRUE(p.store.take_expired(last).empty()) << "the lease lapsed " << i * 8 << " s in, with progress every 8 s";
    EXPECT_FALSE(p.server->on_send_done(p.consumer.routing_id, request.fetch_id, true, last));
    auto arrived = c.chunks.pop();
    ASSERT_TRUE(arrived);
    ASSERT_FALSE(c.client.on_chunk(*arrived, last));
    EXPECT_FALSE(c.client.transfer_stalled(last + 9s, 10s)) << "given up " << i * 8 + 9 << " s in while progressing";
  }
  EXPECT_TRUE(c.client.transfer_stalled(last + 11s, 10s)) << "a transfer silent for 11 s is not stalled";
  EXPECT_TRUE(p.store.take_expired(last + 9s).empty());
  auto lapsed = p.store.take_expired(last + 10s);
  ASSERT_EQ(lapsed.size(), 1u) << "the lease outlived lease_timeout without progress";
  EXPECT_EQ(lapsed[0].holder, p.consumer.routing_id);
  p.server->expired(lapsed[0]);
  c.client.abort();
}

// Once every send of a fetch has completed, the producer sees no more progress, yet the bytes
// may still be draining through a slow link (a TCP send completes when the socket takes it).
// The lease then waits for the ack, however late (a lease lapsed this way in CI, on the last
// chunk of a transfer that went on to arrive).
TEST(Stages, ALeaseWhoseSendsHaveAllCompletedWaitsForTheAck) {
  ConsumerSide c;
  ProducerSide p(c.transport);
  p.publish(1);
  const auto t0 = Clock::now();
  auto request = c.client.begin(kIncarnation, 1, 0, t0);
  auto reply = p.server->start(p.consumer.routing_id, &p.consumer, request, t0);
  ASSERT_TRUE(reply && reply->ok);
  ASSERT_FALSE(c.client.accept(*reply, c.store.take_buffer(reply->manifest.total_bytes), t0));
  const std::size_t chunks = transfer::ChunkPlan{reply->manifest.total_bytes, reply->chunk_bytes}.count();
  ASSERT_GT(chunks, 1u);
  std::optional<consumer::FinishedFetch> done;
  for (std::size_t i = 0; i < chunks; ++i) {
    EXPECT_FALSE(p.server->on_send_done(p.consumer.routing_id, request.fetch_id, true, t0 + 1s));
    auto arrived = c.chunks.pop();
    ASSERT_TRUE(arrived);
    done = c.client.on_chunk(*arrived, t0 + 1s);
  }
  ASSERT_TRUE(done);
  EXPECT_TRUE(p.store.take_expired(t0 + 1s + 6 * 10s).empty()) << "the lease lapsed while the ack was on its way";
  auto outcome = p.server->on_ack(p.consumer.routing_id, {kIncarnation, 1, request.fetch_id, true, {}}, "consumer",
                                  t0 + 61s);
  EXPECT_TRUE(outcome.known && outcome.ok && !outcome.after_lease);
}

// A slow consumer's lease may outlive any number of lease_timeouts, but never stalls the
// trainer for longer than one: publish() then revokes it (the consumer fetches a newer version).
// Here the reader's lease would run for an hour; the writer waits 50 ms.
TEST(Stages, PublishWaitsForALeasedSlotNoLongerThanTheLeaseTimeout) {
  ConsumerSide c;
  ProducerSide p(c.transport);
  for (std::uint64_t v = 1; v <= 3; ++v) p.publish(v);
  auto reader = p.store.lease(1, "slow", Clock::now(), 1h, 0).value();
  auto fast = p.store.lease(2, "fast", Clock::now(), 1h, 0).value();
  ASSERT_NE(reader.lease.slot, fast.lease.slot);
  const auto slot = p.store.reserve(50ms).slot;
  EXPECT_EQ(slot, reader.lease.slot) << "the oldest version's slot is the one to take";
  auto ended = p.store.take_expired(Clock::now());
  ASSERT_EQ(ended.size(), 1u);
  EXPECT_EQ(ended[0].holder, "slow");
  EXPECT_FALSE(p.store.renew(reader.lease.id, Clock::now(), 1s)) << "a revoked lease came back";
  EXPECT_TRUE(p.store.renew(fast.lease.id, Clock::now(), 1s));
  p.store.cancel(slot);
}

// A revoked lease whose sends are still in flight leaves its slot draining; the writer waits for
// that slot (at most the drain grace) instead of revoking the readers of the next slot, and the
// next: one slot is needed, so one slot's readers are cut off.
TEST(Stages, AWriterPastItsLeaseTimeoutRevokesTheReadersOfOneSlotOnly) {
  ConsumerSide c;
  ProducerSide p(c.transport);
  for (std::uint64_t v = 1; v <= 3; ++v) p.publish(v);
  auto oldest = p.store.lease(1, "oldest", Clock::now(), 1h, 0).value();
  auto older = p.store.lease(2, "older", Clock::now(), 1h, 0).value();
  ASSERT_TRUE(p.store.set_sending(oldest.lease.id, true));
  ASSERT_TRUE(p.store.set_sending(older.lease.id, true));
  const auto reserved = p.store.reserve(1ms);
  EXPECT_EQ(reserved.slot, oldest.lease.slot);
  EXPECT_EQ(reserved.sends_abandoned, 1u) << "the revoked lease's sends never ended here: given up after the grace";
  const auto ended = p.store.take_expired(Clock::now());
  ASSERT_EQ(ended.size(), 1u) << "the readers of more than one slot were cut off";
  EXPECT_EQ(ended[0].holder, "oldest");
  EXPECT_TRUE(p.store.renew(older.lease.id, Clock::now(), 1s));
  p.store.cancel(reserved.slot);
}

// Each group pins a slot while it switches; so does the persist writer for a whole disk write.
// Three slots with persistence leave none for a group: one was admitted, and while it waited for
// a member and the writer wrote, publish() waited for the disk.
TEST(Stages, GroupsAreAdmittedOnlyToSlotsNeitherPublishNorThePersistWriterNeeds) {
  ConsumerSide c;
  ProducerSide p(c.transport);
  producer::GroupCommit without_persist(p.store, 3, /*persist_pins=*/false, 8);
  EXPECT_EQ(without_persist.refusal("g", 1), "");
  producer::GroupCommit with_persist(p.store, 3, /*persist_pins=*/true, 8);
  const auto refused = with_persist.refusal("g", 1);
  EXPECT_NE(refused.find("this producer's 3 snapshot slots hold 0 (snapshot_slots - 3"), std::string::npos) << refused;
  EXPECT_NE(refused.find("the persist writer pins one while it writes"), std::string::npos) << refused;
  producer::GroupCommit four(p.store, 4, /*persist_pins=*/true, 8);
  EXPECT_EQ(four.refusal("g", 1), "");
  four.joined("r", "g", 1);
  EXPECT_NE(four.refusal("h", 1).find("would be group 2"), std::string::npos);
}

// A member whose transfer of the group's target failed (a relay killed under it) gave the target
// up for the whole group, as a rejection does, and the group took no version until the trainer
// published again: for good where training had paused or ended. Such a member asks again now:
// the target stays until it holds it, or until a newer version is published.
TEST(Stages, AGroupKeepsItsTargetForAMemberWhoseTransferFailedAndGivesItUpForARejection) {
  ConsumerSide c;
  ProducerSide p(c.transport);
  producer::GroupCommit groups(p.store, 3, /*persist_pins=*/false, 8);
  groups.joined("a", "g", 2);
  groups.joined("b", "g", 2);
  auto given_up = [&] { return groups.announcement("a")->second.given_up; };
  p.publish(1);
  groups.published(1);
  ASSERT_EQ(groups.target_of("a"), 1u);
  groups.acked("a", 1, true);
  groups.acked("b", 1, false, /*again=*/true);
  EXPECT_EQ(groups.target_of("b"), 1u) << "the target was given up for a failed transfer";
  EXPECT_EQ(given_up(), 0u);
  groups.acked("b", 1, true);  // its fetch again
  EXPECT_EQ(groups.committed_of("a"), 1u);

  // A member that asked again and then took the target no longer moves it: a newer version
  // published while the other member still fetches waits, as it would have without the failure.
  p.publish(2);
  groups.published(2);
  ASSERT_EQ(groups.target_of("a"), 2u);
  groups.acked("a", 2, false, /*again=*/true);
  groups.acked("a", 2, true);
  p.publish(3);
  groups.published(3);
  EXPECT_EQ(groups.target_of("a"), 2u) << "a member that recovered moved the target on";
  groups.acked("b", 2, true);
  ASSERT_EQ(groups.committed_of("a"), 2u);
  ASSERT_EQ(groups.target_of("a"), 3u);

  // A newer version published while a member asks again: the group takes it instead.
  groups.acked("a", 3, false, /*again=*/true);
  p.publish(4);
  groups.published(4);
  EXPECT_EQ(groups.target_of("a"), 4u);
  EXPECT_EQ(given_up(), 0u);

  // A rejection ends the target: not taken again. Members are pointed back at what they serve.
  groups.acked("b", 4, false);
  EXPECT_EQ(groups.target_of("a"), 2u) << "with no target, a member may fetch the committed version";
  EXPECT_EQ(given_up(), 4u);
  EXPECT_EQ(groups.committed_of("a"), 2u);
}

// Members "a" and "b" of group "g" (of two), which committed version 1.
void commit_version_1(ProducerSide& p, producer::GroupCommit& groups) {
  groups.joined("a", "g", 2);
  groups.joined("b", "g", 2);
  p.publish(1);
  groups.published(1);
  groups.acked("a", 1, true);
  groups.acked("b", 1, true);
  ASSERT_EQ(groups.committed_of("a"), 1u);
}

// A member that takes the place of one that left, after the group's target was rejected, is
// told the committed version and must be able to fetch it: it is no longer the newest, and the
// fetch server served only the newest and the target, so the group stayed short for good.
TEST(Stages, AMemberThatReplacesAnotherAfterARejectionCanFetchTheCommittedVersion) {
  ConsumerSide c;
  ProducerSide p(c.transport);
  producer::GroupCommit groups(p.store, 3, /*persist_pins=*/false, 8);
  commit_version_1(p, groups);
  ASSERT_FALSE(HasFailure());
  p.publish(2);
  groups.published(2);
  ASSERT_EQ(groups.target_of("a"), 2u);
  groups.acked("b", 2, false);  // b rejects version 2
  groups.left("a");
  groups.joined("a2", "g", 2);
  auto told = groups.announcement("a2");
  ASSERT_TRUE(told);
  ASSERT_EQ(told->first, 1u);
  producer::ConsumerRecord a2 = p.consumer;
  a2.routing_id = "a2";
  auto reply = p.server->start("a2", &a2, {kIncarnation, told->first, 1}, Clock::now(), groups.target_of("a2"));
  ASSERT_TRUE(reply);
  EXPECT_TRUE(reply->ok) << reply->error;
}

// A version newer than the one a member rejected, published while the group prepared that one,
// becomes the target at the rejection: the group waited for the next publish, for good where
// training had stopped, and meanwhile pointed a new member at a committed version no slot held.
TEST(Stages, ARejectedTargetGivesWayToANewerVersionAlreadyPublished) {
  ConsumerSide c;
  ProducerSide p(c.transport);
  producer::GroupCommit groups(p.store, 3, /*persist_pins=*/false, 8);
  commit_version_1(p, groups);
  ASSERT_FALSE(HasFailure());
  for (std::uint64_t v = 2; v <= 4; ++v) {  // 2 is the target, pinned; 4 takes version 1's slot
    p.publish(v);
    groups.published(v);
  }
  groups.left("b");
  groups.joined("b2", "g", 2);
  ASSERT_EQ(groups.target_of("b2"), 2u);
  groups.acked("a", 2, false);  // a rejects 2
  EXPECT_EQ(groups.target_of("b2"), 4u);
  auto told = groups.announcement("b2");
  ASSERT_TRUE(told);
  EXPECT_EQ(told->first, 4u) << "pointed at version " << told->first;
}

// A consumer joining again in its group's place: its old record keeps its place until the join
// is admitted. Refused (here: another group size), the old record stayed joined but had lost its
// place, and the group waited for a member it still had.
TEST(Stages, AGroupPlaceIsGivenUpOnlyByAnAdmittedJoin) {
  ConsumerSide c;
  ProducerSide p(c.transport);
  producer::GroupCommit groups(p.store, 3, /*persist_pins=*/false, 8);
  groups.joined("a", "g", 2);
  groups.joined("b", "g", 2);
  EXPECT_NE(groups.refusal("g", 2), "") << "a full group took a third member";
  EXPECT_EQ(groups.refusal("g", 2, {"b"}), "") << "b's own place was refused to it";
  EXPECT_NE(groups.refusal("g", 3, {"b"}), "") << "a member joining again changed the group's size";
  EXPECT_EQ(groups.refusal("g", 3, {"a", "b"}), "") << "the group's every member joining again is a new group";
}

// Publishing a version frees the slot of the one before it (nobody reads it here): a publish()
// already waiting for a slot takes it then, not once its lease timeout has passed. The wait was
// woken only by a lease or digest event, so with integrity off every other back-to-back
// publish() stalled for the whole lease timeout (here 60 s; the wait below fails at 30 s).
TEST(Stages, PublishingAVersionWakesAWriterWaitingForTheSlotItFrees) {
  ConsumerSide c;
  ProducerSide p(c.transport);
  p.publish(1);
  p.publish(2);
  const std::size_t second = p.last_slot;
  auto reader = p.store.lease(1, "reader", Clock::now(), 1h, 0).value();
  const auto third = p.store.reserve(10s).slot;  // the only free slot: version 1's is read
  auto waiting = std::async(std::launch::async, [&] { return p.store.reserve(60s).slot; });
  while (p.store.writers_waiting() == 0) std::this_thread::yield();  // asleep in the wait
  Manifest manifest = p.layout;
  manifest.version = 3;
  p.store.publish(third, manifest, Clock::now(), /*pin=*/false, producer::SnapshotStore::HostState::kReady);
  ASSERT_EQ(waiting.wait_for(30s), std::future_status::ready) << "the writer slept through the slot's release";
  EXPECT_EQ(waiting.get(), second);
  EXPECT_TRUE(p.store.renew(reader.lease.id, Clock::now(), 1s)) << "a reader's lease was revoked for a slot that was free";
  p.store.cancel(second);
}

// A consumer holding version 1 fetches version 2, in which two blocks changed: exactly those
// two travel, the rest is copied from version 1, and the result is version 2 bit-exact. A byte
// flipped in a received block is caught by its block digest, naming block and tensor.
TEST(Stages, ADeltaSendsOnlyTheChangedBlocksAndEachIsChecked) {
  ConsumerSide c;
  ProducerSide p(c.transport);
  p.publish(1);
  auto base = c.install_whole(p, 1);
  ASSERT_EQ(base->manifest.block_digests.size(), block_count(p.layout));

  const std::uint64_t block = p.layout.block_bytes;
  auto change = [&](std::byte* slot) {
    slot[2 * block + 17] ^= std::byte{1};
    slot[5 * block] ^= std::byte{0x80};
  };
  p.publish(2, producer::SnapshotStore::HostState::kReady, /*content=*/1, change);
  std::vector<std::byte> expected(p.store.memory(p.last_slot), p.store.memory(p.last_slot) + p.layout.total_bytes);
  for (bool corrupt : {false, true}) {
    auto request = c.client.begin(kIncarnation, 2, 1, Clock::now());
    EXPECT_EQ(request.base_version, 1u);
    auto reply = p.server->start(p.consumer.routing_id, &p.consumer, request, Clock::now());
    ASSERT_TRUE(reply && reply->ok) << (reply ? reply->error : "parked");
    EXPECT_EQ(reply->base_version, 1u);
    auto delivered = p.server->on_ack(p.consumer.routing_id, {kIncarnation, 2, request.fetch_id, true, ""}, "c",
                                      Clock::now());
    EXPECT_EQ(delivered.delivery.bytes, 2 * block) << "the producer sent more than the two changed blocks";
    consumer::check_reply(c.policy, *reply);
    auto buffer = c.store.take_buffer(reply->manifest.total_bytes);
    auto finished = c.client.accept(*reply, buffer, Clock::now(), base);
    while (!finished) {
      auto chunk = c.chunks.pop();
      ASSERT_TRUE(chunk) << "a changed block never arrived";
      // What a bad link or a lying relay would do: a byte of a received block changes.
      if (corrupt && chunk->chunk == 5) buffer->memory[5 * block + 9] ^= std::byte{4};
      finished = c.client.on_chunk(*chunk, Clock::now());
    }
    ASSERT_EQ(finished->failure, "");
    EXPECT_EQ(finished->base_version, 1u);
    EXPECT_EQ(finished->bytes_received, 2 * block);
    ASSERT_EQ(finished->blocks.size(), 2u);
    consumer::Arrived arrived{{}, true, finished->blocks};
    if (!corrupt) {
      EXPECT_EQ(std::memcmp(finished->buffer->memory.data(), expected.data(), expected.size()), 0)
          << "the assembled version differs from the producer's";
      EXPECT_NO_THROW(consumer::check_arrived(c.policy, finished->manifest, arrived, {}, nullptr));
      continue;
    }
    try {
      consumer::check_arrived(c.policy, finished->manifest, arrived, {}, nullptr);
      FAIL() << "a corrupt block passed";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kIntegrity);
      EXPECT_NE(std::string(e.what()).find("block 5 "), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("in tensor"), std::string::npos) << e.what();
    }
  }
}

// A delta given up while its receives are still live (a relay killed mid-send: UCX cannot
// cancel a receive already matched to a send, and the dead sender's never ends). Its buffer is
// handed out as stuck once it made no progress for the timeout, and set aside so that another is
// allocated; its base is let go at once. Both pinned, they held a two-buffer pool's only free
// buffer for good (with three, a relay killed mid-version stopped a consumer's updates).
TEST(Stages, AnAbandonedDeltaLetsGoOfItsBaseAndItsBufferIsReplacedOnceItsReceivesStopForTheTimeout) {
  ConsumerSide c(2);
  ProducerSide p(c.transport);
  p.publish(1);
  auto base = c.install_whole(p, 1);
  p.publish(2, producer::SnapshotStore::HostState::kReady, /*content=*/1,
            [&](std::byte* slot) { slot[3 * p.layout.block_bytes] ^= std::byte{1}; });
  auto reply = c.answer(p, 2, 1);
  ASSERT_EQ(reply.base_version, 1u);
  auto buffer = c.store.take_buffer(reply.manifest.total_bytes);
  ASSERT_TRUE(buffer);
  ASSERT_FALSE(c.client.accept(reply, buffer, Clock::now(), base));
  // The changed block's receive ended, but the loop never hears of it: to the client, a
  // receive still under way, as one whose sender died would be.
  const long base_refs = base.use_count();
  ASSERT_TRUE(c.client.abort());
  EXPECT_EQ(base.use_count(), base_refs - 1) << "an abandoned fetch still pins its delta base";
  ASSERT_TRUE(c.client.draining());
  EXPECT_TRUE(c.client.draining_holds_buffers());

  // Offered to be set aside once it made no progress for the timeout, and again while refused;
  // never again once taken.
  std::vector<std::shared_ptr<detail::ReceiveBuffer>> offered;
  bool take = false;
  auto offer = [&](const std::shared_ptr<detail::ReceiveBuffer>& b) {
    offered.push_back(b);
    return take && c.store.set_aside(b);
  };
  const auto later = Clock::now() + 10s;
  EXPECT_EQ(c.client.set_aside_stuck(Clock::now(), 10s, offer), 0u);
  EXPECT_TRUE(offered.empty()) << "taken as stuck before the timeout";
  EXPECT_EQ(c.client.set_aside_stuck(later, 10s, offer), 1u);
  ASSERT_EQ(offered.size(), 1u);
  EXPECT_EQ(offered[0], buffer);
  EXPECT_TRUE(c.client.draining_holds_buffers()) << "a buffer refused counts as set aside";

  // The pool's two buffers: the installed version's and the stuck one.
  std::weak_ptr<detail::ReceiveBuffer> stuck_weak = buffer;
  buffer.reset();
  offered.clear();
  EXPECT_FALSE(c.store.buffer_available());
  EXPECT_FALSE(c.store.take_buffer(p.layout.total_bytes));
  take = true;
  EXPECT_EQ(c.client.set_aside_stuck(later, 10s, offer), 0u);
  ASSERT_EQ(offered.size(), 1u);
  EXPECT_FALSE(c.client.draining_holds_buffers());
  EXPECT_EQ(c.client.set_aside_stuck(later, 10s, offer), 0u);
  EXPECT_EQ(offered.size(), 1u) << "a buffer set aside offered again";
  offered.clear();
  auto replacement = c.store.take_buffer(p.layout.total_bytes);
  ASSERT_TRUE(replacement);
  EXPECT_NE(replacement, stuck_weak.lock());

  // At most the count set aside at once: memory stays within twice the pool.
  ASSERT_TRUE(c.store.set_aside(replacement));
  auto another = c.store.take_buffer(p.layout.total_bytes);
  ASSERT_TRUE(another);
  EXPECT_FALSE(c.store.set_aside(another)) << "more buffers set aside than the count";

  // Its receives end after all: the buffer goes, and does not come back to the pool.
  auto chunk = c.chunks.pop();
  ASSERT_TRUE(chunk) << "the changed block's receive never ended";
  EXPECT_FALSE(c.client.on_chunk(*chunk, Clock::now()));
  EXPECT_FALSE(c.client.draining());
  EXPECT_TRUE(stuck_weak.expired()) << "a set-aside buffer outlived its receives";
}

// A fetch given up at a rejoin, its sender gone: its receives were left on the retired
// transport for good, each producer that died mid-transfer costing a buffer and a worker. The
// buffers of abandoned fetches on another transport than the current one are handed back.
TEST(Stages, AbandonedFetchesOnARetiredTransportHandTheirBuffersBack) {
  ConsumerSide c;
  ProducerSide p(c.transport);
  p.publish(1);
  auto reply = c.answer(p, 1);
  auto buffer = c.store.take_buffer(reply.manifest.total_bytes);
  ASSERT_TRUE(buffer);
  // Its completions never reach the client: to it, receives still under way.
  ASSERT_FALSE(c.client.accept(reply, buffer, Clock::now()));
  ASSERT_TRUE(c.client.abort());
  ASSERT_TRUE(c.client.draining());
  const transport::Transport* retired = nullptr;
  auto is_retired = [&](const transport::Transport* t) { return t == retired; };
  EXPECT_TRUE(c.client.take_retired(is_retired).empty()) << "taken from a transport still offered";
  ASSERT_TRUE(c.client.draining());
  retired = c.transport.get();  // made afresh at a rejoin
  auto taken = c.client.take_retired(is_retired);
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(taken[0].buffer, buffer);
  EXPECT_FALSE(c.client.draining());
}

// What a retired fetch held goes in an order that never touches its transport after it went:
// the buffer was its last holder, and dropping the import after it posted to the freed UCX
// worker (a crash, on a relay's one-sided read abandoned at a rejoin).
TEST(Stages, AbandonedReceivesGoBeforeTheTransportTheyNeed) {
  auto owner = transport::make_ucx_transport({.one_sided = true});
  std::shared_ptr<transport::Transport> reader = transport::make_ucx_transport({.one_sided = true});
  HostBuffer source(1u << 16);
  auto source_region = owner->register_memory(source.data(), source.size(), transport::MemoryLocation::host());
  const auto descriptor = owner->export_region(*source_region);
  const auto peer = reader->connect(owner->address(), false, nullptr);
  auto buffer = std::make_shared<detail::ReceiveBuffer>();
  buffer->transport = reader;
  buffer->owned = HostBuffer(1u << 16);
  buffer->memory = buffer->owned.span();
  buffer->region = reader->register_memory(buffer->memory.data(), buffer->memory.size(), transport::MemoryLocation::host());
  std::vector<consumer::FetchClient::AbandonedReceives> retired;
  retired.push_back({reader, reader->import_region(peer, descriptor), std::move(buffer)});
  std::weak_ptr<transport::Transport> gone = reader;
  reader.reset();  // as after a rejoin: held by the abandoned fetch alone
  retired.clear();
  EXPECT_TRUE(gone.expired());
}

// No base the producer knows (a consumer that joined late, or whose base fell out of the
// history): the whole version is sent.
TEST(Stages, ABaseTheProducerDoesNotKnowGetsTheWholeVersion) {
  ConsumerSide c;
  ProducerSide p(c.transport);
  p.publish(5);
  auto request = c.client.begin(kIncarnation, 5, 3, Clock::now());
  auto reply = p.server->start(p.consumer.routing_id, &p.consumer, request, Clock::now());
  ASSERT_TRUE(reply && reply->ok);
  EXPECT_EQ(reply->base_version, 0u);
  auto done = c.run(*reply);
  EXPECT_EQ(done.bytes_received, p.layout.total_bytes);
}

TEST(Stages, MembershipAdmitsByConnectionNeverByName) {
  producer::Membership members("m", 2);
  auto join = [](std::string name, std::uint64_t session) {
    protocol::JoinRequest request;
    request.model = "m";
    request.consumer_name = std::move(name);
    request.host_id = "host";
    request.session = session;
    return request;
  };
  auto other_model = join("x", 1);
  other_model.model = "other";
  EXPECT_EQ(members.decide("a", "", other_model).refusal, protocol::Refusal::kWrongModel);
  EXPECT_EQ(members.decide("a", "", join("", 1)).refusal, protocol::Refusal::kBadRequest);
  // Wants no version could meet are refused at the join, saying which.
  auto bad_wants = join("x", 1);
  bad_wants.wants = {modelcast::TensorWant::shard("w", 0, 2, 2)};
  auto refused = members.decide("a", "", bad_wants);
  EXPECT_EQ(refused.refusal, protocol::Refusal::kBadRequest);
  EXPECT_NE(refused.error.find("'w'"), std::string::npos) << refused.error;
  members.add({"shared-name", "a", 11, "", 0, 1, Clock::now(), {}, {}, false});
  auto same_name = members.decide("b", "", join("shared-name", 22));
  EXPECT_EQ(same_name.refusal, protocol::Refusal::kNone);
  EXPECT_TRUE(same_name.replaces.empty());
  members.add({"shared-name", "b", 22, "", 0, 2, Clock::now(), {}, {}, false});
  EXPECT_EQ(members.decide("c", "", join("third", 33)).refusal, protocol::Refusal::kFull);
  // The same consumer object on a new connection (its session) replaces its own record, even
  // when full; with another key it does not.
  auto reconnect = members.decide("c", "", join("shared-name", 11));
  EXPECT_EQ(reconnect.refusal, protocol::Refusal::kNone);
  EXPECT_EQ(reconnect.replaces, std::vector<std::string>{"a"});
  EXPECT_EQ(members.decide("c", "other-key", join("shared-name", 11)).refusal, protocol::Refusal::kFull);
  auto now = Clock::now();
  members.find("a")->last_seen = now - 20s;
  EXPECT_EQ(members.silent(now, 5s), std::vector<std::string>{"a"});
  EXPECT_EQ(members.find_peer(0, 2), std::optional<std::string>("b"));
  EXPECT_EQ(members.find_peer(1, 2), std::nullopt) << "a peer id is per transport";
}

TEST(Stages, VerifierRefusesPlansAndReplaysBeforeAnythingIsAllocated) {
  protocol::FetchReply reply;
  reply.ok = true;
  reply.manifest.model = "test";
  reply.manifest.tensors = plan_layout({{"w", DType::kF32, {1 << 20}}}, &reply.manifest.total_bytes);
  reply.chunk_bytes = 1;
  consumer::VerifierPolicy policy;
  policy.model = "test";
  EXPECT_THROW(consumer::check_reply(policy, reply), Error);
  // A chunk of nearly 2^64 bytes: (total + chunk - 1) / chunk wraps to 0 chunks and 0 blocks
  // while one chunk lands, whose digest was then looked up in an empty list.
  reply.chunk_bytes = reply.manifest.block_bytes = ~std::uint64_t{0} - 1023;
  EXPECT_EQ(block_count(reply.manifest), 1u);
  try {
    consumer::check_reply(policy, reply);
    ADD_FAILURE() << "a chunk of 2^64 - 1024 bytes was taken";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kProtocol);
    EXPECT_NE(std::string(e.what()).find("-byte chunks; at most 1073741824 expected"), std::string::npos) << e.what();
  }
  reply.chunk_bytes = 64u << 10;
  reply.manifest.block_bytes = 64u << 10;
  EXPECT_NO_THROW(consumer::check_reply(policy, reply));
  policy.model = "other";
  EXPECT_THROW(consumer::check_reply(policy, reply), Error);

  Manifest installed, replayed;
  installed.incarnation = 1;
  installed.publish_time_ns = 2000;
  replayed.incarnation = 2;
  replayed.publish_time_ns = 1000;
  EXPECT_THROW(consumer::check_not_a_replay(&installed, replayed), Error);
  // A restarted producer whose clock is behind is refused alike: the message says so, and by how
  // much ("a replay" alone made an innocent clock look like an attack).
  installed.publish_time_ns = 3'600'000'000'000;
  replayed.publish_time_ns = 1'500'000'000;
  try {
    consumer::check_not_a_replay(&installed, replayed);
    ADD_FAILURE() << "taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("published 3598.500 s before the version installed"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("or a producer restarted on a host whose clock is behind"), std::string::npos)
        << e.what();
  }
  installed.publish_time_ns = 2000;
  replayed.publish_time_ns = 3000;
  EXPECT_NO_THROW(consumer::check_not_a_replay(&installed, replayed));
  EXPECT_NO_THROW(consumer::check_not_a_replay(nullptr, replayed));
}

// A peer's blocks are checked before anything is allocated or posted: digests that do not
// match the block count, blocks cut otherwise than the transfer, a delta without its digests.
TEST(Stages, VerifierRefusesBlocksThatDoNotFitTheManifestOrTheTransfer) {
  protocol::FetchReply reply;
  reply.ok = true;
  reply.manifest.model = "test";
  reply.manifest.tensors = plan_layout({{"w", DType::kF32, {1 << 20}}}, &reply.manifest.total_bytes);
  reply.chunk_bytes = 1u << 20;
  reply.manifest.block_bytes = 1u << 20;
  reply.manifest.block_digests.assign(block_count(reply.manifest), 7);
  consumer::VerifierPolicy policy;
  policy.model = "test";
  EXPECT_NO_THROW(consumer::check_reply(policy, reply));
  auto refused = [&](const std::string& fragment) {
    try {
      consumer::check_reply(policy, reply);
      ADD_FAILURE() << "accepted; expected a refusal naming '" << fragment << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kProtocol);
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  reply.manifest.block_digests.push_back(7);
  refused("block digests for");
  reply.manifest.block_digests.pop_back();
  reply.chunk_bytes = 2u << 20;
  refused("-byte blocks");
  reply.chunk_bytes = 1u << 20;
  reply.base_version = 3;
  reply.digests_pending = true;
  refused("a delta answer without the block digests");
  reply.digests_pending = false;
  EXPECT_NO_THROW(consumer::check_reply(policy, reply));
  reply.manifest.block_bytes = 0;
  refused("block digests but no block size");
  // Host (XXH3) integrity is checked block by block: a version without blocks would go unchecked.
  reply.base_version = 0;
  reply.manifest.block_digests.clear();
  reply.chunk_bytes = 64u << 10;
  refused("XXH3 integrity without the blocks it is checked by");
  reply.manifest.integrity = false;
  EXPECT_NO_THROW(consumer::check_reply(policy, reply));
}

TEST(LoopbackTransport, MatchesByTagInEitherOrderAndCancelsReceives) {
  // Declared before the transports, so that it outlives their completion threads (joined when
  // they are destroyed): the last push may still be notifying after the test took its item.
  Mailbox<std::pair<std::string, bool>> done;
  auto a = transport::make_loopback_transport();
  auto b = transport::make_loopback_transport();
  std::vector<std::byte> source(100), early(100), late(100), never(100);
  for (std::size_t i = 0; i < source.size(); ++i) source[i] = static_cast<std::byte>(i * 7);
  auto src = a->register_memory(source.data(), source.size(), transport::MemoryLocation::host());
  auto early_region = b->register_memory(early.data(), early.size(), transport::MemoryLocation::host());
  auto late_region = b->register_memory(late.data(), late.size(), transport::MemoryLocation::host());
  auto never_region = b->register_memory(never.data(), never.size(), transport::MemoryLocation::host());
  auto peer = a->connect(b->address(), false, nullptr);
  auto note = [&](std::string what) { return [&done, what](const transport::TransferResult& r) { done.push({what, r.ok}); }; };
  b->post_recv(*early_region, 0, 100, 1, note("recv 1"));  // receive first
  a->post_send(peer, *src, 0, 100, 1, note("send 1"));
  a->post_send(peer, *src, 10, 50, 2, note("send 2"));      // send first: waits as unexpected
  b->post_recv(*late_region, 0, 50, 2, note("recv 2"));  // a receive takes a message of its length
  auto cancelled = b->post_recv(*never_region, 0, 100, 3, note("recv 3"));
  b->cancel(cancelled);
  std::map<std::string, bool> results;
  for (int i = 0; i < 5; ++i) {
    auto r = done.pop();
    ASSERT_TRUE(r);
    results[r->first] = r->second;
  }
  EXPECT_TRUE(results["recv 1"] && results["send 1"] && results["recv 2"] && results["send 2"]);
  EXPECT_FALSE(results["recv 3"]);
  EXPECT_EQ(early, source);
  EXPECT_EQ(std::memcmp(late.data(), source.data() + 10, 50), 0);
  EXPECT_THROW(a->register_memory(source.data(), 1, transport::MemoryLocation::cuda(0)), Error);
  EXPECT_THROW(a->connect(std::vector<std::byte>(3), false, nullptr), Error);
}

}  // namespace
}  // namespace modelcast
