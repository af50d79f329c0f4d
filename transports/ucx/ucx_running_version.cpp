// The UCX this process runs, asked of UCX itself, and the work-arounds it needs (logged once).
#include <ucp/api/ucp.h>

#include "common/log.h"
#include "transports/ucx/ucx_quirks.h"

namespace modelcast::transport {

UcxVersion running_ucx_version() {
  UcxVersion v;
  ucp_get_version(&v.major, &v.minor, &v.release);
  return v;
}

const UcxQuirks& running_ucx_quirks() {
  static const UcxQuirks quirks = [] {
    UcxVersion version = running_ucx_version();
    UcxQuirks q = ucx_quirks_for(version);
    log::get("ucx")->debug("UCX {} ({}); work-arounds in force: {}", to_string(version), ucp_get_version_string(),
                           to_string(q));
    return q;
  }();
  return quirks;
}

}  // namespace modelcast::transport
