// The transports linked into this library, in the order they are preferred when the user
// names none.
#pragma once

#include <vector>

#include "transports/transport_factory.h"

namespace modelcast::transport {

const std::vector<TransportFactory>& builtin_transports();

}  // namespace modelcast::transport
