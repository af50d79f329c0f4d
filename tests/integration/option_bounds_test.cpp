// Options and inputs at the edge of what modelcast can honour: each is refused when it is given,
// naming what is wrong, instead of being accepted and then delivering nothing (or stale bytes)
// with no error. And waits meant as "for ever" wait.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/transfer/chunk_plan.h"
#include "eventually.h"
#include "private_directory.h"
#include "modelcast/consumer.h"
#include "modelcast/error.h"
#include "modelcast/producer.h"

namespace {

using modelcast::Consumer;
using modelcast::ConsumerOptions;
using modelcast::DType;
using modelcast::Error;
using modelcast::ErrorCode;
using modelcast::Producer;
using modelcast::ProducerOptions;
using modelcast::TensorRef;
using namespace std::chrono_literals;

constexpr auto kForever = std::chrono::milliseconds::max();

// The message of the Error(code) that `f` throws, or a failure.
template <typename F>
std::string error_of(F&& f, ErrorCode code) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "accepted";
  return "";
}

#define EXPECT_REFUSED(expression, code, words)                                   \
  do {                                                                             \
    const std::string message = error_of([&] { (void)(expression); }, code);       \
    EXPECT_NE(message.find(words), std::string::npos) << "got: " << message;       \
  } while (false)

ProducerOptions producer_options() {
  ProducerOptions o;
  o.model_name = "bounds";
  return o;
}

ProducerOptions with_endpoint(const std::string& endpoint) {
  ProducerOptions o = producer_options();
  o.control_endpoint = endpoint;
  return o;
}

ConsumerOptions consumer_options(const std::string& endpoint) {
  ConsumerOptions o;
  o.producer_endpoint = endpoint;
  o.model_name = "bounds";
  return o;
}

