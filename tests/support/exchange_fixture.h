// Shared set-up for the exchange tests: a transport setting applied to this process and to
// every peer process, and helpers to start peers.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "child_process.h"
#include "modelcast/consumer.h"
#include "modelcast/producer.h"
#include "test_model.h"

namespace exchange_test {

using namespace std::chrono_literals;
using testing_support::ChildProcess;

// "shm": UCX's choice on one host (shared memory); "tcp": forced to TCP on loopback.
class ExchangeTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    setenv("UCX_NET_DEVICES", "lo", 1);
    if (GetParam() == "tcp") {
      setenv("UCX_TLS", "tcp,self", 1);
    } else {
      unsetenv("UCX_TLS");
    }
  }
  void TearDown() override { unsetenv("UCX_TLS"); }

  std::unique_ptr<ChildProcess> start_consumer(const std::string& endpoint, const std::string& name,
                                               std::uint64_t until_version, int readers = 0,
                                               std::uint64_t seed = 1) {
    return std::make_unique<ChildProcess>(std::vector<std::string>{
        MODELCAST_TEST_PEER, "consumer", "--endpoint", endpoint, "--name", name, "--until-version",
        std::to_string(until_version), "--readers", std::to_string(readers), "--seed", std::to_string(seed)});
  }

  std::unique_ptr<ChildProcess> start_producer(const std::string& endpoint, std::uint64_t versions,
                                               std::uint64_t seed, std::size_t kib) {
    return std::make_unique<ChildProcess>(std::vector<std::string>{
        MODELCAST_TEST_PEER, "producer", "--endpoint", endpoint, "--versions", std::to_string(versions), "--seed",
        std::to_string(seed), "--kib", std::to_string(kib)});
  }
};

inline std::string param_name(const ::testing::TestParamInfo<std::string>& param_info) { return param_info.param; }

// An in-process producer of the test model.
struct TestProducer {
  explicit TestProducer(std::size_t kib, modelcast::ProducerOptions options = {}) : model(testmodel::make(kib)) {
    options.model_name = "test";
    if (options.control_endpoint == modelcast::ProducerOptions{}.control_endpoint) {
      options.control_endpoint = "tcp://127.0.0.1:0";
    }
    producer = std::make_unique<modelcast::Producer>(options);
    for (auto& t : model) producer->register_tensor({t.spec, t.words.data()});
  }
  modelcast::PublishTicket publish(std::uint64_t version, std::uint64_t seed = 1) {
    testmodel::fill(model, seed, version);
    return producer->publish(static_cast<std::int64_t>(version) * 10);
  }
  std::vector<testmodel::Tensor> model;
  std::unique_ptr<modelcast::Producer> producer;
};

}  // namespace exchange_test
