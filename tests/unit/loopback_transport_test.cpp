// The loopback transport's threads: each side's completions run on the thread of the transport
// that posted the transfer, so a sender's callbacks are over once the sender is destroyed, as
// with a network transport. (They used to run on the receiver's thread, where a send that found
// no receive could complete after its sender and everything its callback touched were gone.)
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <future>

#include "common/host_buffer.h"
#include "transports/loopback/loopback_transport.h"

namespace modelcast::transport {
namespace {

using namespace std::chrono_literals;

// A receiver and a sender connected to it, the first half of `memory` the sender's region and the
// second half the receiver's.
struct Pair {
  std::unique_ptr<Transport> receiver = make_loopback_transport();
  std::unique_ptr<Transport> sender = make_loopback_transport();
  HostBuffer memory{4096};
  std::unique_ptr<MemoryRegion> sender_region = sender->register_memory(memory.data(), 2048, MemoryLocation::host());
  std::unique_ptr<MemoryRegion> receiver_region =
      receiver->register_memory(memory.data() + 2048, 2048, MemoryLocation::host());
  PeerId peer = sender->connect(receiver->address(), false, nullptr);
};

TEST(LoopbackTransport, ASendersCompletionsAreOverWhenTheSenderIsDestroyed) {
  Pair pair;
  auto& [receiver, sender, memory, sender_region, receiver_region, peer] = pair;

  // The receiver's thread is kept busy in a receive's completion until the end of the test.
  std::promise<void> release;
  auto released = release.get_future().share();
  std::promise<void> busy;
  receiver->post_recv(*receiver_region, 0, 64, 1, [&busy, released](const TransferResult&) {
    busy.set_value();
    released.wait();
  });
  std::atomic<int> sender_completions{0};
  sender->post_send(peer, *sender_region, 0, 64, 1, [&](const TransferResult& r) {
    EXPECT_TRUE(r.ok) << r.error;
    sender_completions++;
  });
  ASSERT_EQ(busy.get_future().wait_for(30s), std::future_status::ready);
  // A send no receive waits for: complete for its sender once queued at the receiver.
  sender->post_send(peer, *sender_region, 64, 64, 2, [&](const TransferResult& r) {
    EXPECT_TRUE(r.ok) << r.error;
    sender_completions++;
  });
  sender_region.reset();
  sender.reset();
  EXPECT_EQ(sender_completions.load(), 2) << "a send completion was left to the receiver's (busy) thread";
  release.set_value();

  // The queued send is still received whole after its sender is gone.
  std::promise<TransferResult> got;
  receiver->post_recv(*receiver_region, 64, 64, 2, [&](const TransferResult& r) { got.set_value(r); });
  auto result = got.get_future();
  ASSERT_EQ(result.wait_for(30s), std::future_status::ready);
  EXPECT_TRUE(result.get().ok);
  EXPECT_EQ(sender_completions.load(), 2);
}

// A receive matched by a shorter message is no whole receive: it fails, naming both lengths
// (it succeeded, and the bytes past the message were whatever the buffer held before).
TEST(LoopbackTransport, AReceiveMatchedByAShorterMessageFails) {
  Pair pair;
  auto& [receiver, sender, memory, sender_region, receiver_region, peer] = pair;
  std::promise<TransferResult> got, sent;
  receiver->post_recv(*receiver_region, 0, 1024, 7, [&](const TransferResult& r) { got.set_value(r); });
  sender->post_send(peer, *sender_region, 0, 512, 7, [&](const TransferResult& r) { sent.set_value(r); });
  auto received = got.get_future();
  ASSERT_EQ(received.wait_for(30s), std::future_status::ready);
  const TransferResult r = received.get();
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.error, "a message of 512 bytes arrived for a receive of 1024");
  auto send = sent.get_future();
  ASSERT_EQ(send.wait_for(30s), std::future_status::ready);
  EXPECT_TRUE(send.get().ok) << "the message was taken";
}

// discard() takes the message of its tag, one queued already or the next to come, and drops it:
// the next receive of that tag gets the message after it. Queued copies were kept until a
// receive took them, and a refused transfer's chunks never were (a version's worth of memory per
// refusal).
TEST(LoopbackTransport, ADiscardTakesTheMessageOfItsTag) {
  Pair pair;
  auto& [receiver, sender, memory, sender_region, receiver_region, peer] = pair;
  for (std::size_t i = 0; i < 4; ++i) std::memset(memory.data() + 64 * i, static_cast<int>('a' + i), 64);
  auto received = [&](std::uint64_t tag, std::size_t at) {
    std::promise<TransferResult> got;
    receiver->post_recv(*receiver_region, at, 64, tag, [&](const TransferResult& r) { got.set_value(r); });
    auto result = got.get_future();
    EXPECT_EQ(result.wait_for(30s), std::future_status::ready);
    EXPECT_TRUE(result.get().ok);
    return static_cast<char>(memory.data()[2048 + at]);
  };
  sender->post_send(peer, *sender_region, 0, 64, 7, nullptr);  // 'a', queued
  receiver->discard(7);
  sender->post_send(peer, *sender_region, 64, 64, 7, nullptr);  // 'b'
  EXPECT_EQ(received(7, 0), 'b') << "the discarded message was received";
  receiver->discard(9);                                          // before its message
  sender->post_send(peer, *sender_region, 128, 64, 9, nullptr);  // 'c', taken by the discard
  sender->post_send(peer, *sender_region, 192, 64, 9, nullptr);  // 'd'
  EXPECT_EQ(received(9, 64), 'd') << "the discarded message was received";
}

}  // namespace
}  // namespace modelcast::transport
