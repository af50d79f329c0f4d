// A Producer on a loopback port of its own and a Consumer of a producer that need not run: what
// the resource-limit tests make, and close again, under each limit.
#pragma once

#include "modelcast/consumer.h"
#include "modelcast/producer.h"

namespace testing_support {

inline modelcast::ProducerOptions loopback_producer_options() {
  modelcast::ProducerOptions options;
  options.model_name = "test";
  options.control_endpoint = "tcp://127.0.0.1:0";
  return options;
}

inline modelcast::ConsumerOptions unjoined_consumer_options() {
  modelcast::ConsumerOptions options;
  options.model_name = "test";
  options.producer_endpoint = "tcp://127.0.0.1:5555";
  return options;
}

inline void make_producer() { modelcast::Producer producer(loopback_producer_options()); }
inline void make_consumer() { modelcast::Consumer consumer(unjoined_consumer_options()); }

}  // namespace testing_support
