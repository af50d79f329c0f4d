// modelcast "hello world" in C++: one process with a Producer (the trainer) and a Consumer
// (the inference side). The producer publishes three versions of a tiny model; the consumer
// waits for each one and checks every value. Exits 1 if anything differs.
//
// Run with UCX_NET_DEVICES=lo so that UCX stays on loopback.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "modelcast/consumer.h"
#include "modelcast/error.h"
#include "modelcast/producer.h"

using namespace std::chrono_literals;

int main() try {
  // The trainer's tensors: modelcast reads them during publish(), so they must stay put.
  std::vector<float> weights(4 * 3);
  std::vector<std::int64_t> counts(5);

  modelcast::ProducerOptions producer_options;
  producer_options.model_name = "hello";
  producer_options.control_endpoint = "tcp://127.0.0.1:0";  // port 0: pick a free one
  modelcast::Producer producer(producer_options);
  producer.register_tensor({{.name = "layer0.weight", .dtype = modelcast::DType::kF32, .shape = {4, 3}},
                            weights.data()});
  producer.register_tensor({{.name = "counts", .dtype = modelcast::DType::kI64, .shape = {5}}, counts.data()});

  modelcast::ConsumerOptions consumer_options;
  consumer_options.producer_endpoint = producer.control_endpoint();  // the port actually bound
  consumer_options.model_name = "hello";
  consumer_options.consumer_name = "example-consumer";
  modelcast::Consumer consumer(consumer_options);

  for (int round = 1; round <= 3; ++round) {
    // "Training" changes the weights, then the trainer publishes them.
    for (std::size_t i = 0; i < weights.size(); ++i) weights[i] = static_cast<float>(round * 100 + i) * 0.5f;
    for (std::size_t i = 0; i < counts.size(); ++i) counts[i] = round * 1000 + static_cast<std::int64_t>(i);
    auto ticket = producer.publish(/*step=*/round * 10, {{"round", std::to_string(round)}});
    std::printf("published version %llu (step %lld, %zu bytes, trainer stalled %.3f ms)\n",
                static_cast<unsigned long long>(ticket.version), static_cast<long long>(ticket.step), ticket.bytes,
                std::chrono::duration<double, std::milli>(ticket.stall).count());

    // The consumer side: wait (bounded) for this version and read it through a view, which
    // stays valid and unchanged while we hold it.
    modelcast::ModelView view = consumer.wait_for_version(ticket.version, 30s);
    if (!view) {
      std::fprintf(stderr, "version %llu did not arrive: %s\n", static_cast<unsigned long long>(ticket.version),
                   consumer.stats().last_error.c_str());
      return 1;
    }
    auto w = view.tensor("layer0.weight").as<float>();
    auto c = view.tensor("counts").as<std::int64_t>();
    std::printf("consumer has version %llu (step %lld, round=%s): layer0.weight[0..2] = %g %g %g, counts[4] = %lld\n",
                static_cast<unsigned long long>(view.version()), static_cast<long long>(view.step()),
                view.metadata().at("round").c_str(), w[0], w[1], w[2], static_cast<long long>(c[4]));

    bool same = view.version() == ticket.version && view.step() == round * 10 &&
                view.metadata().at("round") == std::to_string(round) && w.size() == weights.size() &&
                c.size() == counts.size();
    for (std::size_t i = 0; same && i < weights.size(); ++i) same = w[i] == weights[i];
    for (std::size_t i = 0; same && i < counts.size(); ++i) same = c[i] == counts[i];
    if (!same) {
      std::fprintf(stderr, "version %llu differs from what was published\n",
                   static_cast<unsigned long long>(ticket.version));
      return 1;
    }
  }
  std::printf("ok: 3 versions received intact\n");
  return 0;
} catch (const modelcast::Error& e) {
  std::fprintf(stderr, "modelcast error: %s\n", e.what());
  return 1;
}