// What a consumer's on_error said, in order; callback() may run on any thread.
class ErrorsSaid {
 public:
  std::function<void(const Error&)> callback() {
    return [this](const Error& e) {
      std::lock_guard lock(mutex_);
      texts_.push_back(e.what());
    };
  }
  std::vector<std::string> texts() const {
    std::lock_guard lock(mutex_);
    return texts_;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> texts_;
};

TEST(OptionBounds, ProducerOptionsOutOfRangeAreRefusedNamingTheOption) {
  auto with = [](auto change) {
    auto o = producer_options();
    change(o);
    return o;
  };
  EXPECT_REFUSED(Producer(with([](auto& o) { o.snapshot_slots = 65; })), ErrorCode::kInvalidArgument,
                 "snapshot_slots must be <= 64");
  // Was "no consumer could join: list allowed_consumer_keys": the key itself is what is wrong.
  EXPECT_REFUSED(Producer(with([](auto& o) { o.key = {"abc", "def"}; })), ErrorCode::kInvalidArgument,
                 "is not a key: expected 40 Z85 characters, got 3");
  // Bound to the part before a NUL, the producer would serve another endpoint than the one given.
  EXPECT_REFUSED(Producer(with([](auto& o) { o.control_endpoint = std::string("tcp://127.0.0.1:0\0junk", 22); })),
                 ErrorCode::kInvalidArgument, "control endpoint 'tcp://127.0.0.1:0' goes on past a NUL byte at byte 17");
  EXPECT_REFUSED(Producer(with([](auto& o) { o.snapshot_slots = std::numeric_limits<std::size_t>::max(); })),
                 ErrorCode::kInvalidArgument, "snapshot_slots must be <= 64");
  // A chunk near 2^64 once made a plan of no chunks: consumers installed zeros as verified.
  EXPECT_REFUSED(Producer(with([](auto& o) { o.transfer_chunk_bytes = std::numeric_limits<std::size_t>::max(); })),
                 ErrorCode::kInvalidArgument, "transfer_chunk_bytes must be between 65536 and 1073741824");
  EXPECT_REFUSED(Producer(with([](auto& o) { o.lease_timeout = 0ms; })), ErrorCode::kInvalidArgument,
                 "lease_timeout must be between 1 ms and");
  EXPECT_REFUSED(Producer(with([](auto& o) { o.lease_timeout = kForever; })), ErrorCode::kInvalidArgument,
                 "lease_timeout must be between 1 ms and");
  EXPECT_REFUSED(Producer(with([](auto& o) { o.heartbeat_interval = -5ms; })), ErrorCode::kInvalidArgument,
                 "heartbeat_interval must be between 1 ms and");
  EXPECT_REFUSED(Producer(with([](auto& o) {
                   o.relay_fanout = 2;
                   o.integrity = false;
                 })),
                 ErrorCode::kInvalidArgument, "relay_fanout needs integrity");
  EXPECT_REFUSED(Producer(with([](auto& o) { o.model_name = std::string("a\0b", 3); })), ErrorCode::kInvalidArgument,
                 "model_name contains a NUL byte at 1");
  EXPECT_REFUSED(Producer(with([](auto& o) { o.model_name = "caf\xe9"; })), ErrorCode::kInvalidArgument,
                 "model_name is not valid UTF-8 (byte 3)");
  EXPECT_REFUSED(Producer(with([](auto& o) { o.model_name = std::string(5000, 'm'); })), ErrorCode::kInvalidArgument,
                 "model_name is 5000 bytes; the limit is 4096");
  // ZeroMQ keeps a port modulo 2^16: 99999 once bound 34463.
  EXPECT_REFUSED(Producer(with([](auto& o) { o.control_endpoint = "tcp://127.0.0.1:99999"; })),
                 ErrorCode::kInvalidArgument, "has port '99999'; a port is 0 (any free one) to 65535");
  EXPECT_REFUSED(Producer(with([](auto& o) { o.control_endpoint = "tcp://127.0.0.1:-1"; })),
                 ErrorCode::kInvalidArgument, "has port '-1'");
  // Read as a remote host ("give the producer a key"), then by ZeroMQ as an interface name.
  EXPECT_REFUSED(Producer(with([](auto& o) { o.control_endpoint = "tcp://256.1.1.1:0"; })), ErrorCode::kInvalidArgument,
                 "has host '256.1.1.1', which is not an IPv4 address");
  EXPECT_REFUSED(Producer(with([](auto& o) {
                   o.control_endpoint = "tcp://10.1.1:0";
                   o.allow_plaintext_remote = true;
                 })),
                 ErrorCode::kInvalidArgument, "has host '10.1.1', which is not an IPv4 address");
  EXPECT_REFUSED(Producer(with([](auto& o) { o.control_endpoint = "tcp://localhost:0"; })), ErrorCode::kTransport,
                 "give an IPv4 address such as 127.0.0.1");
  // A list of consumers on a plaintext control plane, which cannot tell consumers apart, was ignored.
  EXPECT_REFUSED(Producer(with([](auto& o) { o.allowed_consumer_keys = {"notakey"}; })), ErrorCode::kInvalidArgument,
                 "allowed_consumer_keys needs the producer's own key");
  // The longest of each still works.
  Producer fine(with([](auto& o) {
    o.snapshot_slots = 64;
    o.transfer_chunk_bytes = modelcast::transfer::kMaxChunkBytes;
    o.model_name = "caf\xc3\xa9 \xf0\x9f\x98\x80";  // valid UTF-8, four-byte form included
  }));
  // Loopback by its interface name: refused as "reachable from other hosts" without a key.
  EXPECT_NO_THROW(Producer(with([](auto& o) { o.control_endpoint = "tcp://lo:0"; })));
  // Returned false as a wait that timed out, where wait_for_version and the C ABI refuse it.
  EXPECT_REFUSED(fine.wait_for_consumers(1, -5ms), ErrorCode::kInvalidArgument,
                 "wait_for_consumers: timeout -5 ms is negative");
}

TEST(OptionBounds, TensorsNoConsumerCouldTakeAreRefusedAtRegistration) {
  Producer producer(producer_options());
  float value = 0;
  auto tensor = [&](std::string name, std::vector<std::int64_t> shape) {
    return TensorRef{{std::move(name), DType::kF32, std::move(shape)}, &value};
  };
  EXPECT_REFUSED(producer.register_tensor(tensor(std::string(4097, 'w'), {1})), ErrorCode::kInvalidArgument,
                 "tensor name '" + std::string(40, 'w') + "...' is 4097 bytes; the limit is 4096");
  // Control characters would forge or garble the log lines and errors that show the name.
  EXPECT_REFUSED(producer.register_tensor(tensor("w\nINFO forged", {1})), ErrorCode::kInvalidArgument,
                 "tensor name 'w\\x0aINFO forged' contains a control character at byte 1");
  EXPECT_REFUSED(producer.register_tensor(tensor("w\x1b[2J", {1})), ErrorCode::kInvalidArgument,
                 "contains a control character at byte 1");
  EXPECT_REFUSED(producer.register_tensor(tensor(std::string("w\0x", 3), {1})), ErrorCode::kInvalidArgument,
                 "tensor name 'w\\x00x' contains a NUL byte at 1");
  EXPECT_REFUSED(producer.register_tensor(tensor("\xff\xfe", {1})), ErrorCode::kInvalidArgument,
                 "tensor name '\\xff\\xfe' is not valid UTF-8 (byte 0)");
  EXPECT_REFUSED(producer.register_tensor(tensor("\xc0\xaf", {1})), ErrorCode::kInvalidArgument,
                 "not valid UTF-8");  // an overlong '/'
  EXPECT_REFUSED(producer.register_tensor(tensor("w", std::vector<std::int64_t>(17, 1))), ErrorCode::kInvalidArgument,
                 "has rank 17; the limit is 16");
  auto odd = tensor("w", {1});
  odd.spec.memory = static_cast<modelcast::MemoryKind>(7);
  EXPECT_REFUSED(producer.register_tensor(odd), ErrorCode::kInvalidArgument, "unknown memory kind 7");
  // Nothing of the refused ones stays registered: the next publish has just the good tensor.
  producer.register_tensor(tensor("w", {1}));
  EXPECT_EQ(producer.publish(1).version, 1u);
}

// Each limit may hold while their sum does not: 65,536 tensors with 1,100-byte names made a
// manifest no consumer takes (one message of at most 64 MiB), and every consumer joined again for
// ever. The tensor that goes past it is refused; a model just under it reaches a consumer.
TEST(OptionBounds, TheTensorPastTheManifestAConsumerTakesIsRefusedAndAModelJustUnderItArrives) {
  Producer producer(producer_options());
  std::vector<float> values(1 << 14, 1.0f);
  std::size_t registered = 0;
  std::string refusal;
  for (; registered < values.size(); ++registered) {
    std::string name = std::to_string(registered);
    name.resize(4000, 'n');
    try {
      producer.register_tensor({{name, DType::kF32, {1}}, &values[registered]});
    } catch (const Error& e) {
      refusal = e.what();
      break;
    }
  }
  ASSERT_FALSE(refusal.empty()) << "16,384 names of 4,000 bytes (64 MB) were all taken";
  EXPECT_NE(refusal.find("takes the model's manifest past the"), std::string::npos) << refusal;
  EXPECT_NE(refusal.find("register fewer tensors, or give them shorter names"), std::string::npos) << refusal;
  EXPECT_GT(registered, 14'000u) << "refused far below the limit: " << refusal;
  values[0] = 2.0f;
  Consumer consumer(consumer_options(producer.control_endpoint()));
  ASSERT_TRUE(producer.wait_for_consumers(1, 60s));
  // With metadata near the most publish() takes (1 MiB of keys and values) too.
  modelcast::Metadata metadata;
  for (int i = 0; i < 1000; ++i) metadata["k" + std::to_string(1000 + i)] = std::string(1040, 'v');
  producer.publish(1, metadata);
  auto view = consumer.wait_for_version(1, 120s);
  ASSERT_TRUE(view) << consumer.stats().last_error;
  EXPECT_EQ(view.metadata().size(), 1000u);
  std::string first = "0";
  first.resize(4000, 'n');
  EXPECT_EQ(*static_cast<const float*>(view.find(first)->data), 2.0f);
}

// The count of tensors every consumer takes: the tensor past it is refused when it is
// registered, naming it (it used to be accepted and the first publish refused).
TEST(OptionBounds, TheTensorPastTheCountConsumersTakeIsRefusedAtRegistration) {
  Producer producer(producer_options());
  float value = 0;
  std::vector<TensorRef> many;
  for (std::size_t i = 0; i < (std::size_t{1} << 16); ++i) {
    many.push_back(TensorRef{{"t" + std::to_string(i), DType::kF32, {1}}, &value});
  }
  producer.register_tensors(many);
  EXPECT_REFUSED(producer.register_tensor(TensorRef{{"one-too-many", DType::kF32, {1}}, &value}),
                 ErrorCode::kInvalidArgument, "tensor 'one-too-many' would be tensor 65537; consumers take at most 65536");
  EXPECT_EQ(producer.publish(1).version, 1u);
}

// A list with one bad tensor once left the good ones before it registered.
TEST(OptionBounds, RegisteringAListIsAllOrNone) {
  Producer producer(producer_options());
  float a = 1, b = 2, c = 3;
  const std::vector<TensorRef> list = {{{"a", DType::kF32, {1}}, &a}, {{"b", DType::kF32, {1}}, &b},
                                       {{"a", DType::kF32, {1}}, &c}};
  EXPECT_REFUSED(producer.register_tensors(list), ErrorCode::kInvalidArgument, "duplicate tensor name 'a'");
  // Were a and b still registered, these would be duplicates.
  producer.register_tensors(std::vector<TensorRef>{{{"a", DType::kF32, {1}}, &a}, {{"b", DType::kF32, {1}}, &b}});
  EXPECT_EQ(producer.publish(1).version, 1u);
}

TEST(OptionBounds, MetadataPastTheConsumersLimitsIsRefusedAndTheProducerGoesOn) {
  Producer producer(producer_options());
  float value = 1;
  producer.register_tensor({{"w", DType::kF32, {1}}, &value});
  modelcast::Metadata many;
  for (int i = 0; i < 1025; ++i) many.emplace(std::to_string(i), std::string(1, 'v'));
  EXPECT_REFUSED(producer.publish(1, many), ErrorCode::kInvalidArgument,
                 "metadata has 1025 entries; the limit is 1024");
  EXPECT_REFUSED(producer.publish(1, {{"blob", std::string((1u << 20) + 1, 'x')}}), ErrorCode::kInvalidArgument,
                 "holds 1048581 bytes of keys and values; the limit is 1048576");
  // Nor fix the layout: tensors may still be registered (a refused first publish prepared the
  // slots, and registering then failed as if the model had been published).
  float more = 2;
  EXPECT_NO_THROW(producer.register_tensor({{"w2", DType::kF32, {1}}, &more}));
  EXPECT_EQ(producer.publish(1, {{"ok", "yes"}}).version, 1u) << "a refused publish must not use up a version or a slot";
}

TEST(OptionBounds, VersionNumbersDoNotWrapAround) {
  auto options = producer_options();
  options.first_version = std::numeric_limits<std::uint64_t>::max() - 1;
  Producer producer(options);
  float value = 1;
  producer.register_tensor({{"w", DType::kF32, {1}}, &value});
  EXPECT_EQ(producer.publish(1).version, std::numeric_limits<std::uint64_t>::max() - 1);
  EXPECT_REFUSED(producer.publish(2), ErrorCode::kState, "version numbers are used up");
  // A first version that could never be published is refused when the producer is made.
  options.first_version = std::numeric_limits<std::uint64_t>::max();
  EXPECT_REFUSED(Producer(options), ErrorCode::kInvalidArgument, "first_version must be 1 to 2^64 - 2, got 18446744073709551615");
}

TEST(OptionBounds, ConsumerOptionsOutOfRangeAreRefusedNamingTheOption) {
  auto with = [](auto change) {
    auto o = consumer_options("tcp://127.0.0.1:1");
    change(o);
    return o;
  };
  EXPECT_REFUSED(Consumer(with([](auto& o) { o.producer_endpoint = "tcp://127.0.0.1:99999"; })),
                 ErrorCode::kInvalidArgument, "producer_endpoint 'tcp://127.0.0.1:99999' has port '99999'; a port is 1 to 65535");
  EXPECT_REFUSED(Consumer(with([](auto& o) { o.producer_endpoint = "tcp://127.0.0.1:0"; })),
                 ErrorCode::kInvalidArgument, "a port is 1 to 65535");
  // ZeroMQ takes C strings: the part before a NUL would be used, another endpoint than the one given.
  EXPECT_REFUSED(Consumer(with([](auto& o) { o.producer_endpoint = std::string("tcp://127.0.0.1:7\0junk", 22); })),
                 ErrorCode::kInvalidArgument, "producer_endpoint 'tcp://127.0.0.1:7' goes on past a NUL byte at byte 17");
  EXPECT_REFUSED(Consumer(with([](auto& o) { o.model_name = std::string(1 << 20, 'm'); })), ErrorCode::kInvalidArgument,
                 "model_name is 1048576 bytes; the limit is 4096");
  EXPECT_REFUSED(Consumer(with([](auto& o) { o.model_name = "\xff"; })), ErrorCode::kInvalidArgument,
                 "model_name is not valid UTF-8");
  // The producer would refuse the join: a name it could not show in its log.
  EXPECT_REFUSED(Consumer(with([](auto& o) { o.consumer_name = "a\nb"; })), ErrorCode::kInvalidArgument,
                 "consumer_name 'a\\x0ab' contains a control character at byte 1");
  EXPECT_REFUSED(Consumer(with([](auto& o) {
                   o.group = "g\x1b";
                   o.group_size = 2;
                   o.buffers = 3;
                 })),
                 ErrorCode::kInvalidArgument, "group 'g\\x1b' contains a control character at byte 1");
  EXPECT_REFUSED(Consumer(with([](auto& o) { o.producer_timeout = 0ms; })), ErrorCode::kInvalidArgument,
                 "producer_timeout must be between 1 ms and");
  EXPECT_REFUSED(Consumer(with([](auto& o) { o.producer_timeout = kForever; })), ErrorCode::kInvalidArgument,
                 "producer_timeout must be between 1 ms and");
  EXPECT_REFUSED(Consumer(with([](auto& o) { o.transfer_timeout = kForever; })), ErrorCode::kInvalidArgument,
                 "transfer_timeout must be between 1 ms and");
  EXPECT_REFUSED(Consumer(with([](auto& o) {
                   o.expected_layout = {{"w", DType::kF32, {2}}, {"w", DType::kF32, {2}}};
                 })),
                 ErrorCode::kInvalidArgument, "expected_layout lists 'w' twice");
  EXPECT_REFUSED(Consumer(with([](auto& o) { o.expected_layout = {{"w", DType::kF32, {-2}}}; })),
                 ErrorCode::kInvalidArgument, "expected_layout: tensor 'w' has a negative extent");
  // Taken, and then every version was rejected: "tensor 'a' is f32, expected unknown".
  EXPECT_REFUSED(Consumer(with([](auto& o) { o.expected_layout = {{"w", static_cast<DType>(77), {2}}}; })),
                 ErrorCode::kInvalidArgument, "expected_layout: tensor 'w' has an unknown dtype 77");
  EXPECT_REFUSED(Consumer(with([](auto& o) { o.expected_layout = {{"w\xff", DType::kF32, {2}}}; })),
                 ErrorCode::kInvalidArgument, "expected_layout: tensor name 'w\\xff' is not valid UTF-8 (byte 1)");
  EXPECT_REFUSED(Consumer(with([](auto& o) { o.buffers = 1'000'000'000'000; })), ErrorCode::kInvalidArgument,
                 "buffers must be between 2 and 1024, got 1000000000000");
  // A producer's bind forms, and an IPv6 address without brackets: "not usable: Invalid argument"
  // or "is on another host", neither of which said what was wrong.
  EXPECT_REFUSED(Consumer(with([](auto& o) { o.producer_endpoint = "tcp://0.0.0.0:5555"; })), ErrorCode::kInvalidArgument,
                 "'0.0.0.0' is a wildcard a producer binds to, not an address to connect to");
  EXPECT_REFUSED(Consumer(with([](auto& o) { o.producer_endpoint = "tcp://*:5555"; })), ErrorCode::kInvalidArgument,
                 "'*' is a wildcard a producer binds to");
  EXPECT_REFUSED(Consumer(with([](auto& o) { o.producer_endpoint = "tcp://::1:5555"; })), ErrorCode::kInvalidArgument,
                 "an IPv6 address goes in brackets (tcp://[::1]:PORT)");
  // A mistyped address was taken as a host name and refused as "on another host" (the forms the
  // rule refuses and takes: ConnectHost.RefusesOnlyWhatNoResolverReads).
  EXPECT_REFUSED(Consumer(with([](auto& o) { o.producer_endpoint = "tcp://256.1.1.1:5555"; })),
                 ErrorCode::kInvalidArgument, "'256.1.1.1' is no IPv4 address");
  // Taken, and its views said memory 9 (a host consumer in all but name).
  EXPECT_REFUSED(Consumer(with([](auto& o) { o.memory = static_cast<modelcast::MemoryKind>(9); })),
                 ErrorCode::kInvalidArgument, "memory 9 is no memory kind (host or cuda)");
  Consumer fine(with([](auto&) {}));
  EXPECT_REFUSED(fine.wait_for_version(1, -5ms), ErrorCode::kInvalidArgument, "wait_for_version: timeout -5 ms is negative");
}

// Caller buffers are checked against the model only once it is known (at the join): one too
// small was never said, and the consumer joined again for good, taking nothing.
TEST(OptionBounds, ACallerBufferSmallerThanTheModelIsNamedAtTheJoin) {
  Producer producer(producer_options());
  std::vector<float> values(1 << 16, 1.0f);  // 256 KiB
  producer.register_tensor({{"w", DType::kF32, {static_cast<std::int64_t>(values.size())}}, values.data()});
  producer.prepare();
  alignas(64) static std::byte memory[(1 << 20) + 4096];
  auto o = consumer_options(producer.control_endpoint());
  o.caller_buffers = {{memory, 1 << 20}, {memory + (1 << 20), 4096}};
  ErrorsSaid errors;
  o.on_error = errors.callback();
  Consumer consumer(o);
  ASSERT_TRUE(testing_support::eventually([&] { return !errors.texts().empty(); }, 60s))
      << "a caller buffer too small for the model was never named";
  const auto said = errors.texts();
  EXPECT_EQ(said.front().rfind("1 of the 2 caller buffers (the smallest 4096 bytes) cannot hold model 'bounds' of ", 0), 0u)
      << said.front();
  EXPECT_EQ(said.size(), 1u) << "said again: " << said.back();
}

// With the caller buffers that fit holding the current version and a view, and only a smaller one
// free, the next version waits, said once, until a large one is free: it was asked for and refused
// at every turn of the consumer's loop (each a fetch, a lease on a snapshot slot and a failed
// delivery).
TEST(OptionBounds, AVersionWaitsForACallerBufferItFitsInsteadOfBeingRefusedAtEveryTurn) {
  Producer producer(producer_options());
  std::vector<float> values(1 << 16, 1.0f);  // 256 KiB
  producer.register_tensor({{"w", DType::kF32, {static_cast<std::int64_t>(values.size())}}, values.data()});
  producer.prepare();
  alignas(64) static std::byte memory[2 * (1 << 20) + 4096];
  auto o = consumer_options(producer.control_endpoint());
  o.caller_buffers = {{memory, 1 << 20}, {memory + (1 << 20), 1 << 20}, {memory + 2 * (1 << 20), 4096}};
  ErrorsSaid errors;
  o.on_error = errors.callback();
  Consumer consumer(o);
  ASSERT_TRUE(producer.wait_for_consumers(1, 30s));
  producer.publish(1);
  auto held = consumer.wait_for_version(1, 30s);  // in one large buffer, held
  ASSERT_TRUE(held);
  values[0] = 2.0f;
  producer.publish(2);
  ASSERT_TRUE(consumer.wait_for_version(2, 30s));  // in the other, current
  values[0] = 3.0f;
  producer.publish(3);
  const std::string waits =
      "version 3 waits: every caller buffer of its 262144 bytes or more holds the current version or a view";
  ASSERT_TRUE(testing_support::eventually([&] {
    const auto said = errors.texts();
    return std::any_of(said.begin(), said.end(), [&](const std::string& e) { return e.find(waits) == 0; });
  }, 30s)) << "the wait was never said";
  const auto failed = producer.stats().failed_deliveries;
  // Before, a refusal came every 250 ms (a turn of the loop at the default producer_timeout):
  // twelve in these 3 s. None comes while the view is held.
  EXPECT_FALSE(testing_support::eventually([&] { return producer.stats().failed_deliveries >= failed + 3; }, 3s))
      << "the version was fetched and refused again at every turn";
  held = {};
  auto third = consumer.wait_for_version(3, 30s);
  ASSERT_TRUE(third) << "version 3 was not fetched once a large buffer was free";
  EXPECT_EQ(third.version(), 3u);
}

TEST(OptionBounds, CallerBuffersThatOverlapAreEmptyOrMisalignedAreRefused) {
  alignas(64) static std::byte memory[3 * 8192 + 64];
  auto with = [](std::vector<std::span<std::byte>> buffers) {
    auto o = consumer_options("tcp://127.0.0.1:1");
    o.caller_buffers = std::move(buffers);
    return o;
  };
  // Overlapping buffers once let a version land in a view still being read.
  EXPECT_REFUSED(Consumer(with({{memory, 8192}, {memory + 1024, 8192}})), ErrorCode::kInvalidArgument,
                 "caller_buffers[0] and caller_buffers[1] overlap");
  EXPECT_REFUSED(Consumer(with({{memory + 8192, 8192}, {memory, 8192}, {memory + 8192, 8192}})),
                 ErrorCode::kInvalidArgument, "overlap");
  EXPECT_REFUSED(Consumer(with({{memory, 8192}, {memory + 8192, 0}})), ErrorCode::kInvalidArgument,
                 "caller_buffers[1] is empty");
  EXPECT_REFUSED(Consumer(with({{memory, 8192}, {memory + 8192 + 1, 8192}})), ErrorCode::kInvalidArgument,
                 "caller_buffers[1] starts at an address that is not a multiple of 16");
  // Adjacent is not overlapping.
  Consumer adjacent(with({{memory, 8192}, {memory + 8192, 8192}, {memory + 2 * 8192, 8192}}));
}

TEST(OptionBounds, ChunkPlansCountTheirChunksWhateverTheChunkSize) {
  EXPECT_EQ((modelcast::transfer::ChunkPlan{4096, std::numeric_limits<std::uint64_t>::max()}.count()), 1u);
  EXPECT_EQ((modelcast::transfer::ChunkPlan{std::numeric_limits<std::uint64_t>::max(), std::uint64_t{1} << 63}.count()), 2u);
  EXPECT_EQ((modelcast::transfer::ChunkPlan{0, 65536}.count()), 0u);
  EXPECT_EQ((modelcast::transfer::ChunkPlan{65537, 65536}.count()), 2u);
}

// A timeout of milliseconds::max() ("for ever") once overflowed steady_clock and returned at once.
TEST(OptionBounds, WaitsOfMillisecondsMaxWaitForWhatTheyWaitFor) {
  Producer producer(producer_options());
  float value = 3;
  producer.register_tensor({{"w", DType::kF32, {1}}, &value});
  auto joined = std::async(std::launch::async, [&] { return producer.wait_for_consumers(1, kForever); });
  Consumer consumer(consumer_options(producer.control_endpoint()));
  auto installed = std::async(std::launch::async, [&] { return consumer.wait_for_version(1, kForever); });
  ASSERT_TRUE(joined.get()) << "wait_for_consumers(1, max) returned without a consumer";
  producer.publish(1);
  const auto view = installed.get();
  ASSERT_FALSE(view.empty()) << "wait_for_version(1, max) returned without the version";
  EXPECT_EQ(view.version(), 1u);
  EXPECT_EQ(view.tensor("w").as<float>()[0], 3.0f);
}

bool ipv6_loopback_available() {
  int fd = ::socket(AF_INET6, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in6 address{};
  address.sin6_family = AF_INET6;
  address.sin6_addr = in6addr_loopback;
  const bool bound = ::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0;
  ::close(fd);
  return bound;
}

// ZeroMQ refuses IPv6 addresses unless a socket is told to take them: a producer on [::1]
// could not be bound ("No such device") and no consumer could reach one.
TEST(OptionBounds, AProducerOnIPv6LoopbackServesAConsumer) {
  if (!ipv6_loopback_available()) GTEST_SKIP() << "this machine has no IPv6 loopback (::1)";
  auto options = producer_options();
  options.control_endpoint = "tcp://[::1]:0";
  Producer producer(options);
  EXPECT_EQ(producer.control_endpoint().rfind("tcp://[::1]:", 0), 0u) << producer.control_endpoint();
  float value = 5;
  producer.register_tensor({{"w", DType::kF32, {1}}, &value});
  Consumer consumer(consumer_options(producer.control_endpoint()));
  ASSERT_TRUE(producer.wait_for_consumers(1, 30s)) << consumer.stats().last_error;
  producer.publish(1);
  const auto view = consumer.wait_for_version(1, 30s);
  ASSERT_FALSE(view.empty()) << consumer.stats().last_error;
  EXPECT_EQ(view.tensor("w").as<float>()[0], 5.0f);
}

// The thread about to destroy a Producer or Consumer that others wait on for ever (Python's
// close() on another thread's wait) ends their waits first; nothing else stops.
TEST(OptionBounds, CancelledWaitsReturnEmptyHandedAndNothingElseStops) {
  Producer producer(producer_options());
  float value = 3;
  producer.register_tensor({{"w", DType::kF32, {1}}, &value});
  Consumer consumer(consumer_options(producer.control_endpoint()));
  auto joined = std::async(std::launch::async, [&] { return producer.wait_for_consumers(2, kForever); });
  auto installed = std::async(std::launch::async, [&] { return consumer.wait_for_version(1, kForever); });
  producer.cancel_waits();
  consumer.cancel_waits();
  EXPECT_FALSE(joined.get());
  EXPECT_TRUE(installed.get().empty());
  // Later waits return at once, whatever they wait for; versions still arrive and are read.
  EXPECT_FALSE(producer.wait_for_consumers(1, kForever));
  producer.publish(1);
  ASSERT_TRUE(testing_support::eventually([&] {
    const auto view = consumer.acquire();
    return !view.empty() && view.version() == 1;
  }, 30s));
  EXPECT_TRUE(consumer.wait_for_version(1, kForever).empty());
}

}  // namespace

namespace {

// ZeroMQ unlinks whatever is at an ipc:// path before it binds: a producer pointed at a file by
// mistake deleted it (a model's weights, a config) and served there.
TEST(OptionBounds, AnIpcEndpointThatNamesAFileOrDirectoryIsRefusedAndLeftAlone) {
  testing_support::PrivateDirectory directory;
  const std::string file = directory.file("weights.bin");
  std::ofstream(file) << "precious";
  EXPECT_REFUSED(Producer(with_endpoint("ipc://" + file)), ErrorCode::kInvalidArgument,
                 "'ipc://" + file + "' names a file that is not a socket");
  std::ifstream kept(file);
  std::string text;
  kept >> text;
  EXPECT_EQ(text, "precious") << "the file was replaced by a socket";
  const std::string sub = directory.file("sockets");
  std::filesystem::create_directory(sub);
  EXPECT_REFUSED(Producer(with_endpoint("ipc://" + sub)), ErrorCode::kInvalidArgument, "'ipc://" + sub + "' names a directory");
}

// Cancelled waits end at once with an empty answer, from a callback too (where a wait that would
// block is otherwise refused): the callback of a consumer about to be destroyed sees the same.
TEST(OptionBounds, ACancelledWaitInsideACallbackEndsEmptyAsAnywhere) {
  std::promise<std::string> consumer_said, producer_said;
  auto po = producer_options();
  Producer* self = nullptr;
  std::atomic<bool> delivered_once{false};
  po.on_delivery = [&](const modelcast::Delivery&) {
    if (delivered_once.exchange(true)) return;
    try {
      self->cancel_waits();
      producer_said.set_value(self->wait_for_consumers(2, kForever) ? "true" : "false");
    } catch (const Error& e) {
      producer_said.set_value(e.what());
    }
  };
  Producer producer(po);
  self = &producer;
  float value = 3;
  producer.register_tensor({{"w", DType::kF32, {1}}, &value});
  auto co = consumer_options(producer.control_endpoint());
  Consumer* me = nullptr;
  std::atomic<bool> updated_once{false};
  co.on_update = [&](const modelcast::ModelView& view) {
    if (updated_once.exchange(true)) return;
    try {
      me->cancel_waits();
      consumer_said.set_value(me->wait_for_version(view.version() + 1, kForever).empty() ? "empty" : "a view");
    } catch (const Error& e) {
      consumer_said.set_value(e.what());
    }
  };
  Consumer consumer(co);
  me = &consumer;
  ASSERT_TRUE(producer.wait_for_consumers(1, 30s));
  producer.publish(1);
  auto said = consumer_said.get_future();
  ASSERT_EQ(said.wait_for(60s), std::future_status::ready);
  EXPECT_EQ(said.get(), "empty");
  auto told = producer_said.get_future();
  ASSERT_EQ(told.wait_for(60s), std::future_status::ready);
  EXPECT_EQ(told.get(), "false");
}

// publish() from on_delivery (a trainer pacing itself: the next version once the last arrived)
// waited for a slot that only the thread running the callback could free: the producer hung for
// good, its consumers lost its heartbeats, and its destructor hung joining that thread. It takes
// a free slot or refuses at once, and the producer goes on.
TEST(OptionBounds, APublishFromOnDeliveryTakesAFreeSlotOrRefusesAndNeverWaits) {
  std::promise<std::vector<std::string>> outcomes;
  auto po = producer_options();
  po.snapshot_slots = 2;
  Producer* self = nullptr;
  std::atomic<bool> delivered_once{false};
  po.on_delivery = [&](const modelcast::Delivery&) {
    if (delivered_once.exchange(true)) return;
    std::vector<std::string> said;
    for (std::int64_t step : {2, 3}) {
      try {
        said.push_back("version " + std::to_string(self->publish(step).version));
      } catch (const Error& e) {
        said.push_back(e.what());
      }
    }
    outcomes.set_value(said);
  };
  auto producer = std::make_unique<Producer>(po);
  self = producer.get();
  float value = 3;
  producer->register_tensor({{"w", DType::kF32, {1}}, &value});
  Consumer consumer(consumer_options(producer->control_endpoint()));
  ASSERT_TRUE(producer->wait_for_consumers(1, 30s));
  producer->publish(1);
  auto said = outcomes.get_future();
  ASSERT_EQ(said.wait_for(60s), std::future_status::ready) << "on_delivery's publish never returned";
  const auto both = said.get();
  ASSERT_EQ(both.size(), 2u);
  // The second slot was free; then the only other holds version 1, still the newest until the
  // service thread, busy with this callback, publishes version 2.
  EXPECT_EQ(both[0], "version 2");
  EXPECT_NE(both[1].find("publish() with every snapshot slot in use called from on_delivery would block"), std::string::npos)
      << both[1];
  // The producer goes on: the version taken in the callback, then the trainer's next.
  EXPECT_TRUE(consumer.wait_for_version(2, 30s)) << consumer.stats().last_error;
  value = 4;
  EXPECT_EQ(producer->publish(4).version, 3u);
  auto view = consumer.wait_for_version(3, 30s);
  ASSERT_TRUE(view) << consumer.stats().last_error;
  EXPECT_EQ(view.step(), 4);
  producer.reset();  // returns: nothing waits on the service thread
}

// A wait inside a callback waits for the thread it runs on: it never ended, and the destructor
// that joins that thread hung with it. Now a wait that would block is refused naming both, one
// already satisfied answers (it was refused too); the destructors also end waits before they join.
TEST(OptionBounds, AWaitInsideACallbackIsRefusedAndNoDestructorHangs) {
  std::promise<std::string> consumer_said, producer_said;
  auto po = producer_options();
  Producer* self = nullptr;
  std::atomic<bool> delivered_once{false};
  po.on_delivery = [&](const modelcast::Delivery&) {
    if (delivered_once.exchange(true)) return;
    try {
      if (!self->wait_for_consumers(1, kForever)) return producer_said.set_value("one consumer was not seen");
      self->wait_for_consumers(2, kForever);
      producer_said.set_value("returned");
    } catch (const Error& e) {
      producer_said.set_value(e.what());
    }
  };
  auto producer = std::make_unique<Producer>(po);
  self = producer.get();
  float value = 3;
  producer->register_tensor({{"w", DType::kF32, {1}}, &value});
  auto co = consumer_options(producer->control_endpoint());
  Consumer* me = nullptr;
  std::atomic<bool> updated_once{false};
  co.on_update = [&](const modelcast::ModelView& view) {
    if (updated_once.exchange(true)) return;
    try {
      if (me->wait_for_version(view.version(), kForever).version() != view.version())
        return consumer_said.set_value("the installed version was not answered");
      me->wait_for_version(view.version() + 1, kForever);
      consumer_said.set_value("returned");
    } catch (const Error& e) {
      consumer_said.set_value(e.what());
    }
  };
  auto consumer = std::make_unique<Consumer>(co);
  me = consumer.get();
  ASSERT_TRUE(producer->wait_for_consumers(1, 30s));
  producer->publish(1);
  auto said = consumer_said.get_future();
  ASSERT_EQ(said.wait_for(60s), std::future_status::ready) << "on_update's wait never returned";
  EXPECT_NE(said.get().find("wait_for_version called from on_update would block"), std::string::npos);
  auto told = producer_said.get_future();
  ASSERT_EQ(told.wait_for(60s), std::future_status::ready) << "on_delivery's wait never returned";
  EXPECT_NE(told.get().find("wait_for_consumers called from on_delivery"), std::string::npos);
  // The consumer serves on: the next version arrives.
  value = 4;
  ASSERT_FALSE(consumer->wait_for_version(producer->publish(2).version, 30s).empty()) << consumer->stats().last_error;
  EXPECT_EQ(consumer->acquire().tensor("w").as<float>()[0], 4.0f);
  consumer.reset();
  producer.reset();
}

// Callbacks run on the consumer's thread: one that throws once ended the process (on_error) or
// was reported as the producer's fault (on_update).
TEST(OptionBounds, CallbacksThatThrowLeaveTheConsumerServing) {
  Producer producer(producer_options());
  float value = 3;
  producer.register_tensor({{"w", DType::kF32, {1}}, &value});
  std::atomic<int> updates{0}, errors{0};
  auto o = consumer_options(producer.control_endpoint());
  o.on_update = [&](const modelcast::ModelView&) {
    updates++;
    throw std::runtime_error("on_update of the test");
  };
  o.on_error = [&](const Error&) {
    errors++;
    throw 7;  // not even a std::exception
  };
  o.expected_layout = {{"w", DType::kF32, {1}}};
  Consumer consumer(o);
  ASSERT_TRUE(producer.wait_for_consumers(1, 30s));
  ASSERT_FALSE(consumer.wait_for_version(producer.publish(1).version, 30s).empty());
  ASSERT_TRUE(testing_support::eventually([&] { return updates.load() == 1; }, 30s));  // on_update follows the install
  EXPECT_EQ(consumer.stats().last_error, "") << "the user's exception was taken for a failure of the update";
  EXPECT_EQ(consumer.stats().versions_rejected, 0u);
  // A version the consumer rejects calls on_error, which throws; the consumer serves on.
  Producer other(producer_options());
  float wrong[2] = {1, 2};
  other.register_tensor({{"w", DType::kF32, {2}}, wrong});
  auto rejecting = consumer_options(other.control_endpoint());
  rejecting.on_error = o.on_error;
  rejecting.expected_layout = o.expected_layout;
  Consumer strict(rejecting);
  ASSERT_TRUE(other.wait_for_consumers(1, 30s));
  other.publish(1);
  ASSERT_TRUE(testing_support::eventually([&] { return strict.stats().versions_rejected >= 1; }, 30s));
  ASSERT_TRUE(testing_support::eventually([&] { return errors.load() >= 1; }, 30s));  // on_error follows the count
  value = 4;
  ASSERT_FALSE(consumer.wait_for_version(producer.publish(2).version, 30s).empty());
  EXPECT_EQ(consumer.acquire().tensor("w").as<float>()[0], 4.0f);
}

}  // namespace
