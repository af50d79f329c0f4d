// The bounds of an option that is a duration (a timeout, an interval): positive, and no longer
// than kLongestWait, beyond which deadlines on steady_clock would overflow.
#pragma once

#include <chrono>
#include <string>

#include "common/clock.h"
#include "modelcast/error.h"

namespace modelcast {

// Throws Error(kInvalidArgument) naming the option and its value unless 1 ms <= value <= kLongestWait.
inline void check_duration_option(const std::string& name, std::chrono::milliseconds value) {
  if (value.count() <= 0 || value > kLongestWait) {
    throw Error(ErrorCode::kInvalidArgument, name + " must be between 1 ms and " + std::to_string(kLongestWait.count()) +
                                                 " ms (100 years), got " + std::to_string(value.count()) + " ms");
  }
}

}  // namespace modelcast
