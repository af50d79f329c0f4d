// Consumers that keep parts of the model (ConsumerOptions::wants): tensor-parallel shards along
// either dimension, boxes, single tensors. Every byte of every view is compared with the part cut
// from the producer's tensor by an element-by-element reference here (not the layout library),
// and what crossed the transport is checked to be the blocks of the wanted parts only.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/layout/convert.h"
#include "core/model/tensor_selection.h"
#include "eventually.h"
#include "private_directory.h"
#include "reference_box.h"
#include "modelcast/consumer.h"
#include "modelcast/error.h"
#include "modelcast/producer.h"

using namespace std::chrono_literals;
using modelcast::DType;
using modelcast::TensorWant;

namespace {

constexpr std::uint64_t kChunk = 64 << 10;  // the smallest transfer chunk: many blocks per tensor

struct Tensor {
  std::string name;
  DType dtype;
  std::vector<std::int64_t> shape;
  std::vector<std::byte> bytes;

  std::size_t element_size() const { return modelcast::dtype_size(dtype); }
  std::int64_t elements() const {
    std::int64_t n = 1;
    for (auto e : shape) n *= e;
    return n;
  }
};

// Tensors of every rank the wants treat differently, none a multiple of the shard counts.
struct Model {
  std::vector<Tensor> tensors{{"big", DType::kF32, {1030, 512}, {}},
                              {"w1", DType::kF32, {256, 190}, {}},
                              {"w2", DType::kBF16, {300, 1001}, {}},
                              {"bias", DType::kF32, {190}, {}},
                              {"scale", DType::kF32, {}, {}}};

  Model() {
    for (auto& t : tensors) t.bytes.resize(static_cast<std::size_t>(t.elements()) * t.element_size());
  }

  // New values for the tensors named (all when empty), from `seed`. bf16 values are finite.
  void fill(std::uint64_t seed, const std::vector<std::string>& only = {}) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    for (auto& t : tensors) {
      if (!only.empty() && std::find(only.begin(), only.end(), t.name) == only.end()) continue;
      const auto n = static_cast<std::size_t>(t.elements());
      std::vector<float> values(n);
      for (auto& v : values) v = normal(rng);
      if (t.dtype == DType::kF32) {
        std::memcpy(t.bytes.data(), values.data(), n * 4);
      } else {
        modelcast::layout::convert(modelcast::layout::Format::kF32, values.data(), modelcast::layout::Format::kBF16,
                                   t.bytes.data(), n);
      }
    }
  }

  const Tensor& at(const std::string& name) const {
    for (const auto& t : tensors) {
      if (t.name == name) return t;
    }
    throw std::out_of_range(name);
  }

  std::vector<modelcast::TensorRef> refs() const {
    std::vector<modelcast::TensorRef> refs;
    for (const auto& t : tensors) refs.push_back({{t.name, t.dtype, t.shape}, t.bytes.data()});
    return refs;
  }
};

// The box [offset, offset + extent) of `t`, element by element in row-major order.
std::vector<std::byte> cut(const Tensor& t, const std::vector<std::int64_t>& offset,
                           const std::vector<std::int64_t>& extent) {
  return testing_support::cut_box(t.bytes.data(), t.shape, t.element_size(), offset, extent);
}

// torch.chunk's part k of n along `dim`: (offset, extent) of that dimension.
std::pair<std::int64_t, std::int64_t> chunk(std::int64_t size, std::size_t k, std::size_t n) {
  return testing_support::chunk_of(size, k, n);
}

std::string same(const modelcast::TensorView& view, const std::vector<std::byte>& expected) {
  if (view.size_bytes() != expected.size()) {
    return "'" + view.name() + "' has " + std::to_string(view.size_bytes()) + " bytes, expected " +
           std::to_string(expected.size());
  }
  if (std::memcmp(view.data, expected.data(), expected.size()) != 0) return "'" + view.name() + "' differs";
  return {};
}

