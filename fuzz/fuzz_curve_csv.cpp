// libFuzzer target: the predictor's loss-log reader (include/modelcast/predictor_csv.h).
//
// The first input byte picks the entry point (printable on purpose, so corpus files stay text):
//   '0' (and any byte % 3 == 0): read_loss_log, default options (plain step,loss[,time_s])
//   '1' (byte % 3 == 1):         read_loss_log, curves format, run "r1", val_loss
//   '2' (byte % 3 == 2):         read_curve_collection, train_loss
// The rest is the file. Only CsvError may leave the readers (their documented failure). What
// they return must keep their documented promises: strictly increasing steps, finite losses,
// at least min_points points.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

#include "modelcast/predictor_csv.h"

namespace pr = modelcast::predictor;

namespace {

void check(const pr::LossLog& log, std::size_t min_points, const char* what) {
  if (log.points.size() < min_points) {
    std::fprintf(stderr, "fuzz_curve_csv: %s returned %zu points (< %zu)\n", what, log.points.size(), min_points);
    std::abort();
  }
  for (std::size_t i = 0; i < log.points.size(); ++i) {
    if (!std::isfinite(log.points[i].loss)) {
      std::fprintf(stderr, "fuzz_curve_csv: %s returned a non-finite loss at point %zu\n", what, i);
      std::abort();
    }
    if (i > 0 && log.points[i].step <= log.points[i - 1].step) {
      std::fprintf(stderr, "fuzz_curve_csv: %s returned steps that do not increase at point %zu\n", what, i);
      std::abort();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const unsigned mode = data[0] % 3;
  std::istringstream in(std::string(reinterpret_cast<const char*>(data) + 1, size - 1));
  try {
    if (mode == 0) {
      const pr::CsvOptions options;
      check(pr::read_loss_log(in, "fuzz.csv", options), options.min_points, "read_loss_log (plain)");
    } else if (mode == 1) {
      pr::CsvOptions options;
      options.run = "r1";
      check(pr::read_loss_log(in, "fuzz.csv", options), options.min_points, "read_loss_log (curves)");
    } else {
      const auto collection = pr::read_curve_collection(in, "fuzz.csv", "train_loss");
      for (const auto& log : collection.runs) check(log, 0, "read_curve_collection");
    }
  } catch (const pr::CsvError&) {
    return 0;
  }
  return 0;
}
