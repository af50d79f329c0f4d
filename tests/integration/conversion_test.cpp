// Consumers that serve in another precision: tensors are verified as the producer sent them and
// converted before the version is installed. Every converted byte is compared with the layout
// library's conversion of the producer's tensor (bit-exact widening, round-to-nearest-even
// narrowing, fp8 codes and scales), while a view of an older version stays as it was.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/layout/convert.h"
#include "eventually.h"
#include "modelcast/consumer.h"
#include "modelcast/error.h"
#include "modelcast/producer.h"

using namespace std::chrono_literals;
using modelcast::DType;
using modelcast::layout::Format;

namespace {

// A small model with one tensor of each kind the conversions treat differently.
struct Model {
  std::vector<float> w;            // f32, to fp8 with per-block scales
  std::vector<std::uint16_t> h;    // f16, widened to f32 (named)
  std::vector<std::uint16_t> b;    // bf16, "*" to bf16: left as it is
  std::vector<float> x;            // f32, "*" to bf16: narrowed
  std::vector<std::int32_t> idx;   // i32: "*" leaves it alone

  explicit Model(std::size_t n) : w(n), h(n), b(n), x(n), idx(n) {}

  void fill(std::uint64_t version) {
    std::mt19937_64 rng(version);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    for (auto& v : w) v = normal(rng) * static_cast<float>(version);
    std::vector<float> tmp(h.size());
    for (auto& v : tmp) v = normal(rng);
    modelcast::layout::convert(Format::kF32, tmp.data(), Format::kF16, h.data(), h.size());
    for (auto& v : tmp) v = normal(rng) * 1e3f;
    modelcast::layout::convert(Format::kF32, tmp.data(), Format::kBF16, b.data(), b.size());
    for (auto& v : x) v = normal(rng) / 7.0f;
    for (auto& v : idx) v = static_cast<std::int32_t>(rng());
  }

  std::vector<modelcast::TensorRef> refs() const {
    auto spec = [&](const char* name, DType dtype) {
      return modelcast::TensorSpec{name, dtype, {static_cast<std::int64_t>(w.size())}};
    };
    return {{spec("w", DType::kF32), w.data()},
            {spec("h", DType::kF16), h.data()},
            {spec("b", DType::kBF16), b.data()},
            {spec("x", DType::kF32), x.data()},
            {spec("idx", DType::kI32), idx.data()}};
  }
};

constexpr std::size_t kElements = 10000;  // not a multiple of the fp8 block
constexpr std::size_t kBlock = 64;

std::vector<modelcast::TensorConversion> conversions() {
  return {{"*", DType::kBF16, 0}, {"w", DType::kF8E4M3, kBlock}, {"h", DType::kF32, 0}};
}

modelcast::ConsumerOptions consumer_options(const std::string& endpoint) {
  modelcast::ConsumerOptions options;
  options.producer_endpoint = endpoint;
  options.model_name = "test";
  options.conversions = conversions();
  return options;
}

template <typename T>
bool same_bytes(const modelcast::TensorView& view, const std::vector<T>& expected) {
  return view.size_bytes() == expected.size() * sizeof(T) &&
         std::memcmp(view.data, expected.data(), view.size_bytes()) == 0;
}

// Empty if `view` holds `model` converted as conversions() asks.
std::string check(const modelcast::ModelView& view, const Model& model) {
  const std::size_t n = model.w.size();
  auto w = view.tensor("w");
  if (w.dtype() != DType::kF8E4M3) return "w is " + std::string(modelcast::dtype_name(w.dtype()));
  std::vector<std::uint8_t> codes(n);
  auto scales = modelcast::layout::quantize_fp8_per_block(Format::kF32, model.w.data(), codes.data(), n, kBlock);
  if (!same_bytes(w, codes)) return "w's fp8 codes differ";
  if (w.scale_block != kBlock || w.scales.size() != scales.size() ||
      !std::equal(scales.begin(), scales.end(), w.scales.begin())) {
    return "w's scales differ";
  }
  std::vector<float> h(n);
  modelcast::layout::convert(Format::kF16, model.h.data(), Format::kF32, h.data(), n);
  if (view.tensor("h").dtype() != DType::kF32 || !same_bytes(view.tensor("h"), h)) return "h differs";
  if (view.tensor("b").dtype() != DType::kBF16 || !same_bytes(view.tensor("b"), model.b)) return "b differs";
  std::vector<std::uint16_t> x(n);
  modelcast::layout::convert(Format::kF32, model.x.data(), Format::kBF16, x.data(), n);
  if (view.tensor("x").dtype() != DType::kBF16 || !same_bytes(view.tensor("x"), x)) return "x differs";
  if (view.tensor("idx").dtype() != DType::kI32 || !same_bytes(view.tensor("idx"), model.idx)) return "idx differs";
  if (!view.tensor("x").scales.empty()) return "x has scales";
  return {};
}

struct Fixture {
  Model model;
  std::unique_ptr<modelcast::Producer> producer;
  explicit Fixture(std::size_t elements = kElements) : model(elements) {
    modelcast::ProducerOptions options;
    options.model_name = "test";
    options.control_endpoint = "tcp://127.0.0.1:0";
    producer = std::make_unique<modelcast::Producer>(options);
    auto refs = model.refs();
    producer->register_tensors(refs);
    producer->prepare();
  }
};

}  // namespace