// Empty if `view` holds, of every tensor, shard k of n along `dim` (tensors without that
// dimension whole), each with its place in the whole tensor.
std::string check_shards(const modelcast::ModelView& view, const Model& model, std::size_t dim, std::size_t k,
                         std::size_t n) {
  if (view.tensor_count() != model.tensors.size()) return "views: " + std::to_string(view.tensor_count());
  for (const auto& t : model.tensors) {
    auto v = view.tensor(t.name);
    if (dim >= t.shape.size()) {
      if (v.is_part() || v.shape() != t.shape) return "'" + t.name + "' is not whole";
      if (auto e = same(v, t.bytes); !e.empty()) return e;
      continue;
    }
    std::vector<std::int64_t> offset(t.shape.size(), 0), extent = t.shape;
    std::tie(offset[dim], extent[dim]) = chunk(t.shape[dim], k, n);
    if (!v.is_part()) return "'" + t.name + "' is whole";
    if (std::vector<std::int64_t>(v.box_offset.begin(), v.box_offset.end()) != offset) return "'" + t.name + "' offset";
    if (std::vector<std::int64_t>(v.whole_shape.begin(), v.whole_shape.end()) != t.shape) return "'" + t.name + "' shape";
    if (v.shape() != extent) return "'" + t.name + "' extent";
    if (auto e = same(v, cut(t, offset, extent)); !e.empty()) return e;
  }
  return {};
}

struct Fixture {
  Model model;
  std::unique_ptr<modelcast::Producer> producer;
  Fixture() {
    modelcast::ProducerOptions options;
    options.model_name = "test";
    options.control_endpoint = "tcp://127.0.0.1:0";
    options.transfer_chunk_bytes = kChunk;
    producer = std::make_unique<modelcast::Producer>(options);
    auto refs = model.refs();
    producer->register_tensors(refs);
    producer->prepare();
  }
  std::uint64_t model_bytes() const {
    std::uint64_t n = 0;
    for (const auto& t : model.tensors) n += t.bytes.size();
    return n;
  }
};

modelcast::ConsumerOptions options_for(const std::string& endpoint, std::vector<TensorWant> wants) {
  modelcast::ConsumerOptions options;
  options.producer_endpoint = endpoint;
  options.model_name = "test";
  options.wants = std::move(wants);
  return options;
}

// Blocks of kChunk bytes that hold [begin, end) of a tensor starting at `at` (any alignment).
std::uint64_t block_bytes_over(std::uint64_t bytes) { return (bytes / kChunk + 2) * kChunk; }

}  // namespace

class ShardWants : public testing::TestWithParam<std::pair<std::size_t, std::size_t>> {};

