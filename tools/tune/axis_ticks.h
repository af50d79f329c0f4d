// Round tick values for a chart axis ("nice numbers": steps of 1, 2 or 5 times a power of ten).
// Hand-written: Debian packages no C++ charting library small enough to pull in for one axis.
#pragma once

#include <string>
#include <vector>

namespace modelcast::tune {

struct AxisTicks {
  std::vector<double> values;       // ascending, inside [lo, hi], multiples of step
  std::vector<std::string> labels;  // values printed with as many decimals as step needs
  double step = 0;
};

// About `target` ticks (at least 2 where the range allows) for the finite range lo < hi.
AxisTicks nice_ticks(double lo, double hi, int target = 5);

}  // namespace modelcast::tune
