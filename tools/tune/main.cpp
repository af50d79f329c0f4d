// modelcast-tune: offline tuning of when to publish weights (the workflow model of include/modelcast/predictor_planner.h).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>

#include "common/parse_command_line.h"
#include "modelcast/predictor_csv.h"
#include "modelcast/error.h"
#include "modelcast/predictor_forecast.h"
#include "modelcast/version.h"
#include "tune_commands.h"

namespace {

// Every numeric option goes through this check. CLI11 converts an empty value to 0, and NaN
// passes its own number checks, while an option left out is NaN here ("not given"): an empty
// value or a "nan" typed by the user would read as 0 or as missing, or slip through a range test.
const CLI::Validator kNumber(
    [](std::string& text) {
      if (text.find_first_not_of(" \t") == std::string::npos) return std::string("empty value, expected a number");
      double v = 0;
      try {
        v = std::stod(text);
      } catch (const std::exception&) {
        return std::string();  // not a number at all: CLI11's own conversion says so
      }
      if (std::isnan(v)) return std::string("must be a number, got '" + text + "'");
      // CLI11 (and stod) read 0x10 as 16, which the log reader and --publish-steps refuse: one
      // rule for numbers, decimal, everywhere.
      if (text.find_first_of("xX") != std::string::npos) return std::string("must be a decimal number, got '" + text + "'");
      return std::string();
    },
    "NUMBER");

// Steps: CLI11 clamps an integer past int64 to its limit ("--warmup-steps 99999999999999999999"
// was said to be "9223372036854775807 ... beyond the log"; --epoch-steps took it), while the
// predictor takes steps up to 2^53, as the log reader does.
const CLI::Validator kStep(
    [](std::string& text) {
      const auto first = text.find_first_not_of(" \t");
      if (first == std::string::npos) return std::string();  // empty: kNumber says so
      const char* end = text.data() + text.find_last_not_of(" \t") + 1;
      std::int64_t v = 0;
      const auto read = std::from_chars(text.data() + first, end, v);
      if (read.ptr != end) return std::string();  // not an integer: CLI11 says so
      if (read.ec == std::errc::result_out_of_range || v > modelcast::predictor::kMaxCurveStep ||
          v < -modelcast::predictor::kMaxCurveStep) {
        return "must be a step within 2^53, got '" + text + "'";
      }
      return std::string();
    },
    "STEP");

template <class T>
CLI::Option* add_number(CLI::App& cmd, const std::string& name, T& value, const std::string& description) {
  auto* option = cmd.add_option(name, value, description)->check(kNumber);
  if constexpr (std::is_same_v<T, std::optional<std::int64_t>>) option->check(kStep);
  return option;
}

void add_common(CLI::App& cmd, modelcast::tune::CommonArgs& a) {
  // time_s is required: every cost in the model (c, d, the window) is in seconds of training
  // time, and steps alone do not say when a version would be servable.
  cmd.add_option("--log", a.log_path,
                 "loss log: CSV step,loss,time_s (time_s required; header optional, fields may be quoted) "
                 "or the shared curves format")->required();
  cmd.add_option("--run", a.run, "curves format: run id to use");
  cmd.add_option("--loss-col", a.loss_column,
                 "the loss column's header name (e.g. train_loss); default val_loss in the curves format, loss in a step,loss,time_s log");
  add_number(cmd, "--total-steps", a.total_steps, "planned length of the run (steps); plan's default: the curves file's total_steps, else the log's last step when --warmup-steps cuts it");
  add_number(cmd, "--publish-cost", a.publish_cost_s, "c: training stall per publish (s)")->required();
  add_number(cmd, "--update-latency", a.update_latency_s, "d: stall end -> version servable (s)")->required();
  add_number(cmd, "--request-rate", a.request_rate, "r: inference requests per second")->capture_default_str();
  add_number(cmd, "--window", a.window_s, "H: inference window (s) from the warm-up; default: to the run's end (plan: --total-steps, where the forecast ends; replay and evaluate: the log's last point)");
  add_number(cmd, "--max-slowdown", a.max_slowdown_s, "cap on total training slowdown c x publishes (s); inf = no cap")->capture_default_str();
  add_number(cmd, "--epoch-steps", a.epoch_steps, "E for the every-E-steps baseline (default total/10)");
  cmd.add_option("--plot", a.plot_path, "write an SVG chart (curve, forecast where there is one, publishes, served loss)");
  cmd.add_flag("--progress", a.progress, "report progress on stderr (default: only when stderr is a terminal)");
}

// What shapes a forecast: plan and replay only. evaluate scores a given schedule on the log and
// forecasts nothing, so it took these and ignored them, invalid values included.
void add_forecast_options(CLI::App& cmd, modelcast::tune::CommonArgs& a) {
  cmd.add_option("--reference", a.reference_path, "prior: CSV step,loss[,time_s] of a comparable earlier run (time_s optional here)");
  cmd.add_option("--lr-schedule", a.lr_schedule_path, "CSV step,lr: the learning-rate schedule, when known");
  add_number(cmd, "--anneal-drop", a.anneal_drop,
             "with --lr-schedule: the loss drop the rate's anneal brings (e.g. from an earlier run with the same schedule); "
             "default: measured on the log once it holds enough of the decay");
  // "none" rather than -inf: CLI11 reads "--loss-floor -inf" as an unknown option.
  cmd.add_option("--loss-floor", a.loss_floor,
                 "the lowest loss the run can reach (e.g. 0 for cross-entropy, minus the best return for a negated return), or "
                 "none for a loss with a large constant in it; default 0 when every logged loss is positive, none otherwise")
      ->transform([](std::string text) {
        std::string lower = text;
        std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
        return lower == "none" ? std::string("-inf") : text;  // None and NONE as Python and YAML write it
      })
      ->check(kNumber)
      ->type_name("FLOAT|none");
}

// "100, 200" as well as "100,200"; an empty list is an empty schedule, an empty item ("1,,2") an
// error, as is a step past an int64 (named as out of range, not as "not an integer").
std::vector<std::int64_t> parse_steps(const std::string& text) {
  auto trimmed = [](const std::string& s) {
    const auto first = s.find_first_not_of(" \t");
    return first == std::string::npos ? std::string() : s.substr(first, s.find_last_not_of(" \t") - first + 1);
  };
  std::vector<std::int64_t> out;
  if (trimmed(text).empty()) return out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    item = trimmed(item);
    auto refuse = [&](const std::string& why) {
      throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument, "--publish-steps: " + why + " (in '" + text + "')");
    };
    if (item.empty()) refuse("an empty item between commas");
    std::int64_t v = 0;
    const auto read = std::from_chars(item.data(), item.data() + item.size(), v);
    if (read.ec == std::errc::result_out_of_range) refuse("'" + item + "' is out of range for a step");
    if (read.ec != std::errc() || read.ptr != item.data() + item.size()) refuse("'" + item + "' is not an integer step");
    // A schedule is a time order: said here, as the evaluator can only say a step is not "a
    // logged step after the last".
    if (!out.empty() && v == out.back()) refuse("step " + item + " is given twice");
    if (!out.empty() && v < out.back()) refuse("steps must increase: " + item + " follows " + std::to_string(out.back()));
    out.push_back(v);
  }
  if (text.find_last_not_of(" \t") != std::string::npos && text[text.find_last_not_of(" \t")] == ',')
    throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument, "--publish-steps: an empty item after the last comma (in '" + text + "')");
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"modelcast-tune: choose when to publish weights from a training loss log.\n"
               "Model: each publish stalls training by c s; the version is servable d s after the stall;\n"
               "CIL = request rate x integral of the served version's loss over the inference window."};
  app.set_version_flag("--version", "modelcast-tune " MODELCAST_VERSION_STRING);
  app.require_subcommand(1);
  modelcast::tune::CommonArgs args;
  bool json = false;
  std::string publish_steps;

  auto* plan = app.add_subcommand("plan", "plan publishes from a warm-up prefix (the log, or its points up to --warmup-steps)");
  add_common(*plan, args);
  add_forecast_options(*plan, args);
  add_number(*plan, "--warmup-steps", args.warmup_step, "use only the log's points up to this step");
  plan->add_flag("--json", json, "print JSON");

  auto* replay = app.add_subcommand("replay", "run the online scheduler over a full log, showing it one point at a time");
  add_common(*replay, args);
  add_forecast_options(*replay, args);
  add_number(*replay, "--warmup-steps", args.warmup_step, "W: inference starts when this step completes")->required();
  replay->add_flag("--json", json, "print JSON");

  auto* evaluate = app.add_subcommand("evaluate", "CIL of a given schedule on the true (logged) curve");
  add_common(*evaluate, args);
  add_number(*evaluate, "--warmup-steps", args.warmup_step, "W: inference starts when this step completes")->required();
  evaluate->add_option("--publish-steps", publish_steps, "comma-separated publish steps (logged steps after W)")->required();
  evaluate->add_flag("--json", json, "print JSON");

  // --publish-steps "": the schedule that publishes nothing after the warm-up.
  if (auto status = modelcast::parse_command_line(app, argc, argv, {"--publish-steps"})) return *status;
  args.progress = args.progress || isatty(STDERR_FILENO) != 0;
  std::vector<std::int64_t> steps;
  try {
    if (*evaluate) steps = parse_steps(publish_steps);
  } catch (const std::exception& e) {  // a value that is not a step: a usage error, as CLI11's are
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
  try {
    nlohmann::json result;
    if (*plan) result = modelcast::tune::run_plan(args);
    else if (*replay) result = modelcast::tune::run_replay(args);
    else result = modelcast::tune::run_evaluate(args, steps);
    // File names go into the result as given (warnings, the plot's path), and a name need not be
    // UTF-8: the strict dump threw, after the plot was written, and the result was lost.
    if (json) std::cout << result.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    else std::cout << modelcast::tune::render_text(result);
    // Buffered output fails at the flush (a full disk, /dev/full, a closed pipe): the result is
    // lost, and the exit status must say so.
    std::cout.flush();
    if (!std::cout) {
      std::cerr << "error: could not write the result to standard output\n";
      return 1;
    }
    if (result.contains("warnings"))
      for (const auto& w : result["warnings"]) std::cerr << "warning: " << w.get<std::string>() << "\n";
    if (result.contains("warning")) std::cerr << "warning: " << result["warning"].get<std::string>() << "\n";
    return 0;
  } catch (const modelcast::tune::UsageError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