// n consumers, each the k-th shard of n along one dimension, over two versions: the second
// changes one tensor, and each consumer receives only the changed blocks it keeps.
TEST_P(ShardWants, EachRankHoldsItsShardOfEveryTensorEveryByteChecked) {
  const auto [dim, n] = GetParam();
  Fixture f;
  std::vector<std::unique_ptr<modelcast::Consumer>> ranks;
  for (std::size_t k = 0; k < n; ++k) {
    ranks.push_back(std::make_unique<modelcast::Consumer>(
        options_for(f.producer->control_endpoint(), {TensorWant::shard("*", dim, k, n)})));
  }
  f.model.fill(1);
  const Model first = f.model;
  f.producer->publish(1);
  std::vector<modelcast::ModelView> v1(n);
  for (std::size_t k = 0; k < n; ++k) {
    v1[k] = ranks[k]->wait_for_version(1, 60s);
    ASSERT_TRUE(v1[k]) << ranks[k]->stats().last_error;
    EXPECT_EQ(check_shards(v1[k], first, dim, k, n), "") << "rank " << k;
    const auto stats = ranks[k]->stats();
    std::uint64_t wanted = 0;
    for (const auto& t : first.tensors) wanted += v1[k].tensor(t.name).size_bytes();
    EXPECT_EQ(stats.wanted_bytes, wanted);
    if (dim == 0) {
      // Rows are contiguous: a dim-0 shard costs its bytes and the blocks at each tensor's edges.
      EXPECT_LE(stats.bytes_received, wanted + 2 * kChunk * first.tensors.size()) << "rank " << k;
      EXPECT_LT(stats.bytes_received, f.model_bytes() * 3 / 4) << "rank " << k;
    } else {
      // Rows shorter than a block: every block of a dim-1 shard holds some of its columns.
      EXPECT_GE(stats.bytes_received, wanted);
    }
  }
  // Version 2 changes `big` only: each rank receives the changed blocks that hold its shard of it
  // (a dim-0 shard: its rows, and at most one block at each end that it shares with a neighbour).
  const auto before = [&] {
    std::vector<std::uint64_t> b;
    for (auto& r : ranks) b.push_back(r->stats().bytes_received);
    return b;
  }();
  f.model.fill(2, {"big"});
  f.producer->publish(2);
  for (std::size_t k = 0; k < n; ++k) {
    auto v2 = ranks[k]->wait_for_version(2, 60s);
    ASSERT_TRUE(v2) << ranks[k]->stats().last_error;
    EXPECT_EQ(check_shards(v2, f.model, dim, k, n), "") << "rank " << k << ", version 2";
    const std::uint64_t shard = v2.tensor("big").size_bytes();
    const std::uint64_t received = ranks[k]->stats().bytes_received - before[k];
    EXPECT_GE(received, shard);
    const std::uint64_t whole = f.model.at("big").bytes.size();
    EXPECT_LE(received, (dim == 0 ? block_bytes_over(shard) : block_bytes_over(whole)) + 2 * kChunk) << "rank " << k;
    if (dim == 0) {
      EXPECT_LT(received, whole * 3 / 4) << "rank " << k;
    }
  }
  // The views of version 1 still hold version 1.
  for (std::size_t k = 0; k < n; ++k) EXPECT_EQ(check_shards(v1[k], first, dim, k, n), "") << "rank " << k;
}

INSTANTIATE_TEST_SUITE_P(HalvesAndQuarters, ShardWants,
                         testing::Values(std::pair<std::size_t, std::size_t>{0, 2}, std::pair<std::size_t, std::size_t>{1, 2},
                                         std::pair<std::size_t, std::size_t>{0, 4}, std::pair<std::size_t, std::size_t>{1, 4}),
                         [](const testing::TestParamInfo<std::pair<std::size_t, std::size_t>>& p) {
                           return "dim" + std::to_string(p.param.first) + "_of" + std::to_string(p.param.second);
                         });

TEST(TensorWants, SingleTensorsAndBoxesAreAllAViewHolds) {
  Fixture f;
  const std::vector<modelcast::TensorBox> boxes{{{10, 0}, {20, 1001}}, {{100, 500}, {50, 501}}};
  modelcast::Consumer consumer(options_for(f.producer->control_endpoint(),
                                           {TensorWant::nothing("*"), TensorWant::of("w2", boxes),
                                            TensorWant::whole("bias")}));
  f.model.fill(3);
  f.producer->publish(1);
  auto view = consumer.wait_for_version(1, 60s);
  ASSERT_TRUE(view) << consumer.stats().last_error;
  EXPECT_EQ(view.tensor_count(), 3u);
  EXPECT_FALSE(view.find("big"));
  EXPECT_FALSE(view.find("w1"));
  auto parts = view.parts("w2");
  ASSERT_EQ(parts.size(), 2u);
  const auto& w2 = f.model.at("w2");
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(std::vector<std::int64_t>(parts[i].box_offset.begin(), parts[i].box_offset.end()), boxes[i].offset);
    EXPECT_EQ(parts[i].shape(), boxes[i].extent);
    EXPECT_EQ(same(parts[i], cut(w2, boxes[i].offset, boxes[i].extent)), "") << "box " << i;
  }
  auto bias = view.tensor("bias");
  EXPECT_FALSE(bias.is_part());
  EXPECT_EQ(same(bias, f.model.at("bias").bytes), "");
  // Only the blocks over w2's two boxes and the bias crossed: far less than the model.
  const auto stats = consumer.stats();
  EXPECT_EQ(stats.wanted_bytes, parts[0].size_bytes() + parts[1].size_bytes() + bias.size_bytes());
  EXPECT_LE(stats.bytes_received, block_bytes_over(w2.bytes.size()) + 2 * kChunk);
  EXPECT_LT(stats.bytes_received, f.model_bytes() / 2);
  // And the producer sent no more than that: it left out the blocks nobody here keeps.
  ASSERT_TRUE(testing_support::eventually([&] { return f.producer->stats().deliveries >= 1; }, 60s));
  EXPECT_EQ(f.producer->stats().bytes_sent, stats.bytes_received);
}

