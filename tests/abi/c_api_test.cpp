// The C ABI (modelcast/modelcast.h), exercised the way a C caller uses it: only the C header,
// only exported symbols of libmodelcast. Producer and consumer share one process and talk over
// tcp://127.0.0.1 (UCX_NET_DEVICES=lo comes from ctest; main() sets it when run by hand).
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "c_callers.h"
#include "eventually.h"
#include "modelcast/modelcast.h"
#include "modelcast/modelcast_scheduler.h"

namespace {

constexpr std::int64_t kWaitMs = 30000;  // generous bound for versions that must arrive

std::string last_error() { return mc_last_error(); }

// One registered tensor: its bytes live here, owned by the test.
struct HostTensor {
  std::string name;
  mc_dtype dtype;
  std::vector<std::int64_t> shape;
  std::vector<unsigned char> bytes;

  std::size_t elements() const {
    std::size_t n = 1;
    for (auto e : shape) n *= static_cast<std::size_t>(e);
    return n;
  }
};

// Every dtype, a scalar, an empty tensor and odd sizes; raw random bits (NaN payloads,
// denormals, non-0/1 bools) so that any conversion or reinterpretation shows up.
std::vector<HostTensor> make_model() {
  std::vector<HostTensor> model = {
      {"f64.matrix", MC_DTYPE_F64, {3, 5}, {}},  {"f32.cube", MC_DTYPE_F32, {2, 3, 7}, {}},
      {"f16.vec", MC_DTYPE_F16, {33}, {}},       {"bf16.vec", MC_DTYPE_BF16, {17}, {}},
      {"i64.vec", MC_DTYPE_I64, {9}, {}},        {"i32.mat", MC_DTYPE_I32, {4, 4}, {}},
      {"i16.vec", MC_DTYPE_I16, {11}, {}},       {"i8.vec", MC_DTYPE_I8, {13}, {}},
      {"u8.vec", MC_DTYPE_U8, {1000}, {}},       {"bool.mask", MC_DTYPE_BOOL, {6}, {}},
      {"scalar.f32", MC_DTYPE_F32, {}, {}},      {"empty.i32", MC_DTYPE_I32, {0, 4}, {}},
  };
  for (auto& t : model) {
    // reserve: even the empty tensor gets a non-null pointer to register.
    t.bytes.reserve(1);
    t.bytes.resize(t.elements() * mc_dtype_size(t.dtype));
  }
  return model;
}

void scramble(std::vector<HostTensor>& model, unsigned seed) {
  std::mt19937 rng(seed);
  for (auto& t : model) {
    for (auto& b : t.bytes) b = static_cast<unsigned char>(rng());
  }
}

void register_all(mc_producer_t* producer, std::vector<HostTensor>& model) {
  for (auto& t : model) {
    ASSERT_EQ(mc_producer_register_tensor(producer, t.name.c_str(), t.dtype, t.shape.size(),
                                          t.shape.empty() ? nullptr : t.shape.data(), t.bytes.data()),
              MC_OK)
        << t.name << ": " << last_error();
  }
}

// The view holds exactly `model`, bit for bit, in registration order.
void expect_view_equals(const mc_view_t* view, const std::vector<HostTensor>& model) {
  ASSERT_EQ(mc_view_tensor_count(view), model.size());
  for (std::size_t i = 0; i < model.size(); ++i) {
    const auto& t = model[i];
    mc_tensor_info by_index{};
    ASSERT_EQ(mc_view_tensor_at(view, i, &by_index), MC_OK) << last_error();
    mc_tensor_info info{};
    ASSERT_EQ(mc_view_find_tensor(view, t.name.c_str(), &info), MC_OK) << last_error();
    EXPECT_STREQ(by_index.name, t.name.c_str()) << "registration order lost at index " << i;
    EXPECT_EQ(by_index.data, info.data) << t.name;
    EXPECT_STREQ(info.name, t.name.c_str());
    EXPECT_EQ(info.dtype, t.dtype) << t.name;
    EXPECT_EQ(info.memory, MC_MEMORY_HOST) << t.name;
    ASSERT_EQ(info.ndim, t.shape.size()) << t.name;
    for (std::size_t d = 0; d < t.shape.size(); ++d) EXPECT_EQ(info.shape[d], t.shape[d]) << t.name << " dim " << d;
    ASSERT_EQ(info.size_bytes, t.bytes.size()) << t.name;
    if (!t.bytes.empty()) {
      ASSERT_NE(info.data, nullptr) << t.name;
      EXPECT_EQ(std::memcmp(info.data, t.bytes.data(), t.bytes.size()), 0) << t.name << " is not bit-exact";
    }
  }
}

struct ProducerPtr {
  mc_producer_t* p = nullptr;
  ~ProducerPtr() { mc_producer_destroy(p); }
};
struct ConsumerPtr {
  mc_consumer_t* c = nullptr;
  ~ConsumerPtr() { mc_consumer_destroy(c); }
};
struct ViewPtr {
  mc_view_t* v = nullptr;
  ~ViewPtr() { mc_view_release(v); }
};

mc_producer_t* make_producer(const char* model_name = "abi") {
  mc_producer_options o;
  mc_producer_options_init(&o);
  o.model_name = model_name;
  o.control_endpoint = "tcp://127.0.0.1:0";
  mc_producer_t* p = nullptr;
  EXPECT_EQ(mc_producer_create(&o, &p), MC_OK) << last_error();
  return p;
}

mc_consumer_t* make_consumer(const mc_producer_t* producer, const char* model_name = "abi") {
  mc_consumer_options o;
  mc_consumer_options_init(&o);
  o.producer_endpoint = mc_producer_endpoint(producer);
  o.model_name = model_name;
  o.consumer_name = "abi-test";
  mc_consumer_t* c = nullptr;
  EXPECT_EQ(mc_consumer_create(&o, &c), MC_OK) << last_error();
  return c;
}

// ---- round trips -------------------------------------------------------------------------

TEST(CApi, RoundTripIsBitExactAcrossVersions) {
  auto model = make_model();
  ProducerPtr producer{make_producer()};
  ASSERT_NE(producer.p, nullptr);
  register_all(producer.p, model);
  ASSERT_EQ(mc_producer_prepare(producer.p), MC_OK) << last_error();

  const char* endpoint = mc_producer_endpoint(producer.p);
  ASSERT_NE(endpoint, nullptr);
  EXPECT_EQ(std::string(endpoint).rfind("tcp://127.0.0.1:", 0), 0u) << endpoint;
  EXPECT_NE(std::string(endpoint), "tcp://127.0.0.1:0") << "the bound port must be read back, not the request";

  ConsumerPtr consumer{make_consumer(producer.p)};
  ASSERT_NE(consumer.c, nullptr);

  ViewPtr first;  // held across later versions: must stay unchanged
  std::vector<HostTensor> first_model;
  std::uint64_t result_bytes = 0;
  for (int round = 1; round <= 3; ++round) {
    scramble(model, 1000u + static_cast<unsigned>(round));
    std::string round_text = std::to_string(round);
    const char* keys[] = {"round", "optimizer"};
    const char* values[] = {round_text.c_str(), "adam"};
    mc_publish_result result;
    ASSERT_EQ(mc_producer_publish(producer.p, round * 7, keys, values, 2, &result), MC_OK) << last_error();
    EXPECT_EQ(result.version, static_cast<std::uint64_t>(round));
    EXPECT_EQ(result.step, round * 7);
    EXPECT_GT(result.stall_ns, 0);
    std::uint64_t total = 0;
    for (auto& t : model) total += t.bytes.size();
    EXPECT_GE(result.bytes, total);  // the snapshot's size: tensors plus alignment padding
    EXPECT_LE(result.bytes, total + 256 * model.size());
    result_bytes = result.bytes;

    ViewPtr view;
    ASSERT_EQ(mc_consumer_wait_for_version(consumer.c, result.version, kWaitMs, &view.v), MC_OK) << last_error();
    ASSERT_NE(view.v, nullptr);
    EXPECT_EQ(mc_view_version(view.v), result.version);
    EXPECT_EQ(mc_view_step(view.v), round * 7);
    SCOPED_TRACE("version " + round_text);
    expect_view_equals(view.v, model);

    ASSERT_EQ(mc_view_metadata_count(view.v), 2u);
    const char* key = nullptr;
    const char* value = nullptr;
    ASSERT_EQ(mc_view_metadata_at(view.v, 0, &key, &value), MC_OK) << last_error();
    EXPECT_STREQ(key, "optimizer");  // sorted by key
    EXPECT_STREQ(value, "adam");
    ASSERT_EQ(mc_view_metadata_at(view.v, 1, &key, &value), MC_OK) << last_error();
    EXPECT_STREQ(key, "round");
    EXPECT_STREQ(value, round_text.c_str());
    ASSERT_NE(mc_view_metadata_get(view.v, "round"), nullptr);
    EXPECT_STREQ(mc_view_metadata_get(view.v, "round"), round_text.c_str());
    EXPECT_EQ(mc_view_metadata_get(view.v, "absent"), nullptr);

    // acquire() gives the same newest version.
    ViewPtr newest;
    ASSERT_EQ(mc_consumer_acquire(consumer.c, &newest.v), MC_OK) << last_error();
    ASSERT_NE(newest.v, nullptr);
    EXPECT_EQ(mc_view_version(newest.v), result.version);

    if (round == 1) {
      std::swap(first.v, view.v);
      first_model = model;
    }
  }
  // Version 1, held all along, still reads as it was published.
  SCOPED_TRACE("version 1, held while versions 2 and 3 arrived");
  EXPECT_EQ(mc_view_version(first.v), 1u);
  expect_view_equals(first.v, first_model);

  mc_producer_stats ps;
  ASSERT_EQ(mc_producer_get_stats(producer.p, &ps), MC_OK) << last_error();
  EXPECT_EQ(ps.versions_published, 3u);
  EXPECT_EQ(ps.latest_version, 3u);
  EXPECT_GT(ps.last_stall_ns, 0);
  EXPECT_STRNE(ps.transport, "");

  mc_consumer_stats cs;
  ASSERT_EQ(mc_consumer_get_stats(consumer.c, &cs), MC_OK) << last_error();
  EXPECT_EQ(cs.current_version, 3u);
  EXPECT_EQ(cs.versions_installed, 3u);
  EXPECT_EQ(cs.versions_rejected, 0u);
  EXPECT_GT(cs.last_update_latency_ns, 0);
  EXPECT_GT(cs.last_notify_latency_ns, 0);
  EXPECT_EQ(cs.bytes_received, 3 * result_bytes);
  EXPECT_STREQ(cs.last_error, "");
}

// A frozen body and a head that changes: once each of the three slots holds a version, publish
// copies only the head's block, and the copy stats say so.
TEST(CApi, CopyStatsSayPublishCopiedOnlyTheChangedBlocks) {
  mc_producer_options o;
  mc_producer_options_init(&o);
  o.model_name = "abi";
  o.control_endpoint = "tcp://127.0.0.1:0";
  o.transfer_chunk_bytes = 64 << 10;
  ProducerPtr producer;
  ASSERT_EQ(mc_producer_create(&o, &producer.p), MC_OK) << last_error();
  std::vector<float> body(1 << 18, 0.5f), head(16, 0.0f);  // 1 MiB: 16 blocks, then the head
  const int64_t body_shape[] = {static_cast<int64_t>(body.size())}, head_shape[] = {16};
  ASSERT_EQ(mc_producer_register_tensor(producer.p, "body", MC_DTYPE_F32, 1, body_shape, body.data()), MC_OK)
      << last_error();
  ASSERT_EQ(mc_producer_register_tensor(producer.p, "head", MC_DTYPE_F32, 1, head_shape, head.data()), MC_OK)
      << last_error();
  const uint64_t model = (body.size() + head.size()) * sizeof(float);
  uint64_t copied = 0;
  for (int version = 1; version <= 6; ++version) {
    head[0] = static_cast<float>(version);
    mc_publish_result result;
    ASSERT_EQ(mc_producer_publish(producer.p, version, nullptr, nullptr, 0, &result), MC_OK) << last_error();
    ASSERT_EQ(mc_producer_get_copy_stats(producer.p, &copied), MC_OK) << last_error();
    if (version <= 3) {
      EXPECT_EQ(copied, version * model) << "version " << version << ": no slot known yet";
    }
  }
  EXPECT_GT(copied, 3 * model);
  EXPECT_LE(copied, 3 * model + 3 * (64u << 10)) << "versions 4-6 changed only the head's block";
  EXPECT_EQ(mc_producer_get_copy_stats(nullptr, &copied), MC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(mc_producer_get_copy_stats(producer.p, nullptr), MC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(mc_last_error()).find("snapshot_bytes_copied"), std::string::npos) << mc_last_error();
}

// Conversions through the C ABI: an f32 tensor served as fp8 with its scale, another as bf16
// ("*"), against codes worked out by hand (e4m3: bias 7, 3 mantissa bits).
TEST(CApi, ConvertedTensorsComeInTheirNewDtypeWithTheirScales) {
  std::vector<float> q = {896.0f, -448.0f, 2.0f, 0.0f};  // amax 896: scale 896 / 448 = 2
  std::vector<float> b = {1.0f, -2.5f};
  const std::int64_t q_shape[] = {4}, b_shape[] = {2};
  ProducerPtr producer{make_producer()};
  ASSERT_NE(producer.p, nullptr);
  ASSERT_EQ(mc_producer_register_tensor(producer.p, "q", MC_DTYPE_F32, 1, q_shape, q.data()), MC_OK) << last_error();
  ASSERT_EQ(mc_producer_register_tensor(producer.p, "b", MC_DTYPE_F32, 1, b_shape, b.data()), MC_OK) << last_error();
  ASSERT_EQ(mc_producer_prepare(producer.p), MC_OK) << last_error();
  const mc_tensor_conversion conversions[] = {{"q", MC_DTYPE_F8E4M3, 0}, {"*", MC_DTYPE_BF16, 0}};
  mc_consumer_options o;
  mc_consumer_options_init(&o);
  o.producer_endpoint = mc_producer_endpoint(producer.p);
  o.model_name = "abi";
  o.conversions = conversions;
  o.conversion_count = 2;
  ConsumerPtr consumer;
  ASSERT_EQ(mc_consumer_create(&o, &consumer.c), MC_OK) << last_error();
  mc_publish_result result;
  ASSERT_EQ(mc_producer_publish(producer.p, 1, nullptr, nullptr, 0, &result), MC_OK) << last_error();
  ViewPtr view;
  ASSERT_EQ(mc_consumer_wait_for_version(consumer.c, result.version, kWaitMs, &view.v), MC_OK) << last_error();

  mc_tensor_info info{};
  ASSERT_EQ(mc_view_tensor_at(view.v, 0, &info), MC_OK) << last_error();
  EXPECT_EQ(info.dtype, MC_DTYPE_F8E4M3);
  ASSERT_EQ(info.size_bytes, 4u);
  const unsigned char expected_codes[] = {0x7e, 0xf6, 0x38, 0x00};  // 448, -224, 1, 0 times the scale
  EXPECT_EQ(std::memcmp(info.data, expected_codes, 4), 0);
  const float* scales = nullptr;
  std::size_t count = 0, block = 7;
  ASSERT_EQ(mc_view_tensor_scales(view.v, 0, &scales, &count, &block), MC_OK) << last_error();
  ASSERT_EQ(count, 1u);
  EXPECT_EQ(scales[0], 2.0f);
  EXPECT_EQ(block, 0u);

  ASSERT_EQ(mc_view_tensor_at(view.v, 1, &info), MC_OK) << last_error();
  EXPECT_EQ(info.dtype, MC_DTYPE_BF16);
  const std::uint16_t expected_bf16[] = {0x3f80, 0xc020};
  ASSERT_EQ(info.size_bytes, 4u);
  EXPECT_EQ(std::memcmp(info.data, expected_bf16, 4), 0);
  ASSERT_EQ(mc_view_tensor_scales(view.v, 1, &scales, &count, &block), MC_OK) << last_error();
  EXPECT_EQ(scales, nullptr);
  EXPECT_EQ(count, 0u);
  EXPECT_EQ(mc_view_tensor_scales(view.v, 2, &scales, &count, &block), MC_ERR_INVALID_ARGUMENT);

  // A conversion to a dtype that is not a float is refused at creation, naming it.
  const mc_tensor_conversion bad[] = {{"q", MC_DTYPE_I32, 0}};
  o.conversions = bad;
  o.conversion_count = 1;
  ConsumerPtr refused;
  EXPECT_EQ(mc_consumer_create(&o, &refused.c), MC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("'q'"), std::string::npos) << last_error();
}

// Wants through the C ABI: a dim-1 shard of a matrix, a box of another tensor, nothing of the
// rest; each view's part and its place in the tensor, against values worked out by hand.
TEST(CApi, AConsumerKeepsTheShardsAndBoxesItWants) {
  std::vector<float> m = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};  // [3, 4]
  std::vector<float> v = {20, 21, 22, 23, 24};                     // [5]
  std::vector<float> z = {30};
  const std::int64_t m_shape[] = {3, 4}, v_shape[] = {5}, z_shape[] = {1};
  ProducerPtr producer{make_producer()};
  ASSERT_NE(producer.p, nullptr);
  ASSERT_EQ(mc_producer_register_tensor(producer.p, "m", MC_DTYPE_F32, 2, m_shape, m.data()), MC_OK) << last_error();
  ASSERT_EQ(mc_producer_register_tensor(producer.p, "v", MC_DTYPE_F32, 1, v_shape, v.data()), MC_OK) << last_error();
  ASSERT_EQ(mc_producer_register_tensor(producer.p, "z", MC_DTYPE_F32, 1, z_shape, z.data()), MC_OK) << last_error();
  ASSERT_EQ(mc_producer_prepare(producer.p), MC_OK) << last_error();
  const std::int64_t offsets[] = {1}, extents[] = {3};
  const mc_tensor_want wants[] = {{"m", MC_WANT_SHARD, 1, 1, 2, 0, 0, nullptr, nullptr},
                                  {"v", MC_WANT_BOXES, 0, 0, 1, 1, 1, offsets, extents},
                                  {"*", MC_WANT_NOTHING, 0, 0, 1, 0, 0, nullptr, nullptr}};
  mc_consumer_options o;
  mc_consumer_options_init(&o);
  o.producer_endpoint = mc_producer_endpoint(producer.p);
  o.model_name = "abi";
  o.wants = wants;
  o.want_count = 3;
  ConsumerPtr consumer;
  ASSERT_EQ(mc_consumer_create(&o, &consumer.c), MC_OK) << last_error();
  mc_publish_result result;
  ASSERT_EQ(mc_producer_publish(producer.p, 1, nullptr, nullptr, 0, &result), MC_OK) << last_error();
  ViewPtr view;
  ASSERT_EQ(mc_consumer_wait_for_version(consumer.c, result.version, kWaitMs, &view.v), MC_OK) << last_error();
  ASSERT_EQ(mc_view_tensor_count(view.v), 2u);

  mc_tensor_info info{};
  ASSERT_EQ(mc_view_tensor_at(view.v, 0, &info), MC_OK) << last_error();
  EXPECT_STREQ(info.name, "m");
  ASSERT_EQ(info.ndim, 2u);
  EXPECT_EQ(info.shape[0], 3);
  EXPECT_EQ(info.shape[1], 2);
  const float expected_m[] = {2, 3, 6, 7, 10, 11};  // columns 2 and 3
  ASSERT_EQ(info.size_bytes, sizeof expected_m);
  EXPECT_EQ(std::memcmp(info.data, expected_m, sizeof expected_m), 0);
  const std::int64_t* offset = nullptr;
  const std::int64_t* whole = nullptr;
  std::size_t ndim = 0;
  ASSERT_EQ(mc_view_tensor_box(view.v, 0, &offset, &whole, &ndim), MC_OK) << last_error();
  ASSERT_EQ(ndim, 2u);
  EXPECT_EQ(offset[0], 0);
  EXPECT_EQ(offset[1], 2);
  EXPECT_EQ(whole[0], 3);
  EXPECT_EQ(whole[1], 4);

  ASSERT_EQ(mc_view_find_tensor(view.v, "v", &info), MC_OK) << last_error();
  const float expected_v[] = {21, 22, 23};
  ASSERT_EQ(info.size_bytes, sizeof expected_v);
  EXPECT_EQ(std::memcmp(info.data, expected_v, sizeof expected_v), 0);
  EXPECT_EQ(mc_view_find_tensor(view.v, "z", &info), MC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(mc_view_tensor_box(view.v, 2, &offset, &whole, &ndim), MC_ERR_INVALID_ARGUMENT);

  // A shard past the count is refused at creation, naming the tensor.
  const mc_tensor_want bad[] = {{"m", MC_WANT_SHARD, 0, 2, 2, 0, 0, nullptr, nullptr}};
  o.wants = bad;
  o.want_count = 1;
  ConsumerPtr refused;
  EXPECT_EQ(mc_consumer_create(&o, &refused.c), MC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("'m'"), std::string::npos) << last_error();
  // Boxes of no dimensions, or of more than a tensor can have, are refused before their arrays
  // are read (box_count x ndim elements of each): they were read, and then called overlapping.
  for (std::size_t box_ndim : {std::size_t{0}, std::size_t{17}}) {
    const mc_tensor_want boxes[] = {{"v", MC_WANT_BOXES, 0, 0, 1, box_ndim, 5, offsets, extents}};
    o.wants = boxes;
    ConsumerPtr none;
    EXPECT_EQ(mc_consumer_create(&o, &none.c), MC_ERR_INVALID_ARGUMENT);
    EXPECT_NE(last_error().find("options.wants[0].ndim is " + std::to_string(box_ndim) + " for 5 box(es)"), std::string::npos)
        << last_error();
  }
}

// A model published by two ranks through the C ABI: each registers its rows of "m" as a piece;
// a consumer told rank 0's endpoint sees the whole tensor once both published the step.
TEST(CApi, TwoRanksPublishPiecesOneConsumerAssemblesThem) {
  std::vector<float> top = {0, 1, 2, 3, 4, 5}, bottom = {6, 7, 8, 9};  // rows 0-2 and 3-4 of [5, 2]
  const std::int64_t whole[] = {5, 2}, top_shape[] = {3, 2}, bottom_shape[] = {2, 2};
  const std::int64_t top_at[] = {0, 0}, bottom_at[] = {3, 0};
  mc_producer_options o;
  mc_producer_options_init(&o);
  o.model_name = "abi";
  o.control_endpoint = "tcp://127.0.0.1:0";
  o.rank = 1;
  o.rank_count = 2;
  o.run_id = "job\n1";
  ProducerPtr rank1;
  EXPECT_EQ(mc_producer_create(&o, &rank1.p), MC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("run_id 'job\\x0a1' contains a control character at byte 3"), std::string::npos)
      << last_error();
  o.run_id = "";  // an unset variable's value: read as none, the ranks would look like two runs
  EXPECT_EQ(mc_producer_create(&o, &rank1.p), MC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("options.run_id is \"\" (empty)"), std::string::npos) << last_error();
  o.run_id = "job.1";
  ASSERT_EQ(mc_producer_create(&o, &rank1.p), MC_OK) << last_error();
  const char* endpoints[] = {nullptr, mc_producer_endpoint(rank1.p)};
  o.rank = 0;
  o.rank_endpoints = endpoints;
  o.rank_endpoint_count = 2;
  ProducerPtr rank0;
  ASSERT_EQ(mc_producer_create(&o, &rank0.p), MC_OK) << last_error();
  ASSERT_EQ(mc_producer_register_piece(rank0.p, "m", MC_DTYPE_F32, 2, top_shape, whole, top_at, top.data()), MC_OK)
      << last_error();
  ASSERT_EQ(mc_producer_register_piece(rank1.p, "m", MC_DTYPE_F32, 2, bottom_shape, whole, bottom_at, bottom.data()),
            MC_OK) << last_error();
  const std::int64_t outside[] = {4, 0};  // rows 4-5 of a 5-row tensor
  EXPECT_EQ(mc_producer_register_piece(rank1.p, "x", MC_DTYPE_F32, 2, bottom_shape, whole, outside, bottom.data()),
            MC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("'x'"), std::string::npos) << last_error();
  ConsumerPtr consumer{make_consumer(rank0.p)};
  mc_publish_result result;
  ASSERT_EQ(mc_producer_publish(rank0.p, 7, nullptr, nullptr, 0, &result), MC_OK) << last_error();
  ASSERT_EQ(mc_producer_publish(rank1.p, 7, nullptr, nullptr, 0, &result), MC_OK) << last_error();
  ViewPtr view;
  ASSERT_EQ(mc_consumer_wait_for_version(consumer.c, 1, kWaitMs, &view.v), MC_OK) << last_error();
  EXPECT_EQ(mc_view_step(view.v), 7);
  mc_tensor_info info{};
  ASSERT_EQ(mc_view_find_tensor(view.v, "m", &info), MC_OK) << last_error();
  const float expected[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  ASSERT_EQ(info.size_bytes, sizeof expected);
  EXPECT_EQ(std::memcmp(info.data, expected, sizeof expected), 0);
}

TEST(CApi, GroupMembersSwitchTogetherAndSayWhereTheirGroupStands) {
  std::vector<float> w = {1.0f, 2.0f, 3.0f};
  const std::int64_t shape[] = {3};
  ProducerPtr producer{make_producer()};
  ASSERT_NE(producer.p, nullptr);
  ASSERT_EQ(mc_producer_register_tensor(producer.p, "w", MC_DTYPE_F32, 1, shape, w.data()), MC_OK) << last_error();
  ASSERT_EQ(mc_producer_prepare(producer.p), MC_OK) << last_error();
  mc_consumer_options o;
  mc_consumer_options_init(&o);
  o.producer_endpoint = mc_producer_endpoint(producer.p);
  o.model_name = "abi";
  o.group = "tp";
  o.group_size = 2;
  ConsumerPtr first;
  ASSERT_EQ(mc_consumer_create(&o, &first.c), MC_OK) << last_error();
  mc_publish_result result;
  ASSERT_EQ(mc_producer_publish(producer.p, 1, nullptr, nullptr, 0, &result), MC_OK) << last_error();
  // Alone, the first member says its group waits, and serves nothing.
  mc_group_state state{};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kWaitMs);
  while (!state.waiting && std::chrono::steady_clock::now() < deadline) {
    ASSERT_EQ(mc_consumer_get_group(first.c, &state), MC_OK) << last_error();
    std::this_thread::yield();
  }
  EXPECT_EQ(state.waiting, 1);
  ViewPtr none;
  ASSERT_EQ(mc_consumer_acquire(first.c, &none.v), MC_OK) << last_error();
  EXPECT_EQ(none.v, nullptr);
  ConsumerPtr second;
  ASSERT_EQ(mc_consumer_create(&o, &second.c), MC_OK) << last_error();
  for (auto* c : {first.c, second.c}) {
    ViewPtr view;
    ASSERT_EQ(mc_consumer_wait_for_version(c, result.version, kWaitMs, &view.v), MC_OK) << last_error();
    EXPECT_EQ(mc_view_version(view.v), result.version);
    ASSERT_EQ(mc_consumer_get_group(c, &state), MC_OK) << last_error();
    EXPECT_EQ(state.group_version, result.version);
    EXPECT_EQ(state.prepared_version, 0u);
  }
  // Not a member: zeros. A group without a size is refused at creation.
  mc_consumer_options plain;
  mc_consumer_options_init(&plain);
  plain.producer_endpoint = o.producer_endpoint;
  plain.model_name = "abi";
  ConsumerPtr outsider;
  ASSERT_EQ(mc_consumer_create(&plain, &outsider.c), MC_OK) << last_error();
  ASSERT_EQ(mc_consumer_get_group(outsider.c, &state), MC_OK) << last_error();
  EXPECT_EQ(state.group_version, 0u);
  EXPECT_EQ(mc_consumer_get_group(nullptr, &state), MC_ERR_INVALID_ARGUMENT);
  o.group_size = 0;
  ConsumerPtr refused;
  EXPECT_EQ(mc_consumer_create(&o, &refused.c), MC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("group_size"), std::string::npos) << last_error();
}

// A large transfer's progress: the version arriving and its landed prefix, seen while 16 MiB
// versions are published back to back, and nothing arriving once the last is installed.
TEST(CApi, AConsumerSaysWhichVersionIsArrivingAndHowMuchHasLanded) {
  constexpr std::size_t kBytes = 16u << 20;
  std::vector<std::uint8_t> weights(kBytes);
  const std::int64_t shape[] = {static_cast<std::int64_t>(kBytes)};
  ProducerPtr producer{make_producer()};
  ASSERT_NE(producer.p, nullptr);
  ASSERT_EQ(mc_producer_register_tensor(producer.p, "weights", MC_DTYPE_U8, 1, shape, weights.data()), MC_OK) << last_error();
  ConsumerPtr consumer{make_consumer(producer.p)};
  ASSERT_NE(consumer.c, nullptr);
  std::uint64_t version = 1, bytes = 1;
  ASSERT_EQ(mc_consumer_get_arriving(consumer.c, &version, &bytes), MC_OK) << last_error();
  EXPECT_EQ(version, 0u);  // nothing published yet
  EXPECT_EQ(bytes, 0u);
  ASSERT_EQ(mc_producer_wait_for_consumers(producer.p, 1, kWaitMs), MC_OK) << last_error();
  std::uint64_t published = 0, caught = 0, caught_bytes = 0;
  // The producer publishes from this thread, as a trainer does, and looks between publishes.
  for (int i = 0; i < 400 && caught == 0; ++i) {
    std::memset(weights.data(), i, weights.size());
    mc_publish_result result;
    ASSERT_EQ(mc_producer_publish(producer.p, i, nullptr, nullptr, 0, &result), MC_OK) << last_error();
    published = result.version;
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
    while (caught == 0 && std::chrono::steady_clock::now() < until) {
      ASSERT_EQ(mc_consumer_get_arriving(consumer.c, &version, &bytes), MC_OK) << last_error();
      if (version != 0) caught = version, caught_bytes = bytes;
    }
  }
  ASSERT_NE(caught, 0u) << "no look caught a version arriving";
  EXPECT_LE(caught, published);
  EXPECT_LE(caught_bytes, kBytes);
  ViewPtr view;
  ASSERT_EQ(mc_consumer_wait_for_version(consumer.c, published, kWaitMs, &view.v), MC_OK) << last_error();
  ASSERT_EQ(mc_consumer_get_arriving(consumer.c, &version, nullptr), MC_OK) << last_error();
  EXPECT_EQ(version, 0u) << "an installed version still counted as arriving";
  EXPECT_EQ(mc_consumer_get_arriving(nullptr, &version, &bytes), MC_ERR_INVALID_ARGUMENT);
}

TEST(CApi, PublishWithoutMetadataAndDescriptorRegistration) {
  std::vector<std::int32_t> values(10);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<std::int32_t>(i * i) - 7;
  const std::int64_t shape[] = {2, 5};

  ProducerPtr producer{make_producer()};
  ASSERT_NE(producer.p, nullptr);
  mc_tensor_desc desc;
  mc_tensor_desc_init(&desc);
  EXPECT_EQ(desc.memory, MC_MEMORY_HOST);
  desc.name = "grid";
  desc.dtype = MC_DTYPE_I32;
  desc.ndim = 2;
  desc.shape = shape;
  desc.data = values.data();
  ASSERT_EQ(mc_producer_register_tensor_desc(producer.p, &desc), MC_OK) << last_error();

  ConsumerPtr consumer{make_consumer(producer.p)};
  ASSERT_NE(consumer.c, nullptr);
  mc_publish_result result;
  ASSERT_EQ(mc_producer_publish(producer.p, -3, nullptr, nullptr, 0, &result), MC_OK) << last_error();
  ASSERT_EQ(mc_producer_publish(producer.p, 4, nullptr, nullptr, 0, nullptr), MC_OK) << last_error();

  ViewPtr view;
  ASSERT_EQ(mc_consumer_wait_for_version(consumer.c, result.version + 1, kWaitMs, &view.v), MC_OK) << last_error();
  EXPECT_EQ(mc_view_version(view.v), result.version + 1);
  EXPECT_EQ(mc_view_step(view.v), 4);
  EXPECT_EQ(mc_view_metadata_count(view.v), 0u);
  mc_tensor_info info;
  ASSERT_EQ(mc_view_find_tensor(view.v, "grid", &info), MC_OK) << last_error();
  ASSERT_EQ(info.size_bytes, values.size() * sizeof(std::int32_t));
  EXPECT_EQ(std::memcmp(info.data, values.data(), info.size_bytes), 0);

  // A view outlives the consumer and the producer that made it.
  mc_consumer_destroy(std::exchange(consumer.c, nullptr));
  mc_producer_destroy(std::exchange(producer.p, nullptr));
  mc_tensor_info again;
  ASSERT_EQ(mc_view_find_tensor(view.v, "grid", &again), MC_OK) << last_error();
  EXPECT_EQ(again.data, info.data);
  EXPECT_EQ(std::memcmp(again.data, values.data(), again.size_bytes), 0);
  EXPECT_EQ(mc_view_version(view.v), result.version + 1);
}

TEST(CApi, CallerBuffersAndExpectedLayoutAreHonoured) {
  std::vector<double> weights(64);
  for (std::size_t i = 0; i < weights.size(); ++i) weights[i] = 1.0 / static_cast<double>(i + 1);
  const std::int64_t shape[] = {8, 8};

  ProducerPtr producer{make_producer()};
  ASSERT_NE(producer.p, nullptr);
  ASSERT_EQ(mc_producer_register_tensor(producer.p, "w", MC_DTYPE_F64, 2, shape, weights.data()), MC_OK)
      << last_error();

  std::vector<unsigned char> buffer_a(1 << 16), buffer_b(1 << 16);
  void* buffers[] = {buffer_a.data(), buffer_b.data()};
  const std::size_t sizes[] = {buffer_a.size(), buffer_b.size()};
  mc_tensor_desc expected;
  mc_tensor_desc_init(&expected);
  expected.name = "w";
  expected.dtype = MC_DTYPE_F64;
  expected.ndim = 2;
  expected.shape = shape;

  mc_consumer_options o;
  mc_consumer_options_init(&o);
  o.producer_endpoint = mc_producer_endpoint(producer.p);
  o.model_name = "abi";
  o.caller_buffers = buffers;
  o.caller_buffer_sizes = sizes;
  o.caller_buffer_count = 2;
  o.expected_layout = &expected;
  o.expected_layout_count = 1;
  ConsumerPtr consumer;
  ASSERT_EQ(mc_consumer_create(&o, &consumer.c), MC_OK) << last_error();

  mc_publish_result result;
  ASSERT_EQ(mc_producer_publish(producer.p, 1, nullptr, nullptr, 0, &result), MC_OK) << last_error();
  ViewPtr view;
  ASSERT_EQ(mc_consumer_wait_for_version(consumer.c, result.version, kWaitMs, &view.v), MC_OK) << last_error();
  mc_tensor_info info;
  ASSERT_EQ(mc_view_find_tensor(view.v, "w", &info), MC_OK) << last_error();
  auto in = [&](const std::vector<unsigned char>& b) {
    auto p = static_cast<const unsigned char*>(info.data);
    return p >= b.data() && p + info.size_bytes <= b.data() + b.size();
  };
  EXPECT_TRUE(in(buffer_a) || in(buffer_b)) << "the version was not received into the caller's buffers";
  ASSERT_EQ(info.size_bytes, weights.size() * sizeof(double));
  EXPECT_EQ(std::memcmp(info.data, weights.data(), info.size_bytes), 0);
}

// An expected layout built against a header whose mc_tensor_desc is larger (a later release's):
// the elements lie struct_size apart, and the second was read sizeof(mc_tensor_desc) in, in the
// first element's tail ("expected_layout[1].struct_size is not set").
TEST(CApi, AnExpectedLayoutIsSteppedThroughByItsElementsStructSize) {
  struct LaterDesc {
    mc_tensor_desc desc;
    std::int64_t later_field[3];  // zeros: what a newer header would add
  };
  const std::int64_t shape[] = {4};
  std::vector<float> a(4, 1.0f), b(4, 2.0f);
  ProducerPtr producer{make_producer()};
  ASSERT_EQ(mc_producer_register_tensor(producer.p, "a", MC_DTYPE_F32, 1, shape, a.data()), MC_OK) << last_error();
  ASSERT_EQ(mc_producer_register_tensor(producer.p, "b", MC_DTYPE_F32, 1, shape, b.data()), MC_OK) << last_error();
  LaterDesc expected[2] = {};
  for (auto& e : expected) {
    mc_tensor_desc_init(&e.desc);
    e.desc.struct_size = sizeof(LaterDesc);
    e.desc.dtype = MC_DTYPE_F32;
    e.desc.ndim = 1;
    e.desc.shape = shape;
  }
  expected[0].desc.name = "a";
  expected[1].desc.name = "b";
  mc_consumer_options o;
  mc_consumer_options_init(&o);
  o.producer_endpoint = mc_producer_endpoint(producer.p);
  o.model_name = "abi";
  o.expected_layout = &expected[0].desc;
  o.expected_layout_count = 2;
  ConsumerPtr consumer;
  ASSERT_EQ(mc_consumer_create(&o, &consumer.c), MC_OK) << last_error();
  mc_publish_result result;
  ASSERT_EQ(mc_producer_publish(producer.p, 1, nullptr, nullptr, 0, &result), MC_OK) << last_error();
  ViewPtr view;
  ASSERT_EQ(mc_consumer_wait_for_version(consumer.c, result.version, kWaitMs, &view.v), MC_OK) << last_error();
  EXPECT_EQ(mc_view_tensor_count(view.v), 2u);
  // Elements of two sizes cannot be one array.
  expected[1].desc.struct_size = sizeof(mc_tensor_desc);
  mc_consumer_t* mixed = nullptr;
  EXPECT_EQ(mc_consumer_create(&o, &mixed), MC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("options.expected_layout[1].struct_size is " + std::to_string(sizeof(mc_tensor_desc))),
            std::string::npos)
      << last_error();
}

// A binary run with a later library than its header has a shorter struct than the library's:
// _init wrote the library's sizeof into it (past its end) and set struct_size to fields the caller
// never had. The _init macros pass the caller's size; the library writes that much and no more.
// A shorter struct here stands for this header's, against a later library's longer one.
TEST(CApi, InitWritesNoMoreThanTheStructTheCallerWasBuiltWith) {
  mc_producer_options current;
  mc_producer_options_init(&current);
  EXPECT_EQ(current.struct_size, sizeof current) << "the macro passes the caller's own size";
  constexpr std::size_t older = offsetof(mc_producer_options, device_stage_bytes);  // shorter than ours
  std::vector<unsigned char> bytes(1024, 0xAB);  // room for either struct and more
  auto* o = reinterpret_cast<mc_producer_options*>(bytes.data());
  mc_producer_options_init_sized(o, older);
  EXPECT_EQ(o->struct_size, older);
  EXPECT_EQ(o->snapshot_slots, current.snapshot_slots);
  for (std::size_t i = older; i < bytes.size(); ++i) ASSERT_EQ(bytes[i], 0xAB) << "byte " << i << " written";
  mc_producer_t* producer = nullptr;
  ASSERT_EQ(mc_producer_create(o, &producer), MC_OK) << last_error();
  mc_producer_destroy(producer);
  // A later header's larger struct: this library's defaults, zeros past them.
  std::fill(bytes.begin(), bytes.end(), 0xAB);
  mc_consumer_options_init_sized(reinterpret_cast<mc_consumer_options*>(bytes.data()), sizeof(mc_consumer_options) + 16);
  EXPECT_EQ(reinterpret_cast<mc_consumer_options*>(bytes.data())->struct_size, sizeof(mc_consumer_options) + 16);
  for (std::size_t i = sizeof(mc_consumer_options); i < sizeof(mc_consumer_options) + 16; ++i) {
    ASSERT_EQ(bytes[i], 0) << "byte " << i << " of the later fields";
  }
  EXPECT_EQ(bytes[sizeof(mc_consumer_options) + 16], 0xAB);
  // An element of an older desc array: no write into the next element.
  constexpr std::size_t desc_bytes = offsetof(mc_tensor_desc, device) + sizeof(int);
  std::vector<unsigned char> descs(2 * sizeof(mc_tensor_desc), 0xCD);
  mc_tensor_desc_init_sized(reinterpret_cast<mc_tensor_desc*>(descs.data()), std::min(desc_bytes, sizeof(mc_tensor_desc)));
  EXPECT_EQ(descs[std::min(desc_bytes, sizeof(mc_tensor_desc))], 0xCD);
  mc_scheduler_options scheduler;
  mc_scheduler_options_init(&scheduler);
  EXPECT_EQ(scheduler.struct_size, sizeof scheduler);
}

TEST(CApi, AcquireBeforeFirstVersionGivesNullAndOk) {
  std::vector<float> x(4, 1.0f);
  const std::int64_t shape[] = {4};
  ProducerPtr producer{make_producer()};
  ASSERT_NE(producer.p, nullptr);
  ASSERT_EQ(mc_producer_register_tensor(producer.p, "x", MC_DTYPE_F32, 1, shape, x.data()), MC_OK);
  ConsumerPtr consumer{make_consumer(producer.p)};
  ASSERT_NE(consumer.c, nullptr);

  mc_view_t* view = reinterpret_cast<mc_view_t*>(&x);  // garbage in: must be overwritten
  ASSERT_EQ(mc_consumer_acquire(consumer.c, &view), MC_OK) << last_error();
  EXPECT_EQ(view, nullptr);
  EXPECT_EQ(mc_view_version(view), 0u);
  EXPECT_EQ(mc_view_tensor_count(view), 0u);
}

// ---- error paths: right code, text naming the problem --------------------------------------

TEST(CApi, WaitForVersionTimesOut) {
  std::vector<float> x(4, 1.0f);
  const std::int64_t shape[] = {4};
  ProducerPtr producer{make_producer()};
  ASSERT_NE(producer.p, nullptr);
  ASSERT_EQ(mc_producer_register_tensor(producer.p, "x", MC_DTYPE_F32, 1, shape, x.data()), MC_OK);
  ConsumerPtr consumer{make_consumer(producer.p)};
  ASSERT_NE(consumer.c, nullptr);

  mc_view_t* view = reinterpret_cast<mc_view_t*>(&x);
  EXPECT_EQ(mc_consumer_wait_for_version(consumer.c, 1, 50, &view), MC_ERR_TIMEOUT);
  EXPECT_EQ(view, nullptr);
  EXPECT_NE(last_error().find("mc_consumer_wait_for_version"), std::string::npos) << last_error();
  EXPECT_NE(last_error().find("version 1 did not arrive within 50 ms"), std::string::npos) << last_error();
  // Version 0 is any version: none arrived (it said "version 0 did not arrive").
  EXPECT_EQ(mc_consumer_wait_for_version(consumer.c, 0, 50, &view), MC_ERR_TIMEOUT);
  EXPECT_NE(last_error().find("no version arrived within 50 ms"), std::string::npos) << last_error();

  // After a publish, the same wait succeeds; asking for a version beyond it times out again.
  mc_publish_result result;
  ASSERT_EQ(mc_producer_publish(producer.p, 0, nullptr, nullptr, 0, &result), MC_OK) << last_error();
  ASSERT_EQ(mc_consumer_wait_for_version(consumer.c, 1, kWaitMs, &view), MC_OK) << last_error();
  mc_view_release(view);
  EXPECT_EQ(mc_consumer_wait_for_version(consumer.c, 2, 20, &view), MC_ERR_TIMEOUT);
  EXPECT_EQ(view, nullptr);
  EXPECT_NE(last_error().find("version 2"), std::string::npos) << last_error();
  EXPECT_NE(last_error().find("current version 1"), std::string::npos) << last_error();

  EXPECT_EQ(mc_consumer_wait_for_version(consumer.c, 1, -1, &view), MC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("timeout_ms is negative"), std::string::npos) << last_error();
}

// A thread about to destroy a producer or consumer that other threads wait on ends their
// waits first: they return MC_ERR_STATE, not a timeout, and nothing else stops.
// A caller that checks only statuses learns why nothing arrives: the timeout names the
// consumer's last error (here the producer's refusal of another model's consumer).
TEST(CApi, AWaitThatTimesOutNamesTheConsumersLastError) {
  std::vector<float> x(4, 1.0f);
  const std::int64_t shape[] = {4};
  ProducerPtr producer{make_producer()};
  ASSERT_NE(producer.p, nullptr);
  ASSERT_EQ(mc_producer_register_tensor(producer.p, "x", MC_DTYPE_F32, 1, shape, x.data()), MC_OK);
  ConsumerPtr consumer{make_consumer(producer.p, "another-model")};
  ASSERT_NE(consumer.c, nullptr);
  mc_consumer_stats stats;
  ASSERT_TRUE(testing_support::eventually([&] {
    return mc_consumer_get_stats(consumer.c, &stats) == MC_OK && stats.last_error[0] != '\0';
  }, std::chrono::seconds(60)));
  mc_view_t* view = nullptr;
  EXPECT_EQ(mc_consumer_wait_for_version(consumer.c, 1, 50, &view), MC_ERR_TIMEOUT);
  EXPECT_NE(last_error().find("version 1 did not arrive within 50 ms"), std::string::npos) << last_error();
  EXPECT_NE(last_error().find("last error: "), std::string::npos) << last_error();
  EXPECT_NE(last_error().find("another-model"), std::string::npos) << last_error();
  // The producer counted the refusal (before it replied, so before the consumer's last_error).
  uint64_t refused_joins = 0, refused_peers = 99;
  ASSERT_EQ(mc_producer_get_refusal_stats(producer.p, &refused_joins, &refused_peers), MC_OK) << last_error();
  EXPECT_GE(refused_joins, 1u);
  EXPECT_EQ(refused_peers, 0u);  // no keys: no handshake to refuse
  EXPECT_EQ(mc_producer_get_refusal_stats(producer.p, nullptr, nullptr), MC_OK);
  EXPECT_EQ(mc_producer_get_refusal_stats(nullptr, &refused_joins, nullptr), MC_ERR_INVALID_ARGUMENT);
}

TEST(CApi, CancelledWaitsReturnAStateErrorAtOnce) {
  std::vector<float> x(4, 1.0f);
  const std::int64_t shape[] = {4};
  ProducerPtr producer{make_producer()};
  ASSERT_NE(producer.p, nullptr);
  ASSERT_EQ(mc_producer_register_tensor(producer.p, "x", MC_DTYPE_F32, 1, shape, x.data()), MC_OK);
  ConsumerPtr consumer{make_consumer(producer.p)};
  ASSERT_NE(consumer.c, nullptr);
  constexpr std::int64_t kHour = 3600 * 1000;
  std::string consumer_error, producer_error;
  mc_status consumer_status = MC_OK, producer_status = MC_OK;
  std::thread consumer_waiter([&] {
    mc_view_t* view = nullptr;
    consumer_status = mc_consumer_wait_for_version(consumer.c, 1, kHour, &view);
    consumer_error = mc_last_error();
  });
  std::thread producer_waiter([&] {
    producer_status = mc_producer_wait_for_consumers(producer.p, 2, kHour);
    producer_error = mc_last_error();
  });
  EXPECT_EQ(mc_consumer_cancel_waits(consumer.c), MC_OK);
  EXPECT_EQ(mc_producer_cancel_waits(producer.p), MC_OK);
  consumer_waiter.join();
  producer_waiter.join();
  EXPECT_EQ(consumer_status, MC_ERR_STATE);
  EXPECT_NE(consumer_error.find("waits on this consumer were cancelled"), std::string::npos) << consumer_error;
  EXPECT_EQ(producer_status, MC_ERR_STATE);
  EXPECT_NE(producer_error.find("waits on this producer were cancelled"), std::string::npos) << producer_error;

  // Versions still arrive; only the waits are over.
  mc_publish_result result;
  ASSERT_EQ(mc_producer_publish(producer.p, 0, nullptr, nullptr, 0, &result), MC_OK) << last_error();
  mc_consumer_stats stats{};
  ASSERT_TRUE(testing_support::eventually([&] {
    return mc_consumer_get_stats(consumer.c, &stats) == MC_OK && stats.current_version == 1;
  }));
  mc_view_t* view = nullptr;
  EXPECT_EQ(mc_consumer_wait_for_version(consumer.c, 1, kHour, &view), MC_ERR_STATE);
  EXPECT_EQ(view, nullptr);
}

TEST(CApi, DuplicateTensorNameIsRejected) {
  std::vector<float> x(4), y(4);
  const std::int64_t shape[] = {4};
  ProducerPtr producer{make_producer()};
  ASSERT_NE(producer.p, nullptr);
  ASSERT_EQ(mc_producer_register_tensor(producer.p, "dup", MC_DTYPE_F32, 1, shape, x.data()), MC_OK);
  EXPECT_EQ(mc_producer_register_tensor(producer.p, "dup", MC_DTYPE_F32, 1, shape, y.data()),
            MC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("mc_producer_register_tensor"), std::string::npos) << last_error();
  EXPECT_NE(last_error().find("duplicate tensor name 'dup'"), std::string::npos) << last_error();

  // The failed call registered nothing: one tensor is published.
  ConsumerPtr consumer{make_consumer(producer.p)};
  ASSERT_NE(consumer.c, nullptr);
  ASSERT_EQ(mc_producer_publish(producer.p, 0, nullptr, nullptr, 0, nullptr), MC_OK) << last_error();
  ViewPtr view;
  ASSERT_EQ(mc_consumer_wait_for_version(consumer.c, 1, kWaitMs, &view.v), MC_OK) << last_error();
  EXPECT_EQ(mc_view_tensor_count(view.v), 1u);
}

TEST(CApi, BadDtypeMemoryKindAndShapeAreRejected) {
  std::vector<float> x(4);
  const std::int64_t shape[] = {4};
  const std::int64_t negative[] = {-4};
  ProducerPtr producer{make_producer()};
  ASSERT_NE(producer.p, nullptr);

  EXPECT_EQ(abi_register_with_dtype(producer.p, "t", 42, 1, shape, x.data()),
            MC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("tensor 't' has an unknown dtype 42"), std::string::npos) << last_error();
  EXPECT_EQ(abi_register_with_dtype(producer.p, "t", -1, 1, shape, x.data()),
            MC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("unknown dtype -1"), std::string::npos) << last_error();

  EXPECT_EQ(mc_producer_register_tensor(producer.p, "neg", MC_DTYPE_F32, 1, negative, x.data()),
            MC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("'neg'"), std::string::npos) << last_error();
  EXPECT_NE(last_error().find("negative"), std::string::npos) << last_error();

  EXPECT_EQ(mc_producer_register_tensor(producer.p, "", MC_DTYPE_F32, 1, shape, x.data()), MC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("empty name"), std::string::npos) << last_error();

  EXPECT_EQ(abi_register_desc_with_memory(producer.p, "gpu", 7, 1, shape, x.data()), MC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("tensor 'gpu' has an unknown memory kind 7"), std::string::npos) << last_error();
  // Device memory is a known kind, but this is host memory: refused where there is a device
  // (the pointer is not device memory), and where there is none (no device to use).
  mc_status status = abi_register_desc_with_memory(producer.p, "gpu", MC_MEMORY_CUDA, 1, shape, x.data());
  EXPECT_TRUE(status == MC_ERR_INVALID_ARGUMENT || status == MC_ERR_STATE) << mc_status_name(status);
  EXPECT_NE(last_error().find("tensor 'gpu'"), std::string::npos) << last_error();
  EXPECT_NE(last_error().find(status == MC_ERR_STATE ? "needs a device" : "data pointer is in host memory"),
            std::string::npos)
      << last_error();

  mc_tensor_desc desc;
  mc_tensor_desc_init(&desc);
  desc.name = "uninitialised";
  desc.ndim = 1;
  desc.shape = shape;
  desc.data = x.data();

  desc.struct_size = 0;  // not initialised by mc_tensor_desc_init
  EXPECT_EQ(mc_producer_register_tensor_desc(producer.p, &desc), MC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("mc_tensor_desc_init"), std::string::npos) << last_error();

  // Nothing above was registered.
  EXPECT_EQ(mc_producer_publish(producer.p, 0, nullptr, nullptr, 0, nullptr), MC_ERR_STATE);
}

TEST(CApi, NullPointersAreRejectedByName) {
  std::vector<float> x(4);
  const std::int64_t shape[] = {4};
  ProducerPtr producer{make_producer()};
  ASSERT_NE(producer.p, nullptr);

  EXPECT_EQ(mc_producer_register_tensor(producer.p, "nodata", MC_DTYPE_F32, 1, shape, nullptr),
            MC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("tensor 'nodata' has a null data pointer"), std::string::npos) << last_error();

  EXPECT_EQ(mc_producer_register_tensor(producer.p, nullptr, MC_DTYPE_F32, 1, shape, x.data()),
            MC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("tensor name is NULL"), std::string::npos) << last_error();

  EXPECT_EQ(mc_producer_register_tensor(producer.p, "noshape", MC_DTYPE_F32, 2, nullptr, x.data()),
            MC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("tensor 'noshape' has ndim 2 but a NULL shape"), std::string::npos) << last_error();

  // An ndim beyond the rank limit is refused before the shape is read (ndim elements of it):
  // 2^40 was read, and reported as out of memory.
  EXPECT_EQ(mc_producer_register_tensor(producer.p, "deep", MC_DTYPE_F32, std::size_t{1} << 40, shape, x.data()),
            MC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("tensor 'deep' has ndim 1099511627776; the limit is 16"), std::string::npos) << last_error();

  EXPECT_EQ(mc_producer_register_tensor_desc(producer.p, nullptr), MC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("desc is NULL"), std::string::npos) << last_error();

  ASSERT_EQ(mc_producer_register_tensor(producer.p, "x", MC_DTYPE_F32, 1, shape, x.data()), MC_OK);
  const char* keys[] = {"k", nullptr};
  const char* values[] = {"v", "w"};
  EXPECT_EQ(mc_producer_publish(producer.p, 0, nullptr, values, 1, nullptr), MC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("keys is NULL"), std::string::npos) << last_error();
  EXPECT_EQ(mc_producer_publish(producer.p, 0, keys, values, 2, nullptr), MC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("metadata key 1 is NULL"), std::string::npos) << last_error();
  mc_producer_stats ps;
  ASSERT_EQ(mc_producer_get_stats(producer.p, &ps), MC_OK);
  EXPECT_EQ(ps.versions_published, 0u) << "a rejected publish must not publish";

  EXPECT_EQ(mc_producer_create(nullptr, nullptr), MC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("mc_producer_create: out is NULL"), std::string::npos) << last_error();

  mc_consumer_t* consumer = reinterpret_cast<mc_consumer_t*>(&x);
  EXPECT_EQ(mc_consumer_create(nullptr, &consumer), MC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(consumer, nullptr);
  EXPECT_NE(last_error().find("options is NULL"), std::string::npos) << last_error();

  mc_consumer_options co;
  mc_consumer_options_init(&co);  // producer_endpoint left NULL
  EXPECT_EQ(mc_consumer_create(&co, &consumer), MC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("options.producer_endpoint is NULL"), std::string::npos) << last_error();
  co.producer_endpoint = "";
  EXPECT_EQ(mc_consumer_create(&co, &consumer), MC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("producer_endpoint is empty"), std::string::npos) << last_error();

  // The 0.3 fields: transports and a forced path are passed through and checked.
  co.producer_endpoint = "tcp://127.0.0.1:1";
  co.path = "teleport";
  EXPECT_EQ(mc_consumer_create(&co, &consumer), MC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("'teleport'"), std::string::npos) << last_error();
  co.path = "staged";
  const char* transports[] = {"ucx", "pigeon"};
  co.transports = transports;
  co.transport_count = 2;
  EXPECT_EQ(mc_consumer_create(&co, &consumer), MC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("unknown transport 'pigeon'"), std::string::npos) << last_error();
  co.transports = nullptr;
  EXPECT_EQ(mc_consumer_create(&co, &consumer), MC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("options.transports"), std::string::npos) << last_error();
}

TEST(CApi, PublishOrPrepareWithNothingRegisteredIsAStateError) {
  ProducerPtr producer{make_producer()};
  ASSERT_NE(producer.p, nullptr);
  mc_publish_result result;
  result.version = 77;
  EXPECT_EQ(mc_producer_publish(producer.p, 1, nullptr, nullptr, 0, &result), MC_ERR_STATE);
  EXPECT_EQ(last_error().rfind("mc_producer_publish: ", 0), 0u) << last_error();
  EXPECT_NE(last_error().find("no tensors registered"), std::string::npos) << last_error();
  EXPECT_EQ(result.version, 0u) << "out must not carry a version for a failed publish";

  EXPECT_EQ(mc_producer_prepare(producer.p), MC_ERR_STATE);
  EXPECT_NE(last_error().find("mc_producer_prepare"), std::string::npos) << last_error();
  EXPECT_NE(last_error().find("no tensors registered"), std::string::npos) << last_error();
}

TEST(CApi, SnapshotTooLargeForMemoryIsAResourceError) {
  // 1 TiB, the most a consumer takes, in three slots: more than this process may map once its
  // address space is limited to 256 GiB, whatever the overcommit policy. prepare() only maps
  // the snapshot slots; the tensor's bytes are never read.
  unsigned char byte = 0;
  const std::int64_t shape[] = {std::int64_t{1} << 40};
  ProducerPtr producer{make_producer()};
  ASSERT_NE(producer.p, nullptr);
  ASSERT_EQ(mc_producer_register_tensor(producer.p, "huge", MC_DTYPE_U8, 1, shape, &byte), MC_OK) << last_error();
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_AS, &saved), 0);
  rlimit limited = saved;
  limited.rlim_cur = std::min<rlim_t>(saved.rlim_max, rlim_t{256} << 30);
  ASSERT_EQ(setrlimit(RLIMIT_AS, &limited), 0);
  const auto rc = mc_producer_prepare(producer.p);
  setrlimit(RLIMIT_AS, &saved);
  EXPECT_EQ(rc, MC_ERR_RESOURCE);
  EXPECT_NE(last_error().find("mc_producer_prepare: cannot map"), std::string::npos) << last_error();
}

TEST(CApi, AModelPastWhatConsumersTakeIsRefusedNamingTheLimit) {
  unsigned char byte = 0;
  const std::int64_t shape[] = {std::int64_t{1} << 50};
  ProducerPtr producer{make_producer()};
  ASSERT_NE(producer.p, nullptr);
  EXPECT_EQ(mc_producer_register_tensor(producer.p, "huge", MC_DTYPE_U8, 1, shape, &byte), MC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("tensor 'huge' takes the snapshot to"), std::string::npos) << last_error();
  EXPECT_NE(last_error().find("consumers take at most 1099511627776"), std::string::npos) << last_error();
  EXPECT_EQ(mc_producer_prepare(producer.p), MC_ERR_STATE) << "the refused tensor stayed registered";
}

TEST(CApi, RegisterAfterPublishIsAStateError) {
  std::vector<float> x(4);
  const std::int64_t shape[] = {4};
  ProducerPtr producer{make_producer()};
  ASSERT_NE(producer.p, nullptr);
  ASSERT_EQ(mc_producer_register_tensor(producer.p, "x", MC_DTYPE_F32, 1, shape, x.data()), MC_OK);
  ASSERT_EQ(mc_producer_publish(producer.p, 0, nullptr, nullptr, 0, nullptr), MC_OK) << last_error();
  EXPECT_EQ(mc_producer_register_tensor(producer.p, "late", MC_DTYPE_F32, 1, shape, x.data()), MC_ERR_STATE);
  EXPECT_NE(last_error().find("cannot register tensor 'late' after prepare() or the first publish"), std::string::npos)
      << last_error();
}

TEST(CApi, BadOptionsAndEndpointsAreRejected) {
  mc_producer_t* producer = nullptr;
  mc_producer_options o;
  mc_producer_options_init(&o);
  EXPECT_STREQ(o.model_name, "model");
  EXPECT_STREQ(o.control_endpoint, "tcp://127.0.0.1:0");
  EXPECT_EQ(o.snapshot_slots, 3u);
  EXPECT_EQ(o.integrity, 1);
  EXPECT_EQ(o.first_version, 1u);

  o.struct_size = 0;
  EXPECT_EQ(mc_producer_create(&o, &producer), MC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("mc_producer_options_init"), std::string::npos) << last_error();

  mc_producer_options_init(&o);
  o.model_name = "";
  EXPECT_EQ(mc_producer_create(&o, &producer), MC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("model_name is empty"), std::string::npos) << last_error();
  EXPECT_EQ(producer, nullptr);

  mc_producer_options_init(&o);
  o.first_version = 0;
  EXPECT_EQ(mc_producer_create(&o, &producer), MC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("first_version"), std::string::npos) << last_error();

  // The 0.4 field is passed through and checked; a caller built against 0.3 (a shorter struct)
  // gets its default whatever lies past its struct.
  mc_producer_options_init(&o);
  EXPECT_EQ(o.device_stage_bytes, std::size_t{8} << 20);
  o.device_stage_bytes = 4096;
  EXPECT_EQ(mc_producer_create(&o, &producer), MC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("device_stage_bytes must be between 65536 and 1073741824, got 4096"), std::string::npos)
      << last_error();
  o.struct_size = offsetof(mc_producer_options, device_stage_bytes);
  ASSERT_EQ(mc_producer_create(&o, &producer), MC_OK) << last_error();
  mc_producer_destroy(producer);
  producer = nullptr;

  // The 0.5 fields: relays off by default at the producer, consumers willing to serve.
  mc_producer_options_init(&o);
  EXPECT_EQ(o.relay_fanout, 0u);
  mc_consumer_options consumer_options;
  mc_consumer_options_init(&consumer_options);
  EXPECT_EQ(consumer_options.serve_peers, 1);
  o.relay_fanout = 2;
  ASSERT_EQ(mc_producer_create(&o, &producer), MC_OK) << last_error();
  mc_producer_destroy(producer);
  producer = nullptr;

  mc_producer_options_init(&o);
  o.control_endpoint = "bogus://nowhere";
  EXPECT_EQ(mc_producer_create(&o, &producer), MC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("'bogus://nowhere' must start with tcp:// or ipc://"), std::string::npos)
      << last_error();
  EXPECT_EQ(producer, nullptr);

  // The port of a live producer is taken.
  ProducerPtr first{make_producer()};
  ASSERT_NE(first.p, nullptr);
  mc_producer_options_init(&o);
  o.control_endpoint = mc_producer_endpoint(first.p);
  EXPECT_EQ(mc_producer_create(&o, &producer), MC_ERR_TRANSPORT);
  EXPECT_NE(last_error().find(mc_producer_endpoint(first.p)), std::string::npos) << last_error();

  mc_consumer_options co;
  mc_consumer_options_init(&co);
  EXPECT_EQ(co.buffers, 3u);
  co.producer_endpoint = mc_producer_endpoint(first.p);
  co.buffers = 1;
  mc_consumer_t* consumer = nullptr;
  EXPECT_EQ(mc_consumer_create(&co, &consumer), MC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("buffers must be between 2 and 1024, got 1"), std::string::npos) << last_error();
  EXPECT_EQ(consumer, nullptr);

  mc_consumer_options_init(&co);
  co.producer_endpoint = mc_producer_endpoint(first.p);
  mc_tensor_desc bad;
  mc_tensor_desc_init(&bad);
  bad.name = "w";
  abi_set_desc_dtype(&bad, 11);
  co.expected_layout = &bad;
  co.expected_layout_count = 1;
  EXPECT_EQ(mc_consumer_create(&co, &consumer), MC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("tensor 'w' has an unknown dtype 11"), std::string::npos) << last_error();
}

TEST(CApi, ViewLookupsOutOfRangeAreRejected) {
  std::vector<float> x(4, 2.0f);
  const std::int64_t shape[] = {4};
  ProducerPtr producer{make_producer()};
  ASSERT_NE(producer.p, nullptr);
  ASSERT_EQ(mc_producer_register_tensor(producer.p, "x", MC_DTYPE_F32, 1, shape, x.data()), MC_OK);
  ConsumerPtr consumer{make_consumer(producer.p)};
  ASSERT_NE(consumer.c, nullptr);
  ASSERT_EQ(mc_producer_publish(producer.p, 0, nullptr, nullptr, 0, nullptr), MC_OK) << last_error();
  ViewPtr view;
  ASSERT_EQ(mc_consumer_wait_for_version(consumer.c, 1, kWaitMs, &view.v), MC_OK) << last_error();

  mc_tensor_info info;
  EXPECT_EQ(mc_view_find_tensor(view.v, "nope", &info), MC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("version 1 has no tensor 'nope'"), std::string::npos) << last_error();
  EXPECT_EQ(mc_view_tensor_at(view.v, 1, &info), MC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("tensor index 1 is out of range"), std::string::npos) << last_error();
  const char* key = "stale";
  const char* value = "stale";
  EXPECT_EQ(mc_view_metadata_at(view.v, 0, &key, &value), MC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(key, nullptr);
  EXPECT_EQ(value, nullptr);
  EXPECT_NE(last_error().find("metadata index 0 is out of range"), std::string::npos) << last_error();
  EXPECT_EQ(mc_view_find_tensor(view.v, nullptr, &info), MC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("name is NULL"), std::string::npos) << last_error();
  EXPECT_EQ(mc_view_tensor_at(view.v, 0, nullptr), MC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("out is NULL"), std::string::npos) << last_error();
}

// Every entry point survives NULL handles: an error code and a text, or a documented neutral value.
TEST(CApi, NullHandlesDoNotCrash) {
  mc_view_t* view = nullptr;
  mc_tensor_info info{};
  mc_producer_stats ps{};
  mc_consumer_stats cs{};
  const float data[1] = {0.0f};
  const char* key = nullptr;
  const char* value = nullptr;

  struct Case {
    const char* function;
    mc_status status;
  };
  const Case cases[] = {
      {"mc_producer_register_tensor",
       mc_producer_register_tensor(nullptr, "x", MC_DTYPE_F32, 0, nullptr, data)},
      {"mc_producer_register_tensor_desc", mc_producer_register_tensor_desc(nullptr, nullptr)},
      {"mc_producer_prepare", mc_producer_prepare(nullptr)},
      {"mc_producer_publish", mc_producer_publish(nullptr, 0, nullptr, nullptr, 0, nullptr)},
      {"mc_producer_wait_for_consumers", mc_producer_wait_for_consumers(nullptr, 1, 0)},
      {"mc_producer_get_stats", mc_producer_get_stats(nullptr, &ps)},
      {"mc_producer_cancel_waits", mc_producer_cancel_waits(nullptr)},
      {"mc_consumer_acquire", mc_consumer_acquire(nullptr, &view)},
      {"mc_consumer_wait_for_version", mc_consumer_wait_for_version(nullptr, 1, 0, &view)},
      {"mc_consumer_get_stats", mc_consumer_get_stats(nullptr, &cs)},
      {"mc_consumer_cancel_waits", mc_consumer_cancel_waits(nullptr)},
      {"mc_view_find_tensor", mc_view_find_tensor(nullptr, "x", &info)},
      {"mc_view_tensor_at", mc_view_tensor_at(nullptr, 0, &info)},
      {"mc_view_metadata_at", mc_view_metadata_at(nullptr, 0, &key, &value)},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(c.status, MC_ERR_INVALID_ARGUMENT) << c.function;
  }
  // Each call left its own text; check the last one and one made now.
  EXPECT_NE(last_error().find("mc_view_metadata_at: view is NULL"), std::string::npos) << last_error();
  EXPECT_EQ(mc_producer_prepare(nullptr), MC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "mc_producer_prepare: producer is NULL");
  EXPECT_EQ(mc_consumer_acquire(nullptr, &view), MC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "mc_consumer_acquire: consumer is NULL");
  EXPECT_EQ(view, nullptr);

  EXPECT_EQ(mc_producer_endpoint(nullptr), nullptr);
  EXPECT_EQ(last_error(), "mc_producer_endpoint: producer is NULL");
  EXPECT_EQ(mc_view_metadata_get(nullptr, "k"), nullptr);
  EXPECT_EQ(last_error(), "mc_view_metadata_get: view is NULL");
  EXPECT_EQ(mc_view_version(nullptr), 0u);
  EXPECT_EQ(mc_view_step(nullptr), 0);
  EXPECT_EQ(mc_view_tensor_count(nullptr), 0u);
  EXPECT_EQ(mc_view_metadata_count(nullptr), 0u);
  mc_producer_destroy(nullptr);
  mc_consumer_destroy(nullptr);
  mc_view_release(nullptr);
  // A NULL pointer: the macros pass it on (a literal NULL has no struct to size: the functions).
  mc_producer_options* no_options = nullptr;
  mc_producer_options_init(no_options);
  mc_consumer_options* no_consumer_options = nullptr;
  mc_consumer_options_init(no_consumer_options);
  mc_tensor_desc* no_desc = nullptr;
  mc_tensor_desc_init(no_desc);
  (mc_producer_options_init)(nullptr);
  (mc_consumer_options_init)(nullptr);
  (mc_tensor_desc_init)(nullptr);
}

TEST(CApi, LastErrorIsPerThread) {
  ASSERT_EQ(mc_producer_prepare(nullptr), MC_ERR_INVALID_ARGUMENT);
  const std::string mine = last_error();
  std::string theirs;
  std::thread other([&] {
    theirs = last_error();  // nothing failed on this thread yet
    EXPECT_EQ(mc_consumer_acquire(nullptr, nullptr), MC_ERR_INVALID_ARGUMENT);
    theirs += "|" + last_error();
  });
  other.join();
  EXPECT_EQ(theirs, "|mc_consumer_acquire: consumer is NULL");
  EXPECT_EQ(last_error(), mine);
}

// What a binding records itself (the Fortran module's argument checks) is this thread's only:
// the module once kept it in one variable, which two failing threads freed twice.
TEST(CApi, ABindingsOwnErrorIsPerThreadToo) {
  EXPECT_EQ(mc_set_last_error(MC_ERR_STATE, "binding: mine"), MC_ERR_STATE);
  std::string theirs;
  std::thread other([&] {
    EXPECT_EQ(mc_set_last_error(MC_ERR_INVALID_ARGUMENT, "binding: theirs"), MC_ERR_INVALID_ARGUMENT);
    theirs = last_error();
    mc_set_last_error(MC_ERR_INVALID_ARGUMENT, nullptr);
    theirs += "|" + last_error();
  });
  other.join();
  EXPECT_EQ(theirs, "binding: theirs|");
  EXPECT_EQ(last_error(), "binding: mine");
}

TEST(CApi, HelpersMirrorTheCppEnums) {
  EXPECT_STREQ(mc_dtype_name(MC_DTYPE_F64), "f64");
  EXPECT_STREQ(mc_dtype_name(MC_DTYPE_BF16), "bf16");
  EXPECT_STREQ(mc_dtype_name(MC_DTYPE_BOOL), "bool");
  EXPECT_STREQ(mc_dtype_name(MC_DTYPE_F8E4M3), "f8e4m3");
  EXPECT_EQ(abi_dtype_name(11), nullptr);
  EXPECT_EQ(abi_dtype_name(-7), nullptr);
  const std::size_t sizes[] = {8, 4, 2, 2, 8, 4, 2, 1, 1, 1, 1};
  for (int d = MC_DTYPE_F64; d <= MC_DTYPE_F8E4M3; ++d) {
    EXPECT_EQ(mc_dtype_size(static_cast<mc_dtype>(d)), sizes[d]) << mc_dtype_name(static_cast<mc_dtype>(d));
  }
  EXPECT_EQ(abi_dtype_size(-1), 0u);
  EXPECT_EQ(abi_dtype_size(11), 0u);
  EXPECT_STREQ(mc_status_name(MC_OK), "ok");
  EXPECT_STREQ(mc_status_name(MC_ERR_TIMEOUT), "timeout");
  EXPECT_STREQ(mc_status_name(MC_ERR_UNKNOWN), "unknown");
  EXPECT_STREQ(abi_status_name(1234), "?");
  EXPECT_STREQ(abi_status_name(-1), "?");
}

TEST(CApi, WaitForConsumersReportsJoinAndTimeout) {
  std::vector<float> x(4);
  const std::int64_t shape[] = {4};
  ProducerPtr producer{make_producer()};
  ASSERT_NE(producer.p, nullptr);
  ASSERT_EQ(mc_producer_register_tensor(producer.p, "x", MC_DTYPE_F32, 1, shape, x.data()), MC_OK);
  EXPECT_EQ(mc_producer_wait_for_consumers(producer.p, 1, 20), MC_ERR_TIMEOUT);
  EXPECT_NE(last_error().find("1 consumer(s) did not join within 20 ms"), std::string::npos) << last_error();
  ConsumerPtr consumer{make_consumer(producer.p)};
  ASSERT_NE(consumer.c, nullptr);
  EXPECT_EQ(mc_producer_wait_for_consumers(producer.p, 1, kWaitMs), MC_OK) << last_error();
  mc_producer_stats ps;
  ASSERT_EQ(mc_producer_get_stats(producer.p, &ps), MC_OK);
  EXPECT_EQ(ps.consumers, 1u);
}

// Keys through the C ABI: key files written by mc_write_key_pair, a producer admitting one
// consumer key, a consumer pinning the producer; a consumer pinning another key is refused.
// A public key read from its .pub file, as C and Fortran pin a producer or admit a consumer.
TEST(CApi, APublicKeyIsLoadedFromItsPubFile) {
  char dir_template[] = "/tmp/mc-pubkey-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  char written[41] = {}, loaded[41] = {};
  ASSERT_EQ(mc_write_key_pair((dir + "/k.key").c_str(), 0, written), MC_OK) << last_error();
  ASSERT_EQ(mc_load_public_key((dir + "/k.key.pub").c_str(), loaded), MC_OK) << last_error();
  EXPECT_STREQ(loaded, written);
  EXPECT_EQ(mc_load_public_key((dir + "/missing.pub").c_str(), loaded), MC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("missing.pub"), std::string::npos) << last_error();
  EXPECT_EQ(mc_load_public_key(nullptr, loaded), MC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(mc_load_public_key((dir + "/k.key.pub").c_str(), nullptr), MC_ERR_INVALID_ARGUMENT);
  for (const char* name : {"k.key", "k.key.pub"}) std::remove((dir + "/" + name).c_str());
  rmdir(dir.c_str());
}

TEST(CApi, KeyedProducerAndPinningConsumerExchangeSignedVersions) {
  char dir_template[] = "/tmp/modelcast-abi-keys-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  std::string dir = dir_template;
  char producer_key[41] = {}, consumer_key[41] = {}, other_key[41] = {};
  ASSERT_EQ(mc_write_key_pair((dir + "/producer.key").c_str(), 0, producer_key), MC_OK) << last_error();
  ASSERT_EQ(mc_write_key_pair((dir + "/consumer.key").c_str(), 0, consumer_key), MC_OK) << last_error();
  ASSERT_EQ(mc_write_key_pair((dir + "/other.key").c_str(), 0, other_key), MC_OK) << last_error();
  EXPECT_EQ(mc_write_key_pair((dir + "/other.key").c_str(), 0, nullptr), MC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(std::strlen(producer_key), 40u);

  mc_producer_options po;
  mc_producer_options_init(&po);
  po.model_name = "abi";
  std::string producer_key_file = dir + "/producer.key";
  po.key_file = producer_key_file.c_str();
  const char* allowed[] = {consumer_key};
  po.allowed_consumer_keys = allowed;
  po.allowed_consumer_key_count = 1;
  ProducerPtr producer;
  ASSERT_EQ(mc_producer_create(&po, &producer.p), MC_OK) << last_error();
  std::vector<float> x(64, 1.5f);
  const std::int64_t shape[] = {64};
  ASSERT_EQ(mc_producer_register_tensor(producer.p, "x", MC_DTYPE_F32, 1, shape, x.data()), MC_OK);

  mc_consumer_options co;
  mc_consumer_options_init(&co);
  co.producer_endpoint = mc_producer_endpoint(producer.p);
  co.model_name = "abi";
  co.producer_public_key = producer_key;
  std::string consumer_key_file = dir + "/consumer.key";
  co.key_file = consumer_key_file.c_str();
  ConsumerPtr consumer;
  ASSERT_EQ(mc_consumer_create(&co, &consumer.c), MC_OK) << last_error();
  co.producer_public_key = other_key;  // pins a key this producer does not hold
  ConsumerPtr misled;
  ASSERT_EQ(mc_consumer_create(&co, &misled.c), MC_OK) << last_error();

  ASSERT_EQ(mc_producer_wait_for_consumers(producer.p, 1, kWaitMs), MC_OK) << last_error();
  mc_publish_result result{};
  ASSERT_EQ(mc_producer_publish(producer.p, 7, nullptr, nullptr, 0, &result), MC_OK) << last_error();
  ViewPtr view;
  ASSERT_EQ(mc_consumer_wait_for_version(consumer.c, result.version, kWaitMs, &view.v), MC_OK) << last_error();
  mc_tensor_info info{};
  ASSERT_EQ(mc_view_find_tensor(view.v, "x", &info), MC_OK);
  EXPECT_EQ(std::memcmp(info.data, x.data(), x.size() * sizeof(float)), 0);
  ViewPtr none;
  EXPECT_EQ(mc_consumer_acquire(misled.c, &none.v), MC_OK);
  EXPECT_EQ(none.v, nullptr);
  mc_producer_stats ps;
  ASSERT_EQ(mc_producer_get_stats(producer.p, &ps), MC_OK);
  EXPECT_EQ(ps.consumers, 1u);
  EXPECT_STREQ(mc_status_name(MC_ERR_AUTHENTICATION), "authentication");

  // A key file that is not one is an invalid argument naming the file.
  std::string public_only = dir + "/other.key.pub";
  po.key_file = public_only.c_str();
  mc_producer_t* bad = nullptr;
  EXPECT_EQ(mc_producer_create(&po, &bad), MC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("other.key.pub"), std::string::npos) << last_error();
  // "" (an unset variable's value) read as no key: a plaintext producer, a consumer pinning none.
  po.key_file = "";
  EXPECT_EQ(mc_producer_create(&po, &bad), MC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("options.key_file is \"\" (empty): leave it NULL for none"), std::string::npos) << last_error();
  // Nor is "" no checkpoints: a producer that persisted nothing, without a word.
  po.key_file = nullptr;
  po.persist_directory = "";
  EXPECT_EQ(mc_producer_create(&po, &bad), MC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("options.persist_directory is \"\" (empty): leave it NULL for none"), std::string::npos)
      << last_error();
  co.producer_public_key = "";
  mc_consumer_t* unpinned = nullptr;
  EXPECT_EQ(mc_consumer_create(&co, &unpinned), MC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("options.producer_public_key is \"\""), std::string::npos) << last_error();
  co.producer_public_key = producer_key;
  co.key_file = "";
  EXPECT_EQ(mc_consumer_create(&co, &unpinned), MC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("options.key_file is \"\""), std::string::npos) << last_error();
  for (const char* name : {"producer.key", "consumer.key", "other.key"}) {
    std::remove((dir + "/" + name).c_str());
    std::remove((dir + "/" + name + ".pub").c_str());
  }
  rmdir(dir.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  setenv("UCX_NET_DEVICES", "lo", 0);  // ctest sets it; keep UCX on loopback when run by hand too
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
