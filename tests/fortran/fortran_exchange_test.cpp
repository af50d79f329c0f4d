// A Fortran producer (fortran_producer.f90, a child process) and this C++ consumer exchange
// three versions of four arrays; every value is checked at the row-major index the Fortran
// module documents: Fortran w(i, j) of w(n, m) is element [j-1][i-1] of a tensor [m, n].
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "child_process.h"
#include "private_directory.h"
#include "modelcast/consumer.h"
#include "modelcast/modelcast.h"
#include "modelcast/modelcast_scheduler.h"
#include "modelcast/predictor_online.h"

#if !defined(FORTRAN_PRODUCER) || !defined(FORTRAN_PRODUCER_CHECKED)
#error "FORTRAN_PRODUCER and FORTRAN_PRODUCER_CHECKED (the Fortran program's paths) must be defined"
#endif

namespace {

using namespace std::chrono_literals;

template <typename T>
const T* values(const modelcast::ModelView& view, const std::string& name, modelcast::DType dtype,
                const std::vector<std::int64_t>& shape) {
  const auto tensor = view.tensor(name);
  EXPECT_EQ(tensor.spec->dtype, dtype) << name;
  EXPECT_EQ(tensor.spec->shape, shape) << name << ": a Fortran array's shape is registered reversed";
  return static_cast<const T*>(tensor.data);
}

// What fortran_producer.f90's run_scheduler prints, computed with the C++ scheduler: " 600 900 ...".
std::string cpp_scheduler_steps(modelcast::predictor::OnlineOptions::WorkMode work_mode) {
  modelcast::predictor::OnlineOptions options;
  options.work_mode = work_mode;
  options.forecast.total_steps = 3000;
  options.warmup_step = 500;
  options.costs.stall_s = 2.0;
  options.costs.delivery_s = 1.0;
  modelcast::predictor::OnlineScheduler scheduler(options);
  double stalls = 0;
  std::string text;
  for (std::int64_t step = 100; step <= 3000; step += 100) {
    scheduler.observe(step, 2.0 + 8.0 / (1.0 + static_cast<double>(step) / 300.0), 0.5 * static_cast<double>(step) + stalls);
    if (scheduler.should_publish(step)) {
      stalls += 2.0;
      text += ' ';  // not " " + std::string: gcc 12 warns falsely (-Wrestrict) on that
      text += std::to_string(step);
    }
    scheduler.wait_for_background();
  }
  EXPECT_FALSE(text.empty()) << "the curve should call for at least one publish";
  return text;
}

// The Fortran program at `program` against a C++ consumer, end to end.
void exchange_with(const char* program) {
  // Key pairs for the Fortran side's keyed exchange (the README's keyed producer).
  testing_support::PrivateDirectory keys;
  char public_key[41];
  for (const char* name : {"trainer.key", "server.key"}) {
    ASSERT_EQ(mc_write_key_pair((keys.path() + "/" + name).c_str(), 0, public_key), MC_OK) << mc_last_error();
  }
  testing_support::ChildProcess producer({program, keys.path()});
  auto sizes = producer.wait_for_line("sizes ");
  ASSERT_TRUE(sizes) << "the Fortran producer did not start";
  // The module's bind(c) mirrors of the C ABI's structs, which the _init functions fill whole.
  EXPECT_EQ(*sizes, "sizes " + std::to_string(sizeof(mc_producer_options)) + " " +
                        std::to_string(sizeof(mc_consumer_options)) + " " + std::to_string(sizeof(mc_tensor_info)) +
                        " " + std::to_string(sizeof(mc_scheduler_options)) + " " +
                        std::to_string(sizeof(mc_publish_result)) + " " + std::to_string(sizeof(mc_consumer_stats)) +
                        " " + std::to_string(sizeof(mc_producer_stats)) + " " + std::to_string(sizeof(mc_tensor_want)) +
                        " " + std::to_string(sizeof(mc_tensor_conversion)) + " " + std::to_string(sizeof(mc_group_state)))
      << "(producer options, consumer options, tensor info, scheduler options, publish result, consumer stats, "
         "producer stats, tensor want, tensor conversion, group state): "
         "a struct in fortran/modelcast_c.f90 no longer matches modelcast.h";
  auto endpoint = producer.wait_for_line("endpoint ");
  ASSERT_TRUE(endpoint) << "the Fortran producer did not start";
  modelcast::ConsumerOptions options;
  options.producer_endpoint = endpoint->substr(9);
  options.model_name = "fortran";
  modelcast::Consumer consumer(options);

  for (std::uint64_t v = 1; v <= 3; ++v) {
    auto published = producer.wait_for_line("published ");
    ASSERT_TRUE(published) << "no version " << v << " from the Fortran producer";
    ASSERT_EQ(*published, "published " + std::to_string(v));
    auto view = consumer.wait_for_version(v, 30s);
    ASSERT_TRUE(view) << consumer.stats().last_error;
    ASSERT_EQ(view.version(), v);
    EXPECT_EQ(view.step(), static_cast<std::int64_t>(100 * v));
    // The Fortran producer's metadata, as any consumer reads it (trailing blanks dropped).
    const std::map<std::string, std::string> metadata = view.metadata();
    EXPECT_EQ(metadata, (std::map<std::string, std::string>{{"regime", "laminar"},
                                                            {"sim_time", v == 1 ? ".25" : v == 2 ? ".50" : ".75"}}));
    const auto vi = static_cast<std::int64_t>(v);

    const float* w = values<float>(view, "w", modelcast::DType::kF32, {4, 3});  // Fortran w(3, 4)
    for (std::int64_t j = 1; j <= 4; ++j)
      for (std::int64_t i = 1; i <= 3; ++i)
        ASSERT_EQ(w[(j - 1) * 3 + (i - 1)], static_cast<float>(1000 * vi + 10 * i + j)) << "w(" << i << "," << j << ")";
    const double* b = values<double>(view, "b", modelcast::DType::kF64, {5});
    for (std::int64_t i = 1; i <= 5; ++i) ASSERT_EQ(b[i - 1], static_cast<double>(vi) + static_cast<double>(i) / 8.0);
    const std::int32_t* k = values<std::int32_t>(view, "k", modelcast::DType::kI32, {4, 3, 2});  // k(2, 3, 4)
    for (std::int64_t l = 1; l <= 4; ++l)
      for (std::int64_t j = 1; j <= 3; ++j)
        for (std::int64_t i = 1; i <= 2; ++i)
          ASSERT_EQ(k[((l - 1) * 3 + (j - 1)) * 2 + (i - 1)], 10000 * vi + 100 * i + 10 * j + l)
              << "k(" << i << "," << j << "," << l << ")";
    const std::int64_t* s = values<std::int64_t>(view, "s", modelcast::DType::kI64, {1});
    ASSERT_EQ(s[0], 5000000000LL + vi);
    producer.send_line("next");
  }
  const auto said = [&producer] {
    std::string text;
    for (const auto& line : producer.lines()) text += line + "\n";
    return text;
  };
  EXPECT_TRUE(producer.wait_for_line("consumer stats: ok")) << "the Fortran consumer stats checks did not finish:\n"
                                                            << said();
  EXPECT_TRUE(producer.wait_for_line("sharded: ok")) << "the Fortran producer ranks did not finish:\n" << said();
  EXPECT_TRUE(producer.wait_for_line("as_f32: ok")) << "the Fortran half-precision consumer did not finish:\n" << said();
  EXPECT_TRUE(producer.wait_for_line("group: ok")) << "the Fortran group members did not finish:\n" << said();
  EXPECT_TRUE(producer.wait_for_line("keyed: ok")) << "the Fortran keyed exchange did not finish";
  // The Fortran scheduler decided as this process's C++ scheduler does on the same curve.
  using WorkMode = modelcast::predictor::OnlineOptions::WorkMode;
  auto scheduler_line = producer.wait_for_line("scheduler ");
  ASSERT_TRUE(scheduler_line) << "the Fortran scheduler printed nothing";
  EXPECT_EQ(*scheduler_line, "scheduler" + cpp_scheduler_steps(WorkMode::kInline));
  scheduler_line = producer.wait_for_line("scheduler-background ");
  ASSERT_TRUE(scheduler_line) << "the Fortran scheduler printed nothing in the background mode";
  EXPECT_EQ(*scheduler_line, "scheduler-background" + cpp_scheduler_steps(WorkMode::kBackground));
  auto done = producer.wait_for_line("fortran: ok");
  const int status = producer.wait();
  const std::string output = said();
  EXPECT_TRUE(done) << "the Fortran side (its own consumer and checks) did not finish:\n" << output;
  EXPECT_EQ(status, 0) << output;
}

TEST(Fortran, ProducerExchangesEveryValueWithACppConsumerInDocumentedOrder) { exchange_with(FORTRAN_PRODUCER); }

// The same program with the module built with gfortran's run-time checks: an access past an
// array's end (a shape compared with another rank's) stops it there.
TEST(Fortran, TheModuleBuiltWithRunTimeChecksDoesTheSame) { exchange_with(FORTRAN_PRODUCER_CHECKED); }

}  // namespace
