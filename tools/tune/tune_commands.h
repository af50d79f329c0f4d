// The three modelcast-tune commands, separated from argument parsing so they stay testable.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace modelcast::tune {

// An option the command needs and was not given, found only once the log is read (exit 2, as
// CLI11's own usage errors; other errors are the input's, exit 1).
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct CommonArgs {
  std::string log_path;
  std::string run;                       // curves format
  std::string loss_column;               // empty: the format's own (CsvOptions::loss_column)
  std::optional<std::int64_t> total_steps;
  double publish_cost_s = std::numeric_limits<double>::quiet_NaN();
  double update_latency_s = std::numeric_limits<double>::quiet_NaN();
  double request_rate = 1.0;
  double window_s = std::numeric_limits<double>::quiet_NaN();
  double max_slowdown_s = std::numeric_limits<double>::infinity();
  std::optional<std::int64_t> epoch_steps;
  std::optional<std::int64_t> warmup_step;
  std::string reference_path;    // optional prior: a comparable earlier run (step,loss[,time_s])
  std::string lr_schedule_path;  // optional: step,lr
  // With lr_schedule_path: ForecastOptions::anneal_drop (NaN: measured on the prefix, when it can be).
  double anneal_drop = std::numeric_limits<double>::quiet_NaN();
  // ForecastOptions::loss_floor (NaN: from the log; -infinity: none).
  double loss_floor = std::numeric_limits<double>::quiet_NaN();
  std::string plot_path;
  bool progress = false;  // report progress of long runs (replay) on stderr
};

// Each returns the JSON result; human-readable text is rendered from it by render_text.
// They throw modelcast::Error(kInvalidArgument) (predictor::CsvError for a bad log) on bad input.
nlohmann::json run_plan(const CommonArgs& args);
nlohmann::json run_replay(const CommonArgs& args);
nlohmann::json run_evaluate(const CommonArgs& args, const std::vector<std::int64_t>& publish_steps);
std::string render_text(const nlohmann::json& result);

}  // namespace modelcast::tune
