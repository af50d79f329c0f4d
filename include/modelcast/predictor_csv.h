// Reading loss logs: a plain "step,loss[,time_s]" CSV, or the shared curves format
// (run,track,record,step,total_steps,val_loss|train_loss,train_time_s; gzip not supported).
#pragma once

#include <cstdint>
#include <istream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "modelcast/error.h"
#include "modelcast/predictor_forecast.h"

namespace modelcast::predictor {

// Thrown for malformed input; what() names the source and 1-based line number.
// A malformed log: Error(kInvalidArgument) that also carries the line it was found on.
class CsvError : public Error {
 public:
  CsvError(const std::string& source, std::size_t line, const std::string& message);
  std::size_t line() const { return line_; }

 private:
  std::size_t line_;
};

struct LossLog {
  std::vector<CurvePoint> points;       // strictly increasing steps, finite values
  std::optional<std::int64_t> total_steps;  // from the curves format
  bool has_time = false;
  std::string run, track, record;       // curves format only
  // Documented fallbacks applied while reading (with line numbers), e.g. a training timer that
  // restarts (time_s drops): later times are shifted so that time keeps increasing.
  std::vector<std::string> warnings;
};

struct CsvOptions {
  std::string run;                  // curves format: run id to select (required there; refused elsewhere)
  // The loss column's header name; empty: the format's own (val_loss in a curves file, loss in a
  // step,loss[,time_s] log). A name is refused for a log without a header, which has no names.
  std::string loss_column;
  std::size_t min_points = 2;
};

// Parses either format (detected from the header). A decreasing time_s (timer restart) is
// repaired by shifting the later times and reported in warnings, as is a log that starts more than
// 10 times its own span past step 0 (forecasts take the step as progress). Throws CsvError on missing columns,
// non-numeric/NaN/inf values, a loss_column given for a headerless log, steps not strictly increasing or beyond kMaxCurveStep, fewer
// than min_points rows, an unknown run, or a run given for a single-run log, and says so for a
// gzip-compressed file. A UTF-8 byte order mark before the first line is skipped, and header
// names match in any case ("Step,Loss"). Stateless; thread-safe.
LossLog read_loss_log(std::istream& in, const std::string& source_name, const CsvOptions& options);
LossLog read_loss_log_file(const std::string& path, const CsvOptions& options);

// Curves-format helper for the benchmark: every run in the file (rows grouped by run).
// Runs whose steps are not strictly increasing (concatenated restarts) are skipped and
// their ids returned in skipped_runs.
struct CurveCollection {
  std::vector<LossLog> runs;
  std::vector<std::string> skipped_runs;
};
CurveCollection read_curve_collection(std::istream& in, const std::string& source_name,
                                      const std::string& loss_column);

}  // namespace modelcast::predictor
