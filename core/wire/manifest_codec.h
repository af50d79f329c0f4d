// A manifest's msgpack form: the body of a FetchReply and, with a domain prefix, the bytes a
// producer signs (one fixed field order, so both sides compute the same bytes).
#pragma once

#include "core/model/manifest.h"
#include "core/wire/msgpack_fields.h"

namespace modelcast::wire {

void pack_manifest(Packer& pk, const Manifest& manifest);
// Throws Error(kProtocol) naming the field that is missing or of the wrong type.
Manifest unpack_manifest(const msgpack::object& object);

}  // namespace modelcast::wire
