// Errors at modelcast's public boundary: one exception type carrying a category.
#pragma once

#include <stdexcept>
#include <string>

#include "modelcast/export.h"

namespace modelcast {

// What went wrong, coarse enough to branch on; the message says exactly what.
// The numeric values are mirrored by the C ABI's mc_status codes.
enum class ErrorCode : int {
  kInvalidArgument = 1,  // the caller passed something wrong (names, shapes, options)
  kLayoutMismatch = 2,   // producer and consumer disagree on tensors, dtypes or shapes
  kProtocol = 3,         // a malformed, truncated or unknown-version message
  kTransport = 4,        // UCX or ZeroMQ failed (peer gone, address unusable, ...)
  kTimeout = 5,          // a bounded wait ran out
  kIntegrity = 6,        // a digest did not match
  kState = 7,            // the call is not allowed now (e.g. register after publish)
  kResource = 8,         // memory or another resource could not be had
  kAuthentication = 9,   // a key, handshake or signature did not check out
};

// Every public function of the C++ API reports failure by throwing modelcast::Error.
class MODELCAST_API Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace modelcast
