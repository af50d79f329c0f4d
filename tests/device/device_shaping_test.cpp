// Parts and dtypes on the device: the runtime's gather, conversion and fp8 quantization give the
// host's bits (core/layout/convert.h's functions, themselves checked against independent
// references), and a device consumer that wants parts of tensors in other dtypes holds, in device
// memory, exactly what a host consumer of the same versions holds, from a host producer and from
// a device producer. On the simulated device in the ordinary suite, on the GPU where there is one.
#include <gtest/gtest.h>

#include <cstdint>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/layout/convert.h"
#include "device/device_runtime.h"
#include "modelcast/consumer.h"
#include "modelcast/error.h"
#include "modelcast/producer.h"

using namespace std::chrono_literals;
using modelcast::DType;
using modelcast::MemoryKind;
using modelcast::TensorWant;
using modelcast::device::DeviceRuntime;
namespace layout = modelcast::layout;

namespace {

DeviceRuntime& runtime() { return modelcast::device::require_device_runtime("the device tests"); }

// Device memory released at scope exit.
struct DeviceBytes {
  DeviceRuntime& rt;
  void* p;
  std::size_t n;
  DeviceBytes(DeviceRuntime& r, std::size_t bytes) : rt(r), p(r.allocate(0, bytes)), n(bytes) {}
  ~DeviceBytes() { rt.release(p); }
  void upload(const void* host) {
    rt.copy_async(p, host, n, nullptr);
    rt.synchronize_stream(nullptr);
  }
  std::vector<std::byte> download(std::size_t bytes) const {
    std::vector<std::byte> out(bytes);
    if (bytes) rt.copy_async(out.data(), p, bytes, nullptr);
    rt.synchronize_stream(nullptr);
    return out;
  }
};

// f32 values of every kind a conversion treats apart: ordinary, ties, tiny and subnormal,
// past f16's range, infinities and NaNs.
std::vector<float> awkward_floats(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> v(n);
  const float specials[] = {0.0f, -0.0f, 1.0f + std::ldexp(1.0f, -8), 65519.0f, 65520.0f, 1e30f, -1e-30f,
                            std::ldexp(1.0f, -25), std::ldexp(1.5f, -25), std::numeric_limits<float>::denorm_min(),
                            std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(), 448.0f, 464.0f};
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (std::size_t i = 0; i < n; ++i) {
    v[i] = i % 7 == 3 ? specials[(i / 7) % std::size(specials)] : normal(rng) * std::ldexp(1.0f, static_cast<int>(rng() % 40) - 20);
  }
  return v;
}

TEST(DeviceShaping, GatherConversionAndFp8OnTheDeviceGiveTheHostsBits) {
  auto& rt = runtime();
  constexpr std::size_t kCount = 10'000;
  const auto f32 = awkward_floats(kCount, 7);
  std::vector<std::uint16_t> f16(kCount), bf16(kCount);
  layout::convert(layout::Format::kF32, f32.data(), layout::Format::kF16, f16.data(), kCount);
  layout::convert(layout::Format::kF32, f32.data(), layout::Format::kBF16, bf16.data(), kCount);
  struct Source {
    DType dtype;
    layout::Format format;
    const void* host;
  };
  const Source sources[] = {{DType::kF32, layout::Format::kF32, f32.data()},
                            {DType::kF16, layout::Format::kF16, f16.data()},
                            {DType::kBF16, layout::Format::kBF16, bf16.data()}};
  void* stream = rt.create_stream(0);
  for (const auto& from : sources) {
    const std::size_t in_bytes = kCount * modelcast::dtype_size(from.dtype);
    DeviceBytes in(rt, in_bytes);
    in.upload(from.host);
    for (const auto& to : sources) {
      const std::size_t out_bytes = kCount * modelcast::dtype_size(to.dtype);
      DeviceBytes out(rt, out_bytes);
      rt.convert_async(out.p, to.dtype, in.p, from.dtype, kCount, stream);
      rt.synchronize_stream(stream);
      std::vector<std::byte> expected(out_bytes);
      layout::convert(from.format, from.host, to.format, expected.data(), kCount);
      EXPECT_EQ(out.download(out_bytes), expected) << modelcast::dtype_name(from.dtype) << " to "
                                                   << modelcast::dtype_name(to.dtype);
    }
    // fp8: one scale for all, per block with a short last block, and blocks so large that
    // count + block - 1 wraps (one block: the count of them wrapped to none, and the first scale
    // was written past an empty array).
    for (std::size_t block : {std::size_t{0}, std::size_t{64}, std::size_t{999}, SIZE_MAX, SIZE_MAX - kCount + 2}) {
      DeviceBytes out(rt, kCount);
      auto scales = rt.quantize_fp8(out.p, in.p, from.dtype, kCount, block, stream);
      std::vector<std::uint8_t> expected(kCount);
      std::vector<float> expected_scales =
          block == 0 ? std::vector<float>{layout::quantize_fp8_per_tensor(from.format, from.host, expected.data(), kCount)}
                     : layout::quantize_fp8_per_block(from.format, from.host, expected.data(), kCount, block);
      EXPECT_EQ(scales, expected_scales) << modelcast::dtype_name(from.dtype) << " block " << block;
      auto codes = out.download(kCount);
      EXPECT_EQ(std::memcmp(codes.data(), expected.data(), kCount), 0)
          << modelcast::dtype_name(from.dtype) << " block " << block;
    }
  }
  // A conversion to the same dtype copies the bytes, NaN payloads included, as the host does.
  {
    const std::uint16_t payloads[] = {0x7f81, 0xffa5, 0x3f80, 0x7fc0};
    DeviceBytes in(rt, sizeof payloads), out(rt, sizeof payloads);
    in.upload(payloads);
    rt.convert_async(out.p, DType::kBF16, in.p, DType::kBF16, std::size(payloads), stream);
    rt.synchronize_stream(stream);
    auto bytes = out.download(sizeof payloads);
    EXPECT_EQ(std::memcmp(bytes.data(), payloads, sizeof payloads), 0);
  }
  // A gather: the rows 3..40 of columns 5..21 of a 64 x 32 matrix of 4-byte elements.
  std::vector<modelcast::device::ByteRun> runs;
  for (std::uint64_t r = 0; r < 37; ++r) runs.push_back({((3 + r) * 32 + 5) * 4, r * 16 * 4, 16 * 4});
  DeviceBytes matrix(rt, 64 * 32 * 4), part(rt, 37 * 16 * 4);
  matrix.upload(f32.data());
  rt.gather_async(part.p, matrix.p, runs, stream);
  rt.synchronize_stream(stream);
  std::vector<std::byte> expected(37 * 16 * 4);
  for (const auto& run : runs) {
    std::memcpy(expected.data() + run.dst_offset, reinterpret_cast<const std::byte*>(f32.data()) + run.src_offset, run.bytes);
  }
  EXPECT_EQ(part.download(expected.size()), expected);
  rt.destroy_stream(stream);
}

TEST(DeviceShaping, TheSimulationRefusesKernelsOnHostMemory) {
  auto& rt = runtime();
  if (rt.name() != "simulated") GTEST_SKIP() << "a GPU would fault; only the simulation checks";
  std::vector<float> host(16);
  DeviceBytes device(rt, 64);
  try {
    rt.convert_async(device.p, DType::kBF16, host.data(), DType::kF32, 16, nullptr);
    ADD_FAILURE() << "a conversion from host memory was queued";
  } catch (const modelcast::Error& e) {
    EXPECT_EQ(e.code(), modelcast::ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("not device memory"), std::string::npos) << e.what();
  }
  EXPECT_THROW(rt.convert_async(device.p, DType::kI32, device.p, DType::kF32, 4, nullptr), modelcast::Error);
}

// The model both consumers get: tensors of each float dtype, odd shapes, and an integer one.
struct Model {
  std::vector<float> w = std::vector<float>(1024 * 96);      // "w"  f32 [1024, 96]
  std::vector<std::uint16_t> h = std::vector<std::uint16_t>(33 * 17);  // "h"  f16 [33, 17]
  std::vector<std::uint16_t> e = std::vector<std::uint16_t>(64 * 40);  // "e"  bf16 [64, 40]
  std::vector<float> b = std::vector<float>(96);             // "b"  f32 [96]
  std::vector<std::int32_t> ids = std::vector<std::int32_t>(10);  // "ids" i32 [10]
  // In place: a host producer reads the registered memory.
  void fill(std::uint64_t version) {
    const auto w32 = awkward_floats(w.size(), version);
    std::copy(w32.begin(), w32.end(), w.begin());
    const auto h32 = awkward_floats(h.size(), version + 100);
    layout::convert(layout::Format::kF32, h32.data(), layout::Format::kF16, h.data(), h.size());
    const auto e32 = awkward_floats(e.size(), version + 200);
    layout::convert(layout::Format::kF32, e32.data(), layout::Format::kBF16, e.data(), e.size());
    const auto b32 = awkward_floats(b.size(), version + 300);
    std::copy(b32.begin(), b32.end(), b.begin());
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>(version * 100 + i);
  }
  std::vector<modelcast::TensorRef> refs(const std::vector<void*>& at) const {
    return {{{"w", DType::kF32, {1024, 96}}, at[0]},
            {{"h", DType::kF16, {33, 17}}, at[1]},
            {{"e", DType::kBF16, {64, 40}}, at[2]},
            {{"b", DType::kF32, {96}}, at[3]},
            {{"ids", DType::kI32, {10}}, at[4]}};
  }
  std::vector<std::pair<const void*, std::size_t>> parts() const {
    return {{w.data(), w.size() * 4}, {h.data(), h.size() * 2}, {e.data(), e.size() * 2}, {b.data(), b.size() * 4},
            {ids.data(), ids.size() * 4}};
  }
};

// What both consumers keep: the second dim-1 half of every matrix (rows of runs: a gather), "e"
// as its first dim-0 quarter (one run: in place unless converted) plus a box, "b" and "ids"
// whole; "*" to bf16 (so "w" and "h" convert), "e" to fp8 per block of 64, "b" to fp8 per tensor.
modelcast::ConsumerOptions shaped(const std::string& endpoint, MemoryKind memory) {
  modelcast::ConsumerOptions o;
  o.producer_endpoint = endpoint;
  o.model_name = "shaped";
  o.memory = memory;
  o.wants = {TensorWant::shard("*", 1, 1, 2), TensorWant::of("e", {{{0, 0}, {16, 40}}, {{40, 8}, {20, 24}}}),
             TensorWant::whole("ids")};
  o.conversions = {{"*", DType::kBF16, 0}, {"e", DType::kF8E4M3, 64}, {"b", DType::kF8E4M3, 0}};
  return o;
}

// Empty if the device view holds, in device memory, the host view's views byte for byte.
std::string same(DeviceRuntime& rt, const modelcast::ModelView& on_device, const modelcast::ModelView& on_host) {
  if (on_device.step() != on_host.step()) return "steps differ";
  auto d = on_device.tensors();
  auto h = on_host.tensors();
  if (d.size() != h.size()) return std::to_string(d.size()) + " views on the device, " + std::to_string(h.size()) + " on the host";
  for (std::size_t i = 0; i < d.size(); ++i) {
    const std::string what = "view " + std::to_string(i) + " ('" + h[i].name() + "')";
    if (d[i].name() != h[i].name() || d[i].dtype() != h[i].dtype() || d[i].shape() != h[i].shape()) return what + ": spec";
    if (d[i].spec->memory != MemoryKind::kCuda) return what + " is not in device memory";
    if (rt.pointer_info(d[i].data).kind != MemoryKind::kCuda) return what + " points outside device memory";
    if (!std::equal(d[i].box_offset.begin(), d[i].box_offset.end(), h[i].box_offset.begin(), h[i].box_offset.end()) ||
        !std::equal(d[i].whole_shape.begin(), d[i].whole_shape.end(), h[i].whole_shape.begin(), h[i].whole_shape.end())) {
      return what + ": place in the whole tensor";
    }
    if (!std::equal(d[i].scales.begin(), d[i].scales.end(), h[i].scales.begin(), h[i].scales.end()) ||
        d[i].scale_block != h[i].scale_block) {
      return what + ": fp8 scales";
    }
    std::vector<std::byte> bytes(d[i].size_bytes());
    if (!bytes.empty()) rt.copy_async(bytes.data(), d[i].data, bytes.size(), nullptr);
    rt.synchronize_stream(nullptr);
    if (bytes.size() != h[i].size_bytes() || std::memcmp(bytes.data(), h[i].data, bytes.size()) != 0) {
      return what + ": bytes differ";
    }
  }
  return {};
}

// Publishes two versions from `producer` (its tensors at `at`, `upload` putting `model` there)
// and compares what a device consumer and a host consumer hold of each.
template <typename Upload>
void compare_consumers(modelcast::Producer& producer, Model& model, Upload&& upload) {
  auto& rt = runtime();
  modelcast::Consumer host(shaped(producer.control_endpoint(), MemoryKind::kHost));
  modelcast::Consumer device(shaped(producer.control_endpoint(), MemoryKind::kCuda));
  ASSERT_TRUE(producer.wait_for_consumers(2, 60s));
  for (std::uint64_t v = 1; v <= 2; ++v) {
    model.fill(v);
    upload();
    producer.publish(static_cast<std::int64_t>(v));
    auto on_host = host.wait_for_version(v, 60s);
    auto on_device = device.wait_for_version(v, 60s);
    ASSERT_FALSE(on_host.empty()) << host.stats().last_error;
    ASSERT_FALSE(on_device.empty()) << device.stats().last_error;
    ASSERT_EQ(on_device.tensor_count(), 6u);  // w, h, e (2 boxes), b, ids: the wants' views
    EXPECT_EQ(on_device.find("w")->dtype(), DType::kBF16);
    EXPECT_EQ(on_device.find("w")->shape(), (std::vector<std::int64_t>{1024, 48}));
    EXPECT_EQ(on_device.parts("e").size(), 2u);
    EXPECT_EQ(same(rt, on_device, on_host), "") << "version " << v;
    EXPECT_EQ(device.stats().versions_rejected, 0u) << device.stats().last_error;
  }
}

TEST(DeviceShaping, ADeviceConsumerCutsAndConvertsOnTheDeviceToTheHostConsumersBits) {
  modelcast::ProducerOptions options;
  options.model_name = "shaped";
  options.control_endpoint = "tcp://127.0.0.1:0";
  options.transfer_chunk_bytes = 64 << 10;  // the smallest blocks: "w" spans several
  Model model;
  std::vector<void*> at;
  for (const auto& [p, n] : model.parts()) at.push_back(const_cast<void*>(p));
  modelcast::Producer producer(options);
  producer.register_tensors(model.refs(at));
  producer.prepare();
  compare_consumers(producer, model, [] {});
}

TEST(DeviceShaping, ADeviceProducersVersionsAreCutAndConvertedOnTheDeviceConsumer) {
  auto& rt = runtime();
  modelcast::ProducerOptions options;
  options.model_name = "shaped";
  options.control_endpoint = "tcp://127.0.0.1:0";
  Model model;
  std::vector<std::unique_ptr<DeviceBytes>> tensors;
  std::vector<void*> at;
  for (const auto& [p, n] : model.parts()) {
    tensors.push_back(std::make_unique<DeviceBytes>(rt, n));
    at.push_back(tensors.back()->p);
  }
  auto refs = model.refs(at);
  for (auto& r : refs) r.spec.memory = MemoryKind::kCuda;
  modelcast::Producer producer(options);
  producer.register_tensors(refs);
  producer.prepare();
  compare_consumers(producer, model, [&] {
    auto parts = model.parts();
    for (std::size_t i = 0; i < parts.size(); ++i) tensors[i]->upload(parts[i].first);
  });
}

// A model two producer ranks publish, each holding half of "w" (dim 0) and all of "b": a device
// consumer assembles (and converts) the pieces on its device, to the host consumer's bits.
TEST(DeviceShaping, ADeviceConsumerAssemblesProducerRanksPiecesOnTheDevice) {
  auto& rt = runtime();
  constexpr std::int64_t kRows = 512, kCols = 64;
  struct Rank {
    std::vector<float> w = std::vector<float>(kRows / 2 * kCols), b = std::vector<float>(kCols);
    std::unique_ptr<modelcast::Producer> producer;
  };
  Rank ranks[2];
  std::string endpoint1;
  for (int r : {1, 0}) {
    modelcast::ProducerOptions options;
    options.model_name = "shaped";
    options.control_endpoint = "tcp://127.0.0.1:0";
    options.rank = static_cast<std::uint32_t>(r);
    options.rank_count = 2;
    if (r == 0) options.rank_endpoints = {"", endpoint1};
    ranks[r].producer = std::make_unique<modelcast::Producer>(options);
    modelcast::TensorRef w{{"w", DType::kF32, {kRows / 2, kCols}}, ranks[r].w.data()};
    w.global_shape = {kRows, kCols};
    w.global_offset = {r * kRows / 2, 0};
    ranks[r].producer->register_tensor(w);
    ranks[r].producer->register_tensor({{"b", DType::kF32, {kCols}}, ranks[r].b.data()});
    ranks[r].producer->prepare();
    if (r == 1) endpoint1 = ranks[r].producer->control_endpoint();
  }
  auto options = [&](MemoryKind memory, bool shaped) {
    modelcast::ConsumerOptions o;
    o.producer_endpoint = ranks[0].producer->control_endpoint();
    o.model_name = "shaped";
    o.memory = memory;
    if (shaped) {
      o.wants = {TensorWant::shard("*", 1, 0, 2)};  // across both ranks' pieces of "w"
      o.conversions = {{"w", DType::kBF16, 0}, {"b", DType::kF8E4M3, 16}};
    }
    return o;
  };
  modelcast::Consumer host(options(MemoryKind::kHost, true));
  modelcast::Consumer device(options(MemoryKind::kCuda, true));
  modelcast::Consumer device_whole(options(MemoryKind::kCuda, false));
  modelcast::Consumer host_whole(options(MemoryKind::kHost, false));
  for (std::int64_t step : {3, 4}) {
    const auto w = awkward_floats(kRows * kCols, static_cast<std::uint64_t>(step));
    const auto b = awkward_floats(kCols, static_cast<std::uint64_t>(step) + 50);
    for (int r : {0, 1}) {
      std::copy(w.begin() + r * kRows / 2 * kCols, w.begin() + (r + 1) * kRows / 2 * kCols, ranks[r].w.begin());
      std::copy(b.begin(), b.end(), ranks[r].b.begin());
      ranks[r].producer->publish(step);
    }
    for (auto pair : {std::pair{&device, &host}, std::pair{&device_whole, &host_whole}}) {
      modelcast::ModelView on_device, on_host;
      for (std::uint64_t v = 1; on_device.empty() || on_device.step() != step; ++v) {
        on_device = pair.first->wait_for_version(v, 60s);
        ASSERT_FALSE(on_device.empty()) << "step " << step << ": " << pair.first->stats().last_error;
      }
      for (std::uint64_t v = 1; on_host.empty() || on_host.step() != step; ++v) {
        on_host = pair.second->wait_for_version(v, 60s);
        ASSERT_FALSE(on_host.empty()) << "step " << step << ": " << pair.second->stats().last_error;
      }
      EXPECT_EQ(same(rt, on_device, on_host), "") << "step " << step;
    }
    EXPECT_EQ(device.acquire().find("w")->shape(), (std::vector<std::int64_t>{kRows, kCols / 2}));
    EXPECT_EQ(device_whole.acquire().find("w")->shape(), (std::vector<std::int64_t>{kRows, kCols}));
  }
}

}  // namespace
