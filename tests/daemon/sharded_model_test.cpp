// modelcastd serving one tensor-parallel rank of a model that two producer ranks publish: the
// daemon's [model.wants] and [model.convert] make it keep the second half along dim 1 in bf16, and
// a client sees just that, with each part's place in the whole tensor, every element checked.
#include <algorithm>
#include <cstring>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "daemon_fixture.h"
#include "eventually.h"
#include "modelcast/producer.h"
#include "modelcast/sidecar_c.h"

namespace daemon_test {
namespace {

constexpr std::int64_t kRows = 64, kCols = 32;

// Element (i, j) of "w" at `step`: an integer below 2^8, so that bf16 holds it exactly.
float w_at(std::int64_t step, std::int64_t i, std::int64_t j) { return static_cast<float>((step * 7 + i * 3 + j) % 251); }
float b_at(std::int64_t step, std::int64_t j) { return static_cast<float>(step * 1000 + j); }

// Rank r of 2 holds rows [32 r, 32 r + 32) of "w" and all of "b" (replicated).
struct Rank {
  std::vector<float> w = std::vector<float>(kRows / 2 * kCols), b = std::vector<float>(kCols);
  std::int64_t first_row;
  std::unique_ptr<modelcast::Producer> producer;
  Rank(std::uint32_t r, std::vector<std::string> endpoints) : first_row(r * kRows / 2) {
    modelcast::ProducerOptions options;
    options.model_name = "test";
    options.control_endpoint = "tcp://127.0.0.1:0";
    options.rank = r;
    options.rank_count = 2;
    options.rank_endpoints = std::move(endpoints);
    producer = std::make_unique<modelcast::Producer>(options);
    modelcast::TensorRef w_ref{{"w", modelcast::DType::kF32, {kRows / 2, kCols}}, w.data()};
    w_ref.global_shape = {kRows, kCols};
    w_ref.global_offset = {first_row, 0};
    producer->register_tensor(w_ref);
    producer->register_tensor({{"b", modelcast::DType::kF32, {kCols}}, b.data()});
    producer->prepare();
  }
  void publish(std::int64_t step) {
    for (std::int64_t i = 0; i < kRows / 2; ++i) {
      for (std::int64_t j = 0; j < kCols; ++j) w[i * kCols + j] = w_at(step, first_row + i, j);
    }
    for (std::int64_t j = 0; j < kCols; ++j) b[j] = b_at(step, j);
    producer->publish(step);
  }
};

std::uint16_t bf16_of(float f) {
  std::uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return static_cast<std::uint16_t>(bits >> 16);  // exact for these values: no rounding
}

// Empty if `view` is step `step`'s second dim-1 half of "w" in bf16 and all of "b" in f32.
std::string check(const modelcast::sidecar::View& view, std::int64_t step) {
  if (view.step() != step) return "step " + std::to_string(view.step());
  auto w = view.find("w");
  auto b = view.find("b");
  if (!w || !b) return "a tensor is missing";
  if (w->dtype() != modelcast::DType::kBF16) return "w is not bf16";
  if (w->shape() != std::vector<std::int64_t>{kRows, kCols / 2}) return "w has another shape";
  if (!w->is_part() || std::vector<std::int64_t>(w->box_offset.begin(), w->box_offset.end()) !=
                           std::vector<std::int64_t>{0, kCols / 2} ||
      std::vector<std::int64_t>(w->whole_shape.begin(), w->whole_shape.end()) != std::vector<std::int64_t>{kRows, kCols}) {
    return "w's place in the whole tensor is wrong";
  }
  auto codes = w->as<std::uint16_t>();
  for (std::int64_t i = 0; i < kRows; ++i) {
    for (std::int64_t j = 0; j < kCols / 2; ++j) {
      if (codes[i * (kCols / 2) + j] != bf16_of(w_at(step, i, kCols / 2 + j))) {
        return "w[" + std::to_string(i) + ", " + std::to_string(kCols / 2 + j) + "] differs";
      }
    }
  }
  if (b->dtype() != modelcast::DType::kF32 || b->is_part() || b->shape() != std::vector<std::int64_t>{kCols}) {
    return "b is not the whole f32 tensor";
  }
  for (std::int64_t j = 0; j < kCols; ++j) {
    if (b->as<float>()[j] != b_at(step, j)) return "b[" + std::to_string(j) + "] differs";
  }
  return {};
}

TEST_F(DaemonTest, ARankOfATensorParallelServerGetsItsHalfOfATwoRankModelInBf16) {
  Rank rank1(1, {});
  Rank rank0(0, {"", rank1.producer->control_endpoint()});
  auto daemon = start_daemon(config(rank0.producer->control_endpoint(), 4,
                                    "persist = false\n"
                                    "[model.wants]\n\"*\" = { dim = 1, index = 1, count = 2 }\n"
                                    "[model.convert]\n\"w\" = \"bf16\"\n"));
  ASSERT_TRUE(rank0.producer->wait_for_consumers(1, 30s));
  ASSERT_TRUE(rank1.producer->wait_for_consumers(1, 30s));
  auto c = client();
  for (std::int64_t step : {5, 6}) {
    rank0.publish(step);
    rank1.publish(step);
    modelcast::sidecar::View view;
    for (std::uint64_t v = 1; !view || view.step() != step; ++v) {
      view = c.wait_for_version(v, 30s);
      ASSERT_TRUE(view) << "step " << step << " never served";
    }
    EXPECT_EQ(check(view, step), "") << "step " << step;
  }
  // The C ABI says the same of the part's place.
  mcs_client_t* handle = nullptr;
  ASSERT_EQ(mcs_client_open(socket().c_str(), "test", 30000, &handle), MC_OK) << mcs_last_error();
  mcs_view_t* view = nullptr;
  ASSERT_EQ(mcs_acquire(handle, &view), MC_OK);
  ASSERT_NE(view, nullptr);
  const int64_t *offset = nullptr, *whole = nullptr;
  std::size_t ndim = 0;
  for (std::size_t i = 0; i < mcs_view_tensor_count(view); ++i) {
    mc_tensor_info info{};
    ASSERT_EQ(mcs_view_tensor_at(view, i, &info), MC_OK);
    ASSERT_EQ(mcs_view_tensor_box(view, i, &offset, &whole, &ndim), MC_OK);
    if (std::string(info.name) == "w") {
      ASSERT_EQ(ndim, 2u);
      EXPECT_EQ(offset[1], kCols / 2);
      EXPECT_EQ(whole[0], kRows);
    } else {
      EXPECT_EQ(ndim, 0u);  // "b" is whole
      EXPECT_EQ(offset, nullptr);
    }
  }
  // A failed call leaves no stale answer behind (as mc_view_tensor_box and _scales).
  const int64_t stale[2] = {7, 7};
  offset = whole = stale;
  ndim = 2;
  EXPECT_EQ(mcs_view_tensor_box(view, mcs_view_tensor_count(view), &offset, &whole, &ndim), MC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(offset, nullptr);
  EXPECT_EQ(whole, nullptr);
  EXPECT_EQ(ndim, 0u);
  const float stale_scale = 1.0f;
  const float* scales = &stale_scale;
  std::size_t count = 1, block = 1;
  EXPECT_EQ(mcs_view_tensor_scales(view, mcs_view_tensor_count(view), &scales, &count, &block), MC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(scales, nullptr);
  EXPECT_EQ(count, 0u);
  EXPECT_EQ(block, 0u);
  mcs_view_release(view);
  mcs_client_close(handle);
}

// /v1/models' waiting_for_buffer of model "test" (0 when null or unreadable).
std::int64_t waiting_for_buffer(httplib::Client& http) {
  auto answer = http.Get("/v1/models");
  if (!answer || answer->status != 200) return 0;
  const auto doc = nlohmann::json::parse(answer->body, nullptr, false);
  if (doc.is_discarded() || !doc.contains("models") || doc["models"].empty()) return 0;
  const auto& waiting = doc["models"][0]["waiting_for_buffer"];
  return waiting.is_number() ? waiting.get<std::int64_t>() : 0;
}

// Shaped versions are copied into buffers of the daemon's, as many as `buffers`: clients holding
// all of them hold updates back (the daemon says so), what they hold stays as it was, and the
// version that waited is served once they let go.
TEST_F(DaemonTest, ClientsHoldingEveryCopyBufferHoldShapedUpdatesBackAndLoseNothing) {
  Rank rank1(1, {});
  Rank rank0(0, {"", rank1.producer->control_endpoint()});
  auto daemon = start_daemon(config(rank0.producer->control_endpoint(), 3,
                                    "persist = false\n"
                                    "[model.wants]\n\"*\" = { dim = 1, index = 1, count = 2 }\n"
                                    "[model.convert]\n\"w\" = \"bf16\"\n",
                                    kHttp));
  const int port = ops_port(startup_lines);
  ASSERT_GT(port, 0);
  ASSERT_TRUE(rank0.producer->wait_for_consumers(1, 30s));
  ASSERT_TRUE(rank1.producer->wait_for_consumers(1, 30s));
  auto c = client();
  auto publish_and_wait = [&](std::int64_t step) {
    rank0.publish(step);
    rank1.publish(step);
    modelcast::sidecar::View view;
    for (std::uint64_t v = 1; !view || view.step() != step; ++v) {
      view = c.wait_for_version(v, 30s);
      if (!view) break;
    }
    return view;
  };
  std::vector<modelcast::sidecar::View> held;
  for (std::int64_t step : {1, 2, 3}) {
    held.push_back(publish_and_wait(step));
    ASSERT_TRUE(held.back()) << "step " << step;
  }
  rank0.publish(4);
  rank1.publish(4);
  EXPECT_NE(wait_for_text(*daemon, "is held by a client"), "") << "the daemon never said why step 4 waits";
  EXPECT_EQ(c.acquire().step(), 3);
  for (std::size_t i = 0; i < held.size(); ++i) EXPECT_EQ(check(held[i], static_cast<std::int64_t>(i) + 1), "");
  // Versions arriving while every buffer is still held: the wait was said again for each (one
  // line per version, which the log's repeat limit let through as each text was new).
  // Each waits at the daemon's copy before the next is sent, and the holds are let go only once
  // the last waits there: a version that came after a release took a buffer freed for it, and
  // one arriving after that began a wait of its own, rightly said.
  httplib::Client http("127.0.0.1", port);
  for (std::int64_t step : {5, 6}) {
    rank0.publish(step);
    rank1.publish(step);
    ASSERT_TRUE(testing_support::eventually([&] { return waiting_for_buffer(http) == step; }, 30s))
        << "step " << step << " never waited at the daemon (version and step agree here: both ranks publish each)";
  }
  held.clear();
  // The newest version that waited is served once a buffer is free, with no newer version to
  // prompt it.
  std::vector<std::string> lines;
  EXPECT_NE(wait_for_text(*daemon, "step 6 ", 60s, &lines), "") << "step 6 never served after the holds were released";
  std::string said_again;
  for (const auto& l : lines) {
    if (l.find("is held by a client") != std::string::npos) said_again += l + "\n";
  }
  EXPECT_EQ(said_again, "") << "the wait was said again for versions arriving during it";
  modelcast::sidecar::View waited;
  for (std::uint64_t v = 4; !waited || waited.step() != 6; ++v) {
    waited = c.wait_for_version(v, 30s);
    ASSERT_TRUE(waited) << "step 6 never served after the holds were released";
  }
  EXPECT_EQ(check(waited, 6), "");
  auto next = publish_and_wait(7);
  ASSERT_TRUE(next) << "step 7 never served";
  EXPECT_EQ(check(next, 7), "");
}

// A version whose only converted tensors are empty (the others already in the wanted dtype) is
// served in place. An empty converted tensor points into the consumer's own memory, not the
// receive buffer; its offset was taken from there, and every client refused the manifest
// ("lies outside its buffer") while the daemon said it had installed the version.
TEST_F(DaemonTest, AnEmptyConvertedTensorBesideUnconvertedOnesIsServedInPlace) {
  const std::pair<bool, const char*> cases[] = {{false, "bf16"}, {false, "f8e4m3"}, {true, "bf16"}, {true, "f8e4m3"}};
  for (const auto& [empty_first, to] : cases) {
    SCOPED_TRACE(std::string(to) + (empty_first ? ", the empty tensor first" : ", the empty tensor last"));
    std::vector<std::uint16_t> a(1000, 0x3f80);  // bf16 1.0: kept as it is by a bf16 conversion
    float unused = 0;
    modelcast::ProducerOptions options;
    options.model_name = "test";
    options.control_endpoint = "tcp://127.0.0.1:0";
    modelcast::Producer producer(options);
    std::vector<modelcast::TensorRef> tensors{{{"a", modelcast::DType::kBF16, {1000}}, a.data()},
                                              {{"empty", modelcast::DType::kF32, {0}}, &unused}};
    if (empty_first) std::swap(tensors[0], tensors[1]);
    producer.register_tensors(tensors);
    producer.prepare();
    auto daemon = start_daemon(config(producer.control_endpoint(), 3,
                                      std::string("persist = false\n[model.convert]\n\"empty\" = \"") + to + "\"\n"));
    ASSERT_TRUE(producer.wait_for_consumers(1, 30s));
    producer.publish(1);
    auto c = client();
    modelcast::sidecar::View view;
    try {
      view = c.wait_for_version(1, 30s);
    } catch (const modelcast::Error& e) {
      FAIL() << "the client refused version 1: " << e.what();
    }
    ASSERT_TRUE(view) << "version 1 never served";
    auto empty = view.find("empty");
    ASSERT_TRUE(empty);
    EXPECT_EQ(empty->size_bytes(), 0u);
    EXPECT_EQ(empty->dtype(), std::string_view(to) == "bf16" ? modelcast::DType::kBF16 : modelcast::DType::kF8E4M3);
    auto kept = view.find("a");
    ASSERT_TRUE(kept);
    ASSERT_EQ(kept->size_bytes(), a.size() * 2);
    EXPECT_EQ(std::memcmp(kept->data, a.data(), kept->size_bytes()), 0);
  }
}

// A per-block fp8 conversion whose scales a client could not take (more than 2^17 for one
// tensor) is refused by the daemon, saying what to change; nothing half-described is served.
TEST_F(DaemonTest, AConversionWithMoreFp8ScalesThanAClientTakesIsRefusedSayingWhy) {
  std::vector<float> w(131073, 0.5f);  // with fp8_block = 1: one scale per element, one too many
  modelcast::ProducerOptions options;
  options.model_name = "test";
  options.control_endpoint = "tcp://127.0.0.1:0";
  modelcast::Producer producer(options);
  producer.register_tensor({{"w", modelcast::DType::kF32, {static_cast<std::int64_t>(w.size())}}, w.data()});
  producer.prepare();
  auto daemon = start_daemon(config(producer.control_endpoint(), 3,
                                    "persist = false\n"
                                    "[model.convert]\n\"w\" = { to = \"f8e4m3\", fp8_block = 1 }\n"));
  ASSERT_TRUE(producer.wait_for_consumers(1, 30s));
  producer.publish(1);
  const auto line = wait_for_text(*daemon, "fp8 scales, more than");
  ASSERT_NE(line, "") << "the daemon did not refuse version 1";
  EXPECT_NE(line.find("tensor 'w' has 131073"), std::string::npos) << line;
  EXPECT_NE(line.find("larger fp8_block"), std::string::npos) << line;
  EXPECT_FALSE(client().acquire()) << "a version the client could not read was served";
}

// Each tensor's fp8 scales within a client's bound, but all of them together past the manifest a
// client reads (64 MiB): refused saying why. Served, no client could acquire it, and each try left
// a hold it could not release, pinning the daemon's buffers until the client went.
TEST_F(DaemonTest, AConversionWhoseScalesTogetherMakeAManifestTooLargeForAClientIsRefusedSayingWhy) {
  constexpr std::size_t kTensors = 110, kElements = 131072;  // 14.4 million scales, about 72 MB
  std::vector<std::vector<std::uint16_t>> tensors(kTensors, std::vector<std::uint16_t>(kElements, 0x3f00));  // bf16 0.5
  modelcast::ProducerOptions options;
  options.model_name = "test";
  options.control_endpoint = "tcp://127.0.0.1:0";
  modelcast::Producer producer(options);
  for (std::size_t i = 0; i < kTensors; ++i) {
    producer.register_tensor(
        {{"t" + std::to_string(i), modelcast::DType::kBF16, {static_cast<std::int64_t>(kElements)}}, tensors[i].data()});
  }
  producer.prepare();
  auto daemon = start_daemon(config(producer.control_endpoint(), 3,
                                    "persist = false\n"
                                    "[model.convert]\n\"*\" = { to = \"f8e4m3\", fp8_block = 1 }\n",
                                    "", "64MiB"));
  ASSERT_TRUE(producer.wait_for_consumers(1, 30s));
  producer.publish(1);
  const auto line = wait_for_text(*daemon, "its manifest for clients is");
  ASSERT_NE(line, "") << "the daemon did not refuse version 1";
  EXPECT_NE(line.find("version 1 not served"), std::string::npos) << line;
  EXPECT_NE(line.find("larger fp8_block"), std::string::npos) << line;
  EXPECT_FALSE(client().acquire()) << "a version the client could not read was served";
}

}  // namespace
}  // namespace daemon_test
