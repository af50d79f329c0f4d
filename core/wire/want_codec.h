// A consumer's wants (ConsumerOptions::wants) in msgpack, as a join request carries them: per
// want a map of the tensor's name, the kind, the shard (dim, index, count) and the boxes, each
// box [offsets, extents].
#pragma once

#include <vector>

#include "core/wire/msgpack_fields.h"
#include "modelcast/consumer.h"

namespace modelcast::wire {

void pack_want(Packer& pk, const TensorWant& want);
// Throws Error(kProtocol) for a missing field or one of the wrong type, an unknown kind, or a
// box that is not two arrays of integers. What the wants mean is checked where they are used.
std::vector<TensorWant> unpack_wants(const msgpack::object& array);

}  // namespace modelcast::wire
