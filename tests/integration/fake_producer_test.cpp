// The consumer against a scripted producer that speaks the protocol directly: malformed
// announcements and replies, a version whose bytes fail their digest. The consumer must drop
// or reject each, say why, and keep serving its last good version.
#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <functional>
#include <future>
#include <limits>
#include <mutex>

#include <zmq.hpp>

#include "eventually.h"
#include "few_descriptors.h"
#include "logs_said.h"
#include "modelcast/consumer.h"
#include "modelcast/error.h"
#include "scripted_producer.h"

namespace {

using namespace std::chrono_literals;
namespace protocol = modelcast::protocol;
using testing_support::ScriptedProducer;

// A consumer of `producer` (model "test") that gives it up after `producer_timeout` of silence.
modelcast::ConsumerOptions options_of(ScriptedProducer& producer, std::chrono::milliseconds producer_timeout) {
  modelcast::ConsumerOptions options;
  options.producer_endpoint = producer.endpoint();
  options.model_name = "test";
  options.producer_timeout = producer_timeout;
  return options;
}

// Options of a consumer of the scripted producer's model whose first error's text lands in
// `first_error` (the script sends no heartbeats between its steps: a long producer timeout).
struct FirstError {
  std::promise<std::string> text;
  std::once_flag once;
};
modelcast::ConsumerOptions scripted_options(ScriptedProducer& producer, FirstError& first_error) {
  auto options = options_of(producer, 60s);
  options.on_error = [&first_error](const modelcast::Error& e) {
    std::call_once(first_error.once, [&] { first_error.text.set_value(e.what()); });
  };
  return options;
}

TEST(ConsumerAgainstScriptedProducer, DropsMalformedMessagesAndRejectsCorruptVersions) {
  setenv("UCX_NET_DEVICES", "lo", 1);
  ScriptedProducer producer;
  std::promise<modelcast::Error> first_error;
  auto options = options_of(producer, 60s);  // the script sends no heartbeats between its steps
  for (const auto& t : testmodel::make(256)) options.expected_layout.push_back(t.spec);
  std::once_flag once;
  options.on_error = [&](const modelcast::Error& e) { std::call_once(once, [&] { first_error.set_value(e); }); };
  modelcast::Consumer consumer(options);
  producer.accept_join();

  auto ack = producer.serve(1, /*corrupt=*/false);
  ASSERT_TRUE(ack.ok) << ack.error;
  auto good = consumer.acquire();
  ASSERT_EQ(good.version(), 1u);
  ASSERT_EQ(testmodel::check(good, 1), "");

  // Malformed announcements and replies: each is dropped and counted.
  std::vector<std::byte> garbage(40, std::byte{0xC1});
  producer.announce_raw(garbage);
  auto future_version = protocol::encode(protocol::Announce{ScriptedProducer::kIncarnation, 9, 0, 0, std::nullopt});
  future_version[6] = std::byte{0x63};  // protocol version 99
  producer.announce_raw(future_version);
  auto truncated = protocol::encode(protocol::Announce{ScriptedProducer::kIncarnation, 9, 0, 0, std::nullopt});
  truncated.resize(truncated.size() / 2);
  producer.announce_raw(truncated);
  producer.reply_raw(garbage);
  ASSERT_TRUE(testing_support::eventually([&] { return consumer.stats().bad_messages == 4; }));
  EXPECT_NE(consumer.stats().last_error.find("dropped a bad control message"), std::string::npos)
      << consumer.stats().last_error;

  // A version whose bytes do not match their digests is rejected, naming the block and the
  // tensors it holds (the byte is in t5; this small model is one block).
  ack = producer.serve(2, /*corrupt=*/true);
  EXPECT_FALSE(ack.ok);
  EXPECT_FALSE(ack.again) << "a version that failed its digests is rejected, not asked for again";
  EXPECT_NE(ack.error.find("block 0 at byte 0 (in tensors 't0' to 't11') of version 2 failed its digest check"),
            std::string::npos)
      << ack.error;
  auto error = first_error.get_future().get();
  EXPECT_EQ(error.code(), modelcast::ErrorCode::kIntegrity);

  auto stats = consumer.stats();
  EXPECT_EQ(stats.bad_messages, 4u);
  EXPECT_EQ(stats.versions_rejected, 1u);
  EXPECT_EQ(stats.current_version, 1u);
  auto still = consumer.acquire();
  EXPECT_EQ(still.version(), 1u);
  EXPECT_EQ(testmodel::check(still, 1), "");

  // And the next good version is taken.
  ack = producer.serve(3, /*corrupt=*/false);
  EXPECT_TRUE(ack.ok) << ack.error;
  EXPECT_EQ(testmodel::check(consumer.acquire(), 1), "");
  EXPECT_EQ(consumer.acquire().version(), 3u);

  // Digests that follow the data are waited for, and checked as strictly.
  ack = producer.serve(4, /*corrupt=*/true, /*digests_later=*/true);
  EXPECT_FALSE(ack.ok);
  EXPECT_NE(ack.error.find("failed its digest check"), std::string::npos) << ack.error;
  EXPECT_EQ(consumer.acquire().version(), 3u);
  ack = producer.serve(5, /*corrupt=*/false, /*digests_later=*/true);
  EXPECT_TRUE(ack.ok) << ack.error;
  EXPECT_EQ(consumer.acquire().version(), 5u);
  EXPECT_EQ(testmodel::check(consumer.acquire(), 1), "");
  EXPECT_EQ(consumer.stats().versions_rejected, 2u);

  // A version whose layout differs from the one the consumer expects is rejected, naming the
  // tensor, and version 5 stays.
  ack = producer.serve(6, /*corrupt=*/false, /*digests_later=*/false,
                       [](modelcast::Manifest& m) { m.tensors[0].spec.dtype = modelcast::DType::kI32; });
  EXPECT_FALSE(ack.ok);
  EXPECT_NE(ack.error.find("tensor 't0' is i32, expected f32"), std::string::npos) << ack.error;
  EXPECT_EQ(consumer.stats().versions_rejected, 3u);
  EXPECT_EQ(consumer.acquire().version(), 5u);
  EXPECT_EQ(testmodel::check(consumer.acquire(), 1), "");

  // A publish time no clock gives: the latency since it overflowed into the stats (and from
  // there the daemon's histogram); it is unknown (0). Garbage after it marks it as read.
  producer.announce_raw(protocol::encode(protocol::Announce{ScriptedProducer::kIncarnation, 7, 0,
                                                            std::numeric_limits<std::int64_t>::min(), std::nullopt}));
  producer.announce_raw(garbage);
  ASSERT_TRUE(testing_support::eventually([&] { return consumer.stats().bad_messages == 5; }));
  EXPECT_EQ(consumer.stats().last_notify_latency.count(), 0);
}

// A producer that answers a fetch with the manifest of another version (a rogue producer, or a
// signed manifest of another model): the consumer refuses it and remembers the version it asked
// for, so the next thing it asks for is the next announced version, not the refused one again
// (it once asked again at once, 37,000 times in 8 s).
TEST(ConsumerAgainstScriptedProducer, RemembersTheVersionItAskedForWhenTheAnswerNamesAnother) {
  setenv("UCX_NET_DEVICES", "lo", 1);
  ScriptedProducer producer;
  auto options = options_of(producer, 60s);
  modelcast::Consumer consumer(options);
  producer.accept_join();
  ASSERT_TRUE(producer.serve(1, /*corrupt=*/false).ok);

  auto ack = producer.answer_with_manifest(2, 1u << 20, [](modelcast::Manifest& m) { m.version = 3; });
  EXPECT_FALSE(ack.ok);
  EXPECT_EQ(consumer.stats().versions_rejected, 1u);
  for (int i = 0; i < 20; ++i) producer.announce(2);
  auto next = producer.next_fetch_announcing(4);
  EXPECT_EQ(next.version, 4u) << "asked again for the version it refused";
  EXPECT_EQ(consumer.stats().versions_rejected, 1u);
  EXPECT_EQ(consumer.acquire().version(), 1u);
}

// The producer announces to the consumers it knows only. One that has forgotten this consumer
// (it dropped it, or restarted behind a connection that stayed up) sends nothing more: the
// consumer joins again within its producer_timeout, afresh, and takes the next version.
TEST(ConsumerAgainstScriptedProducer, AConsumerNoLongerAnnouncedToJoinsAgainWithinItsProducerTimeout) {
  setenv("UCX_NET_DEVICES", "lo", 1);
  ScriptedProducer producer;
  auto options = options_of(producer, 1s);
  modelcast::Consumer consumer(options);
  producer.accept_join();
  ASSERT_TRUE(producer.serve(1, /*corrupt=*/false).ok);  // announced until fetched, then nothing
  const auto silent_since = std::chrono::steady_clock::now();
  protocol::JoinRequest join;
  for (;;) {
    auto request = producer.next_request();
    if (auto* j = std::get_if<protocol::JoinRequest>(&request)) {
      join = *j;
      break;
    }
    ASSERT_TRUE(std::holds_alternative<protocol::Ping>(request)) << "request type " << request.index();
  }
  const auto waited = std::chrono::steady_clock::now() - silent_since;
  // producer_timeout after the last announcement, noticed within a service tick (125 ms here).
  EXPECT_LT(waited, 1500ms) << "joined again only after " << std::chrono::duration<double>(waited).count() << " s";
  EXPECT_EQ(consumer.stats().reconnects, 1u);
  EXPECT_EQ(consumer.acquire().version(), 1u);  // kept while the producer was silent
  producer.answer_join(join);
  ASSERT_TRUE(producer.serve(2, /*corrupt=*/false).ok);
  EXPECT_EQ(consumer.acquire().version(), 2u);
  EXPECT_EQ(testmodel::check(consumer.acquire(), 1), "");
}

// A consumer whose fresh transports cannot be made when it joins again (its process short of
// descriptors) stays up with its version, says why, tries again when a join is due and not at
// every turn of its loop (it did: its link still counted as joined, and silent), and joins once
// descriptors are free.
TEST(ConsumerAgainstScriptedProducer, ARejoinShortOfDescriptorsIsTriedWhenDueAndJoinsOnceTheyAreFree) {
  setenv("UCX_NET_DEVICES", "lo", 1);
  ScriptedProducer producer;
  std::mutex mutex;
  std::condition_variable said;
  int resource_errors = 0;
  auto options = options_of(producer, 400ms);  // a try when due every 200 ms; a turn of the loop every 50 ms
  options.on_error = [&](const modelcast::Error& e) {
    if (e.code() != modelcast::ErrorCode::kResource) return;
    std::lock_guard lock(mutex);
    ++resource_errors;
    said.notify_all();
  };
  modelcast::Consumer consumer(options);
  producer.accept_join();
  ASSERT_TRUE(producer.serve(1, /*corrupt=*/false).ok);  // announced until fetched, then nothing
  {
    testing_support::FewDescriptors few(8);  // a UCX worker asks for 32
    std::unique_lock lock(mutex);
    ASSERT_TRUE(said.wait_for(lock, 30s, [&] { return resource_errors >= 3; })) << consumer.stats().last_error;
    const auto stats = consumer.stats();
    EXPECT_LE(stats.reconnects, 1u) << "a rejoin short of descriptors was tried again at every turn";
    EXPECT_FALSE(stats.producer_connected);
    EXPECT_NE(stats.last_error.find("file descriptors"), std::string::npos) << stats.last_error;
    EXPECT_EQ(consumer.acquire().version(), 1u);
    // The old connection closing meanwhile (the producer restarting, say) is news to no one: its
    // monitor's reader was closed while it watched on, and the event stalled the link's ZeroMQ
    // thread for good, so that no join ever went out again.
    producer.close_connection_of_last_request();
  }
  producer.accept_join();
  ASSERT_TRUE(producer.serve(2, /*corrupt=*/false).ok);
  EXPECT_EQ(consumer.acquire().version(), 2u);
}

// A producer under a connection flood closes the connections that have not joined yet, and a
// consumer's may be one of them, its join read or not. The consumer asks again as soon as it
// sees the connection close, not after an unanswered join's wait (half its producer_timeout,
// 10 s here): in a flood that wait made joining take seconds.
TEST(ConsumerAgainstScriptedProducer, AJoinWhoseConnectionClosesUnansweredIsSentAgainAtOnce) {
  setenv("UCX_NET_DEVICES", "lo", 1);
  ScriptedProducer producer;
  auto options = options_of(producer, 20s);
  modelcast::Consumer consumer(options);
  (void)producer.next_join();
  producer.close_connection_of_last_request();
  const auto closed_at = std::chrono::steady_clock::now();
  const auto again = producer.next_join();
  const auto waited = std::chrono::steady_clock::now() - closed_at;
  // The floor of 100 ms and a service tick (500 ms here): the wait for an unanswered join is 10 s.
  EXPECT_LT(waited, 5s) << "asked again only after " << std::chrono::duration<double>(waited).count() << " s";
  producer.answer_join(again);
  ASSERT_TRUE(producer.serve(1, /*corrupt=*/false).ok);
  EXPECT_EQ(consumer.acquire().version(), 1u);
}

// Something at the endpoint that closes every connection before answering (a producer at its
// connection limit, or not a producer): the consumer's "no answer" says so, and counts the
// closes, instead of "none runs there yet", which sent people looking for a process that runs.
TEST(ConsumerAgainstScriptedProducer, JoinsClosedUnansweredAreSaidToBeClosedNotUnheard) {
  setenv("UCX_NET_DEVICES", "lo", 1);
  ScriptedProducer producer;
  // Said after five of them unanswered. Each close is made within moments of the join's read,
  // long before the consumer would give up on that join (half of this) and send another.
  auto options = options_of(producer, 1s);
  modelcast::Consumer consumer(options);
  std::string said;
  for (int closes = 0; closes < 1000 && said.empty(); ++closes) {
    (void)producer.next_join();
    producer.close_connection_of_last_request();
    said = consumer.stats().last_error;
  }
  ASSERT_NE(said, "") << "nothing said after 1000 joins closed unanswered";
  EXPECT_NE(said.find("no answer from a producer at " + producer.endpoint()), std::string::npos) << said;
  EXPECT_NE(said.find("closed the connection before answering"), std::string::npos) << said;
  EXPECT_EQ(said.find("none runs there"), std::string::npos) << said;
}

// A producer says it stops as it closes (the end of training). The consumer takes that word
// only from the producer it joined (another incarnation's says nothing of it), keeps its version,
// joins again once that producer's connection has closed (a producer restarted there is found),
// and is no longer "stopped" once a producer answers.
TEST(ConsumerAgainstScriptedProducer, AProducersLastWordIsTakenOnlyFromTheProducerJoined) {
  setenv("UCX_NET_DEVICES", "lo", 1);
  ScriptedProducer producer;
  modelcast::Consumer consumer(options_of(producer, 60s));  // the script sends no heartbeats
  producer.accept_join();
  ASSERT_TRUE(producer.serve(1, /*corrupt=*/false).ok);
  // A request other than a ping (one a second while joined) or an ack.
  auto next_asked = [&] {
    for (;;) {
      auto request = producer.next_request();
      if (!std::holds_alternative<protocol::Ping>(request) && !std::holds_alternative<protocol::Ack>(request)) {
        return request;
      }
    }
  };

  protocol::Announce last{ScriptedProducer::kIncarnation + 1, 1, 0, 1, std::nullopt};
  last.stopping = true;
  producer.announce_raw(protocol::encode(last));
  producer.announce(2);
  // Taken, the foreign word would have made the consumer join again before anything else.
  auto asked = next_asked();
  ASSERT_TRUE(std::holds_alternative<protocol::FetchRequest>(asked)) << "request type " << asked.index();
  EXPECT_EQ(std::get<protocol::FetchRequest>(asked).version, 2u);
  EXPECT_FALSE(consumer.stats().producer_stopped);

  // The word, then the connection closing, as a producer's control plane closes: the consumer
  // joins again once it has closed, not after an unanswered join's wait (30 s here).
  last.incarnation = ScriptedProducer::kIncarnation;
  producer.announce_raw(protocol::encode(last));
  ASSERT_TRUE(testing_support::eventually([&] { return consumer.stats().producer_stopped; }));
  // Not before the connection closes (it would meet a control plane being closed): what comes
  // meanwhile is the abandoned fetch's ack, no join.
  for (zmq::pollitem_t item{producer.router_handle(), 0, ZMQ_POLLIN, 0}; zmq::poll(&item, 1, 300ms) > 0;) {
    auto early = producer.next_request();
    ASSERT_FALSE(std::holds_alternative<protocol::JoinRequest>(early)) << "joined again before the connection closed";
  }
  producer.close_connection_of_last_request();
  const auto closed_at = std::chrono::steady_clock::now();
  asked = next_asked();
  const auto waited = std::chrono::steady_clock::now() - closed_at;
  ASSERT_TRUE(std::holds_alternative<protocol::JoinRequest>(asked)) << "request type " << asked.index();
  EXPECT_LT(waited, 5s) << "joined again only after " << std::chrono::duration<double>(waited).count() << " s";
  auto stats = consumer.stats();
  EXPECT_TRUE(stats.producer_stopped);
  EXPECT_FALSE(stats.producer_connected);
  EXPECT_EQ(stats.reconnects, 0u) << "a producer that said it stops is not lost";
  EXPECT_EQ(consumer.acquire().version(), 1u);

  producer.answer_join(std::get<protocol::JoinRequest>(asked));
  ASSERT_TRUE(producer.serve(3, /*corrupt=*/false).ok);
  EXPECT_EQ(consumer.acquire().version(), 3u);
  EXPECT_FALSE(consumer.stats().producer_stopped);
}

// A producer that goes without a word (killed, crashed) is no stopped producer: the consumer
// warns, and its "no answer" names the endpoint as one a producer answered at before.
TEST(ConsumerAgainstScriptedProducer, AProducerGoneWithoutAWordIsLostNotStopped) {
  setenv("UCX_NET_DEVICES", "lo", 1);
  testing_support::LogsSaid logs;
  auto producer = std::make_unique<ScriptedProducer>();
  const std::string endpoint = producer->endpoint();
  modelcast::Consumer consumer(options_of(*producer, 200ms));
  producer->accept_join();
  ASSERT_TRUE(producer->serve(1, /*corrupt=*/false).ok);
  producer.reset();
  std::string said;
  EXPECT_TRUE(testing_support::eventually([&] {
    said = consumer.stats().last_error;
    return said.find("no answer from a producer at " + endpoint) != std::string::npos;
  })) << said;
  EXPECT_NE(said.find("one answered there before"), std::string::npos) << said;
  EXPECT_EQ(said.find("said it stopped"), std::string::npos) << said;
  EXPECT_FALSE(consumer.stats().producer_stopped);
  EXPECT_EQ(consumer.acquire().version(), 1u);
  EXPECT_FALSE(logs.at_least(MC_LOG_WARN, "modelcast.consumer: model 'test': no answer from a producer").empty());
}

std::vector<std::byte> bytes_of(std::initializer_list<unsigned> values) {
  std::vector<std::byte> bytes;
  for (auto v : values) bytes.push_back(static_cast<std::byte>(v));
  return bytes;
}

// A hostile producer or relay: each of these once ended the consumer (the inference process)
// with an uncaught exception, or made it allocate per declared byte. Now each is refused, said
// why, and the last good version stays served.
TEST(ConsumerAgainstScriptedProducer, SurvivesHostileRepliesManifestsAndEndpoints) {
  setenv("UCX_NET_DEVICES", "lo", 1);
  ScriptedProducer producer;
  std::mutex mutex;
  std::vector<modelcast::Error> errors;
  auto options = options_of(producer, 60s);
  options.max_model_bytes = 64u << 20;
  options.on_error = [&](const modelcast::Error& e) {
    std::lock_guard lock(mutex);
    errors.push_back(e);
  };
  modelcast::Consumer consumer(options);

  producer.accept_join();
  ASSERT_TRUE(producer.serve(1, false).ok);
  ASSERT_EQ(consumer.acquire().version(), 1u);

  // Allocation bombs, as announcements and as replies.
  producer.announce_raw(bytes_of({0xdd, 0xff, 0xff, 0xff, 0xff}));
  producer.reply_raw(bytes_of({0xdd, 0xff, 0xff, 0xff, 0xff}));
  producer.reply_raw(bytes_of({0xdf, 0xff, 0xff, 0xff, 0xff}));

  auto expect_refused = [&](std::uint64_t version, std::uint64_t chunk, auto tweak, const std::string& why) {
    auto ack = producer.answer_with_manifest(version, chunk, tweak);
    EXPECT_FALSE(ack.ok);
    EXPECT_NE(ack.error.find(why), std::string::npos) << ack.error;
    EXPECT_EQ(consumer.acquire().version(), 1u);
  };
  expect_refused(2, 1u << 20, [](modelcast::Manifest& m) { m.total_bytes = std::uint64_t{1} << 40; },
                 "this consumer takes at most 67108864 (max_model_bytes");
  expect_refused(3, 1u << 20, [](modelcast::Manifest& m) { m.total_bytes = ~std::uint64_t{0}; }, "at most");
  expect_refused(4, 1, [](modelcast::Manifest&) {}, "-byte chunks");
  expect_refused(5, 1u << 20, [](modelcast::Manifest& m) {
    m.tensors[0].spec.shape = {std::int64_t{1} << 40, std::int64_t{1} << 40};
  }, "64 bits");
  // A chunk of nearly 2^64 bytes wrapped the chunk count to 0 and was taken.
  expect_refused(6, ~std::uint64_t{0} - 1023, [](modelcast::Manifest&) {}, "-byte chunks; at most 1073741824 expected");
  // A manifest of another producer run than the one joined was installed, and then fetched again
  // at every tick, for ever (the installed version never counted as this run's).
  expect_refused(7, 1u << 20, [](modelcast::Manifest& m) { m.incarnation ^= 1; }, "of another producer run");
  // One rank's pieces, from a producer that named no other ranks: installed as the model, the
  // expected layout and the wants unchecked (they are checked on the assembled whole).
  expect_refused(8, 1u << 20, [](modelcast::Manifest& m) { m.rank_count = 2; },
                 "is rank 0's pieces of a model 2 ranks publish, but the producer named no other ranks");

  // Still alive, still serving version 1 exactly, and the next good version is taken.
  auto stats = consumer.stats();
  EXPECT_GE(stats.bad_messages, 3u);
  EXPECT_EQ(stats.versions_rejected, 7u);
  EXPECT_EQ(testmodel::check(consumer.acquire(), 1), "");
  ASSERT_TRUE(producer.serve(9, false).ok);
  EXPECT_EQ(consumer.acquire().version(), 9u);
}

// A producer that answers a fetch and then sends no bytes (its lease lapsed, its sender hung):
// the consumer gives the transfer up after transfer_timeout, says so in its ack, keeps serving
// its last good version, and takes the next one.
TEST(ConsumerAgainstScriptedProducer, AnAnsweredTransferThatNeverCompletesTimesOut) {
  setenv("UCX_NET_DEVICES", "lo", 1);
  ScriptedProducer producer;
  auto options = options_of(producer, 60s);
  options.transfer_timeout = 300ms;
  modelcast::Consumer consumer(options);
  producer.accept_join();
  ASSERT_TRUE(producer.serve(1, false).ok);

  auto ack = producer.answer_with_manifest(2, 1u << 20, [](modelcast::Manifest&) {});
  EXPECT_FALSE(ack.ok);
  EXPECT_EQ(ack.error, "transfer timed out");
  EXPECT_TRUE(ack.again) << "a transfer that timed out is no verdict on the version (a group keeps it)";
  EXPECT_EQ(consumer.acquire().version(), 1u);
  EXPECT_EQ(testmodel::check(consumer.acquire(), 1), "");
  EXPECT_GE(consumer.stats().transfers_aborted, 1u);

  ASSERT_TRUE(producer.serve(3, false).ok);
  EXPECT_EQ(consumer.acquire().version(), 3u);
  EXPECT_EQ(testmodel::check(consumer.acquire(), 1), "");
}

// A consumer starts a service (a connection, a UCX worker, a thread) per producer rank: a join
// reply that lists 100,000 of them is refused, not followed.
TEST(ConsumerAgainstScriptedProducer, AJoinReplyListingMoreRanksThanAConsumerTakesIsRefused) {
  setenv("UCX_NET_DEVICES", "lo", 1);
  ScriptedProducer producer;
  FirstError first_error;
  modelcast::Consumer consumer(scripted_options(producer, first_error));
  producer.connect(producer.next_join());
  protocol::JoinReply reply{true, protocol::Refusal::kNone, "", ScriptedProducer::kIncarnation, 0, "ucx"};
  reply.rank_endpoints.assign(protocol::kMaxRanks + 1, "tcp://127.0.0.1:1");
  producer.reply(reply);
  auto error = first_error.text.get_future();
  ASSERT_EQ(error.wait_for(30s), std::future_status::ready) << "no error for " << protocol::kMaxRanks + 1 << " ranks";
  const auto what = error.get();
  EXPECT_NE(what.find("at most " + std::to_string(protocol::kMaxRanks)), std::string::npos) << what;
  // What this producer then serves is one rank's piece: never shown as the model. Version 2's
  // ack comes after version 1 went wherever it goes (one service thread, in order).
  EXPECT_TRUE(producer.serve(1, false).ok);
  EXPECT_TRUE(producer.serve(2, false).ok);
  EXPECT_TRUE(consumer.acquire().empty()) << "a piece is shown as version " << consumer.acquire().version();
  // Its stats say so: the model cannot be had, and why.
  const auto stats = consumer.stats();
  EXPECT_FALSE(stats.producer_connected);
  EXPECT_NE(stats.last_error.find("at most " + std::to_string(protocol::kMaxRanks)), std::string::npos)
      << stats.last_error;
  EXPECT_EQ(stats.current_version, 0u);
  EXPECT_EQ(stats.versions_installed, 0u);
}

// A producer's words (its refusal, the ranks' endpoints it lists) reach the consumer's errors,
// stats and log: one on a plaintext plane could otherwise forge the consumer's log lines.
TEST(ConsumerAgainstScriptedProducer, AProducersWordsReachItsErrorsEscaped) {
  setenv("UCX_NET_DEVICES", "lo", 1);
  const std::string forged = "go away\n[modelcast.consumer] [info] model 'test': joined at\x1b[2J";
  auto printable = [](const std::string& text) {
    return std::all_of(text.begin(), text.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
  };
  for (bool as_rank_endpoint : {false, true}) {
    SCOPED_TRACE(as_rank_endpoint ? "a rank's endpoint" : "a refusal");
    ScriptedProducer producer;
    FirstError first_error;
    modelcast::Consumer consumer(scripted_options(producer, first_error));
    producer.connect(producer.next_join());
    if (as_rank_endpoint) {
      protocol::JoinReply reply{true, protocol::Refusal::kNone, "", ScriptedProducer::kIncarnation, 0, "ucx"};
      reply.rank_endpoints = {"tcp://127.0.0.1:1", "tcp://127.0.0.1:2" + forged};
      producer.reply(reply);
    } else {
      producer.reply(protocol::JoinReply{false, protocol::Refusal::kBadRequest, forged, 0, 0, ""});
    }
    auto error = first_error.text.get_future();
    ASSERT_EQ(error.wait_for(30s), std::future_status::ready) << "no error";
    const auto what = error.get();
    EXPECT_TRUE(printable(what)) << what;
    EXPECT_NE(what.find("go away\\x0a[modelcast"), std::string::npos) << what;
    if (as_rank_endpoint) {
      EXPECT_NE(what.find("the producer gives rank 1 the endpoint"), std::string::npos) << what;
    }
    const auto stats = consumer.stats();
    EXPECT_TRUE(printable(stats.last_error)) << stats.last_error;
    EXPECT_FALSE(stats.producer_connected);
  }
}

TEST(ConsumerOptionsCheck, AnUnusableProducerEndpointIsAnInvalidArgument) {
  for (const char* endpoint : {"tcp://", "tcp://host-without-port", "udp://127.0.0.1:5", "ipc://"}) {
    modelcast::ConsumerOptions options;
    options.producer_endpoint = endpoint;
    try {
      modelcast::Consumer consumer(options);
      ADD_FAILURE() << "accepted producer_endpoint '" << endpoint << "'";
    } catch (const modelcast::Error& e) {
      EXPECT_EQ(e.code(), modelcast::ErrorCode::kInvalidArgument) << endpoint;
      EXPECT_NE(std::string(e.what()).find(endpoint), std::string::npos) << e.what();
    }
  }
}

}  // namespace