TEST(Conversion, ViewsHoldTheConvertedTensorsAndAnOlderViewKeepsItsOwn) {
  Fixture f;
  modelcast::Consumer consumer(consumer_options(f.producer->control_endpoint()));
  f.model.fill(1);
  const Model first = f.model;
  f.producer->publish(1);
  auto v1 = consumer.wait_for_version(1, 60s);
  ASSERT_TRUE(v1) << consumer.stats().last_error;
  EXPECT_EQ(check(v1, first), "");
  for (std::uint64_t v = 2; v <= 5; ++v) {
    f.model.fill(v);
    f.producer->publish(static_cast<std::int64_t>(v));
    auto view = consumer.wait_for_version(v, 60s);
    ASSERT_TRUE(view) << consumer.stats().last_error;
    // wait_for_version gives the first version >= v: only an exact one is checked against v.
    if (view.version() == v) {
      EXPECT_EQ(check(view, f.model), "") << "version " << v;
    }
  }
  EXPECT_EQ(check(v1, first), "") << "a held view's converted tensors were overwritten";
  EXPECT_EQ(consumer.stats().versions_rejected, 0u) << consumer.stats().last_error;
}

TEST(Conversion, ATensorThatCannotBeConvertedAsAskedIsRefusedByName) {
  Fixture f;
  auto absent = consumer_options(f.producer->control_endpoint());
  absent.conversions = {{"missing", DType::kBF16, 0}};
  auto integer = consumer_options(f.producer->control_endpoint());
  integer.conversions = {{"idx", DType::kF16, 0}};
  modelcast::Consumer a(absent), b(integer);
  f.model.fill(1);
  f.producer->publish(1);
  ASSERT_TRUE(testing_support::eventually([&] { return a.stats().versions_rejected >= 1; }, 60s));
  ASSERT_TRUE(testing_support::eventually([&] { return b.stats().versions_rejected >= 1; }, 60s));
  EXPECT_NE(a.stats().last_error.find("'missing'"), std::string::npos) << a.stats().last_error;
  EXPECT_NE(b.stats().last_error.find("'idx'"), std::string::npos) << b.stats().last_error;
  EXPECT_NE(b.stats().last_error.find("i32"), std::string::npos) << b.stats().last_error;
  EXPECT_TRUE(a.acquire().empty());
  EXPECT_TRUE(b.acquire().empty());
}

// Refused on its manifest, before its bytes: found only once the version had arrived, a 64 MiB
// model was received in full (and a receive buffer held) for every version, each then refused.
TEST(Conversion, AVersionThatCannotBeConvertedAsAskedIsRefusedBeforeItsBytesArrive) {
  Fixture f(16u << 20);  // five tensors: 64 MiB of f32 and i32 alone
  auto options = consumer_options(f.producer->control_endpoint());
  options.conversions = {{"idx", DType::kBF16, 0}};
  modelcast::Consumer consumer(options);
  f.producer->publish(1);  // zeros: what matters is their size
  std::uint64_t most_arrived = 0;
  bool arriving = false;
  ASSERT_TRUE(testing_support::eventually([&] {
    const auto stats = consumer.stats();
    most_arrived = std::max(most_arrived, stats.arriving_bytes);
    arriving = arriving || stats.arriving_version != 0;
    return stats.versions_rejected >= 1;
  }, 60s));
  const auto stats = consumer.stats();
  EXPECT_NE(stats.last_error.find("'idx'"), std::string::npos) << stats.last_error;
  EXPECT_FALSE(arriving) << "version 1 began to arrive (" << most_arrived << " bytes seen) before it was refused";
  EXPECT_EQ(stats.bytes_received, 0u);
  EXPECT_TRUE(consumer.acquire().empty());
}

TEST(Conversion, ConversionsThatCanNeverApplyAreRefusedAtConstruction) {
  auto refused = [](std::vector<modelcast::TensorConversion> conversions, const std::string& words) {
    auto options = consumer_options("tcp://127.0.0.1:1");
    options.conversions = std::move(conversions);
    try {
      modelcast::Consumer consumer(options);
    } catch (const modelcast::Error& e) {
      EXPECT_EQ(e.code(), modelcast::ErrorCode::kInvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
      return;
    }
    ADD_FAILURE() << "accepted; expected an error saying: " << words;
  };
  refused({{"w", DType::kI32, 0}}, "f32, f16, bf16 or f8e4m3");
  refused({{"w", DType::kBF16, 16}}, "fp8_block");
  refused({{"w", DType::kBF16, 0}, {"w", DType::kF16, 0}}, "converted twice");
  refused({{"", DType::kBF16, 0}}, "names no tensor");
}

// A converted tensor of 0 elements needs no bytes, yet its view points into the converted
// memory: a model of only such tensors left that memory unmade, and reading the view crashed.
TEST(Conversion, AModelWhoseConvertedTensorsAreEmptyServesEmptyViews) {
  modelcast::ProducerOptions options;
  options.model_name = "test";
  options.control_endpoint = "tcp://127.0.0.1:0";
  modelcast::Producer producer(options);
  float unused = 0.0f;
  std::vector<modelcast::TensorRef> refs = {{modelcast::TensorSpec{"empty", DType::kF32, {0}}, &unused}};
  producer.register_tensors(refs);
  producer.prepare();
  auto consumer_opts = consumer_options(producer.control_endpoint());
  consumer_opts.conversions = {{"*", DType::kF16, 0}};
  modelcast::Consumer consumer(consumer_opts);
  producer.publish(1);
  auto view = consumer.wait_for_version(1, 60s);
  ASSERT_TRUE(view) << consumer.stats().last_error;
  auto empty = view.tensor("empty");
  EXPECT_EQ(empty.dtype(), DType::kF16);
  EXPECT_EQ(empty.size_bytes(), 0u);
  const auto all = view.tensors();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all.front().name(), "empty");
}
