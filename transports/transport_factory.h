// How the registry creates a transport it knows only by name. Each transport library provides
// one factory (transports/<name>/<name>_factory.h), so that what sits above the seam never
// includes a transport's own header nor links what that transport is built on.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "transports/transport.h"

namespace modelcast::transport {

// Which side of the exchange a transport serves: a transport may set itself up for it.
enum class Side : std::uint8_t { kProducer, kConsumer };

struct TransportFactory {
  std::string name;
  // Used when the user names no transports.
  bool on_by_default = true;
  std::function<std::unique_ptr<Transport>(Side)> make;
  // False where the transport cannot work here: left out of the default list; named
  // explicitly, make() says why. Empty: always available.
  std::function<bool()> available;
};

}  // namespace modelcast::transport