// Sharded training code run on one rank still says where its tensors lie in the whole
// (global_shape, at offset 0), which the producer allows: the consumer then took them for one
// rank's pieces, and a tensor with no elements, or a shard of it that came out empty, was
// dropped from the view ("version 1 has no tensor 'z'"), as a piece this rank does not hold.
TEST(TensorWants, AnOnlyRanksTensorsPlacedInTheWholeAreServedAsWholeTensorsEmptyOnesIncluded) {
  modelcast::ProducerOptions options;
  options.model_name = "test";
  options.control_endpoint = "tcp://127.0.0.1:0";
  modelcast::Producer producer(options);
  std::vector<float> a(6, 2.5f);
  modelcast::TensorRef placed{{"a", modelcast::DType::kF32, {2, 3}}, a.data()};
  placed.global_shape = {2, 3};
  placed.global_offset = {0, 0};
  producer.register_tensor(placed);
  modelcast::TensorRef empty{{"z", modelcast::DType::kF32, {0, 760}}, a.data()};
  empty.global_shape = {0, 760};
  empty.global_offset = {0, 0};
  producer.register_tensor(empty);
  modelcast::Consumer whole(options_for(producer.control_endpoint(), {}));
  // Part 3 of 4 of a's 3 columns is empty.
  modelcast::Consumer sharded(options_for(producer.control_endpoint(), {TensorWant::shard("a", 1, 3, 4)}));
  producer.publish(1);
  auto view = whole.wait_for_version(1, 60s);
  ASSERT_TRUE(view) << whole.stats().last_error;
  EXPECT_EQ(view.tensor_count(), 2u);
  ASSERT_TRUE(view.find("z")) << "the empty tensor is missing";
  EXPECT_EQ(view.tensor("z").shape(), (std::vector<std::int64_t>{0, 760}));
  EXPECT_EQ(same(view.tensor("a"), std::vector<std::byte>(reinterpret_cast<const std::byte*>(a.data()),
                                                          reinterpret_cast<const std::byte*>(a.data() + a.size()))),
            "");
  auto shard = sharded.wait_for_version(1, 60s);
  ASSERT_TRUE(shard) << sharded.stats().last_error;
  ASSERT_TRUE(shard.find("a")) << "the empty shard is missing";
  EXPECT_EQ(shard.tensor("a").shape(), (std::vector<std::int64_t>{2, 0}));
  EXPECT_TRUE(shard.find("z"));
}

