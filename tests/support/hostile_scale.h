// How many times the hostile suites repeat their probes: MODELCAST_HOSTILE_SCALE (a positive
// integer; 1, the default, is what CI runs). bench/run.sh hostile sets it for the long runs.
#pragma once

#include <cstdlib>
#include <string>

namespace testing_support {

inline int hostile_scale() {
  const char* text = std::getenv("MODELCAST_HOSTILE_SCALE");
  if (text == nullptr) return 1;
  int scale = std::atoi(text);
  return scale >= 1 && scale <= 10000 ? scale : 1;
}

}  // namespace testing_support
