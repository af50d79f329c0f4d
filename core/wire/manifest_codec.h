// A manifest's msgpack form: the body of a FetchReply and, with a domain prefix, the bytes a
// producer signs (one fixed field order, so both sides compute the same bytes).
#pragma once

#include "core/model/manifest.h"
#include "core/wire/msgpack_fields.h"

namespace modelcast::wire {

void pack_manifest(Packer& pk, const Manifest& manifest);
// The bytes `tensor` takes in a packed manifest.
std::size_t packed_tensor_bytes(const TensorEntry& tensor);
// Throws Error(kProtocol) naming the field that is missing or of the wrong type.
Manifest unpack_manifest(const msgpack::object& object);

}  // namespace modelcast::wire