TEST(TensorWants, AShardInAnotherDtypeIsCutThenConverted) {
  Fixture f;
  auto options = options_for(f.producer->control_endpoint(), {TensorWant::shard("w1", 1, 1, 2),
                                                              TensorWant::shard("big", 0, 2, 3), TensorWant::nothing("*")});
  options.conversions = {{"w1", DType::kBF16, 0}, {"big", DType::kF8E4M3, 128}};
  modelcast::Consumer consumer(options);
  f.model.fill(4);
  f.producer->publish(1);
  auto view = consumer.wait_for_version(1, 60s);
  ASSERT_TRUE(view) << consumer.stats().last_error;
  using modelcast::layout::Format;
  const auto& w1 = f.model.at("w1");
  auto [c0, cn] = chunk(190, 1, 2);
  auto part = cut(w1, {0, c0}, {256, cn});
  std::vector<std::byte> bf16(part.size() / 2);
  modelcast::layout::convert(Format::kF32, part.data(), Format::kBF16, bf16.data(), part.size() / 4);
  EXPECT_EQ(view.tensor("w1").dtype(), DType::kBF16);
  EXPECT_EQ(same(view.tensor("w1"), bf16), "");
  const auto& big = f.model.at("big");
  auto [r0, rn] = chunk(1030, 2, 3);
  auto rows = cut(big, {r0, 0}, {rn, 512});
  std::vector<std::byte> codes(rows.size() / 4);
  auto scales = modelcast::layout::quantize_fp8_per_block(Format::kF32, rows.data(),
                                                          reinterpret_cast<std::uint8_t*>(codes.data()),
                                                          rows.size() / 4, 128);
  auto b = view.tensor("big");
  EXPECT_EQ(b.dtype(), DType::kF8E4M3);
  EXPECT_EQ(same(b, codes), "");
  EXPECT_EQ(std::vector<float>(b.scales.begin(), b.scales.end()), scales);
  EXPECT_EQ(b.scale_block, 128u);
}

TEST(TensorWants, WantsAVersionDoesNotMeetAreRefusedBeforeAnyByteNamingTheTensorAndTheBox) {
  Fixture f;
  modelcast::Consumer absent(options_for(f.producer->control_endpoint(), {TensorWant::shard("nope", 0, 0, 2)}));
  modelcast::Consumer outside(options_for(f.producer->control_endpoint(),
                                          {TensorWant::of("w1", {{{200, 0}, {100, 190}}})}));
  modelcast::Consumer no_dim(options_for(f.producer->control_endpoint(), {TensorWant::shard("bias", 1, 0, 2)}));
  f.model.fill(5);
  f.producer->publish(1);
  auto refused = [](modelcast::Consumer& c, const std::vector<std::string>& words) {
    ASSERT_TRUE(testing_support::eventually([&] { return c.stats().versions_rejected >= 1; }, 60s));
    const auto stats = c.stats();
    for (const auto& w : words) EXPECT_NE(stats.last_error.find(w), std::string::npos) << stats.last_error;
    EXPECT_EQ(stats.bytes_received, 0u) << "bytes came for a version refused on its manifest";
    EXPECT_TRUE(c.acquire().empty());
  };
  refused(absent, {"'nope'"});
  refused(outside, {"'w1'", "[200:300, 0:190]", "[256, 190]"});
  refused(no_dim, {"'bias'", "dimension 1"});
}

