#include "transports/ucx/ucx_factory.h"

#include "transports/ucx/ucx_quirks.h"
#include "transports/ucx/ucx_transport.h"

namespace modelcast::transport {

TransportFactory ucx_transport_factory() {
  return {"ucx", true,
          [](Side side) {
            // A consumer receives, a producer sends: why the two sides want different endpoint
            // ids is at UcxOptions::indirect_endpoint_ids.
            const UcxQuirks& quirks = running_ucx_quirks();
            UcxOptions options;
            options.indirect_endpoint_ids = side == Side::kConsumer ? quirks.direct_ids_unsafe_for_receivers
                                                                    : !quirks.indirect_ids_assert_on_stuck_sends;
            return make_ucx_transport(options);
          },
          {}};
}

}  // namespace modelcast::transport
