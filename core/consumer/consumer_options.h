// ConsumerOptions as the consumer uses them: checked and completed, and the limits derived
// from them. Called on the caller's thread, before any thread starts.
#pragma once

#include <cstdint>

#include "modelcast/consumer.h"

namespace modelcast::consumer {

// The name of a consumer that was given none: host:pid, which the producer's logs show.
std::string default_consumer_name();

// Throws Error(kInvalidArgument) naming the bad option; fills in the default consumer name.
ConsumerOptions checked(ConsumerOptions options);

// The largest model this consumer will allocate for: what it can hold at all (its caller
// buffers, or half the machine's memory, since two versions must fit at once), narrowed by
// max_model_bytes.
std::uint64_t model_size_cap(const ConsumerOptions& options);

// Random per Consumer object: how the producer tells this consumer's reconnects from others'.
std::uint64_t random_session();

}  // namespace modelcast::consumer