TEST(TensorWants, WantsThatCanNeverBeMetAreRefusedAtConstruction) {
  auto refused = [](std::vector<TensorWant> wants, const std::string& words) {
    try {
      modelcast::Consumer consumer(options_for("tcp://127.0.0.1:1", std::move(wants)));
    } catch (const modelcast::Error& e) {
      EXPECT_EQ(e.code(), modelcast::ErrorCode::kInvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
      return;
    }
    ADD_FAILURE() << "accepted; expected an error saying: " << words;
  };
  refused({TensorWant::shard("w", 0, 2, 2)}, "shard 2 of 2");
  refused({TensorWant::shard("w", 0, 0, 0)}, "count above 0");
  refused({TensorWant::whole("w"), TensorWant::nothing("w")}, "wanted twice");
  refused({TensorWant::of("w", {})}, "no boxes");
  refused({TensorWant::of("w", {{{0}, {1, 2}}})}, "1 offsets for 2 extents");
  refused({TensorWant::of("w", {{{-1}, {2}}})}, "negative");
  refused({TensorWant::whole("")}, "names no tensor");
  refused({TensorWant::of("w", {{{0, 0}, {10, 10}}, {{5, 5}, {10, 10}}})}, "[0:10, 0:10] and [5:15, 5:15] overlap");
  refused({TensorWant::of("w", {{{0, 0}, {10, 0}}})}, "is empty");
  refused({TensorWant::of("w", {{{0, 0}, {10, 10}}, {{20}, {10}}})}, "of different rank");
  refused({TensorWant::of("w", {{{std::numeric_limits<std::int64_t>::max() - 1}, {2}}})}, "exceeds 2^63 - 1");
  std::vector<modelcast::TensorBox> many(modelcast::TensorSelection::kMaxBoxes + 1, {{0}, {1}});
  refused({TensorWant::of("w", many)}, "at most 1024");
  // More than a request carries (the producer's socket dropped it unread, and the consumer said
  // only that no producer answered).
  std::vector<TensorWant> named;
  for (int i = 0; i < 8192; ++i) named.push_back(TensorWant::whole("model.layers." + std::to_string(i) + ".mlp.weight"));
  refused(named, "8192 wants take ");
  refused(named, " bytes in a request, more than the 196608 a request may give them (a producer reads requests of "
                 "at most 262144 bytes)");
}

// Readers that hold views of shaped versions across a trainer's restart at the same endpoint:
// the restart empties the receive pool, so the new producer's version was fetched while every
// shaped-view buffer was still held, refused whole once it arrived (counted as a rejected
// version) and never asked for again. The consumer served the old producer's version until the
// new one happened to publish another. The version now waits for a buffer, as the error says.
TEST(TensorWants, AVersionThatWaitsForShapedMemoryAcrossAProducerRestartComesOnceAViewIsReleased) {
  testing_support::PrivateDirectory directory;  // a fixed ipc:// endpoint for both producers
  modelcast::ProducerOptions producer_options;
  producer_options.model_name = "test";
  producer_options.control_endpoint = directory.ipc_endpoint();
  producer_options.transfer_chunk_bytes = kChunk;
  Model model;
  auto first = std::make_unique<modelcast::Producer>(producer_options);
  first->register_tensors(model.refs());
  auto options = options_for(producer_options.control_endpoint, {TensorWant::shard("*", 1, 0, 2)});
  options.buffers = 3;
  modelcast::Consumer consumer(options);
  std::vector<modelcast::ModelView> held;
  for (std::uint64_t v = 1; v <= 3; ++v) {
    model.fill(v);
    first->publish(static_cast<std::int64_t>(v));
    auto view = consumer.wait_for_version(v, 60s);
    ASSERT_TRUE(view) << consumer.stats().last_error;
    if (v < 3) held.push_back(std::move(view));  // with the current one, every buffer is held
  }
  const auto old_incarnation = held.front().producer_incarnation();
  first.reset();
  Model restarted;
  restarted.fill(99);
  modelcast::Producer second(producer_options);
  second.register_tensors(restarted.refs());
  second.publish(1);
  ASSERT_TRUE(testing_support::eventually(
      [&] {
        const auto s = consumer.stats();
        return s.versions_rejected > 0 || s.last_error.find("version 1 waits") != std::string::npos;
      },
      60s))
      << consumer.stats().last_error;
  EXPECT_EQ(consumer.stats().versions_rejected, 0u) << consumer.stats().last_error;
  held.clear();
  ASSERT_TRUE(testing_support::eventually(
      [&] { return consumer.acquire().producer_incarnation() != old_incarnation; }, 60s))
      << "the restarted producer's version never came: " << consumer.stats().last_error;
  EXPECT_EQ(check_shards(consumer.acquire(), restarted, 1, 0, 2), "");
}
