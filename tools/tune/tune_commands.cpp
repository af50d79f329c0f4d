#include "tune_commands.h"
#include "modelcast/error.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "common/shown_text.h"
#include "csv_file.h"    // predictor/: opening its CSV inputs
#include "csv_record.h"  // predictor/: the loss logs' record splitter
#include "modelcast/predictor.h"
#include "progress_axis.h"  // predictor/: the forecaster's anneal test
#include "progress_meter.h"
#include "schedule_plot.h"

namespace modelcast::tune {
namespace {

namespace mp = modelcast::predictor;
using Json = nlohmann::json;

void check_plot_path(const std::string& path) {
  if (path.empty()) return;
  const auto dot = path.rfind('.');
  const std::string ext = dot == std::string::npos ? "" : path.substr(dot);
  if (ext != ".svg" && ext != ".SVG")
    throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument, "--plot: only SVG output is supported, give a file name ending in .svg (got '" + path + "')");
}

// The chart is written over whatever is at its path: an input given there too (a log named
// run.svg) was replaced without a word.
void check_plot_is_no_input(const CommonArgs& a) {
  if (a.plot_path.empty()) return;
  for (const auto& [option, path] : {std::pair{"--log", &a.log_path}, std::pair{"--reference", &a.reference_path},
                                     std::pair{"--lr-schedule", &a.lr_schedule_path}}) {
    std::error_code ec;
    if (!path->empty() && std::filesystem::equivalent(a.plot_path, *path, ec)) {
      throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument,
                             "--plot " + a.plot_path + " is the " + option + " file: the chart would replace it");
    }
  }
}

void check_costs(const CommonArgs& a) {
  check_plot_path(a.plot_path);
  check_plot_is_no_input(a);
  auto need = [](double v, const char* name) {
    if (std::isnan(v)) throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument, std::string(name) + " is required");
    if (!std::isfinite(v) || v < 0) throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument, std::string(name) + " must be a finite number >= 0");
  };
  need(a.publish_cost_s, "--publish-cost");
  need(a.update_latency_s, "--update-latency");
  if (!std::isfinite(a.request_rate) || a.request_rate <= 0) {
    std::ostringstream why;
    why << "--request-rate must be a finite number > 0, got " << a.request_rate;
    throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument, why.str());
  }
  // An empty window scores nothing: every schedule, publishing or not, came out at CIL 0.
  if (!std::isnan(a.window_s) && (!std::isfinite(a.window_s) || a.window_s <= 0))
    throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument, "--window must be a finite number > 0");
  if (std::isnan(a.max_slowdown_s) || a.max_slowdown_s < 0) throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument, "--max-slowdown must be >= 0");
  if (a.epoch_steps && *a.epoch_steps <= 0) throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument, "--epoch-steps must be positive");
  if (a.total_steps && *a.total_steps <= 0) {
    throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument,
                           "--total-steps must be positive, got " + std::to_string(*a.total_steps));
  }
}

mp::PublishCosts costs_of(const CommonArgs& a) {
  mp::PublishCosts c;
  c.stall_s = a.publish_cost_s;
  c.delivery_s = a.update_latency_s;
  c.request_rate = a.request_rate;
  c.window_s = a.window_s;
  c.max_slowdown_s = a.max_slowdown_s;
  return c;
}

mp::LossLog load_log(const CommonArgs& a, std::size_t min_points) {
  mp::CsvOptions o;
  o.run = a.run;
  o.loss_column = a.loss_column;
  o.min_points = min_points;
  auto log = mp::read_loss_log_file(a.log_path, o);
  // Steps count training steps from 0: the forecast's curves are of the step, and replay failed
  // on a log of negative steps naming an option nobody gave ("total_steps must be positive").
  if (!log.points.empty() && log.points.front().step < 0)
    throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument,
                           a.log_path + ": its steps start at " + std::to_string(log.points.front().step) +
                               "; steps count training steps from 0");
  if (!log.has_time) {
    throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument,
                           a.log_path + ": no time column: every cost is in seconds of training, so the log needs each "
                                        "point's training time in a column named time_s (seconds; train_time_s in a "
                                        "curves file), or as the third column of a log without a header");
  }
  // Every cost is in seconds of training: a clock that never moves would score any schedule as free.
  if (log.points.size() >= 2 && !(log.points.back().time_s > log.points.front().time_s)) {
    std::ostringstream why;
    why << a.log_path << ": time_s does not advance (" << log.points.front().time_s << " s at step "
        << log.points.front().step << ", " << log.points.back().time_s << " s at step " << log.points.back().step;
    // Those are the times after each drop was taken for a timer restart and bridged: the file's
    // own times were quoted as if they were in it.
    if (!log.warnings.empty()) {
      why << ", after " << log.warnings.size() << " drop(s) of time_s were taken for timer restarts and bridged; "
          << "the first: " << log.warnings.front();
    }
    why << "): the workflow model needs training times";
    throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument, why.str());
  }
  return log;
}

mp::ReferenceCurve load_reference(const std::string& path, std::vector<std::string>& warnings) {
  // Read once: the file may be a pipe (--reference <(zcat run.csv.gz)), which a second open
  // would read from where the first stopped (its first 8 KiB lost, a line cut in two).
  std::stringstream text;
  text << mp::open_csv_file(path).rdbuf();
  // --run picks a run of --log, not of the reference; the reader's own message would point there.
  if (text.rdbuf()->in_avail() > 0) {
    const auto first = mp::read_first_record(text, path);
    if (first.header && mp::find_column(first.fields, "run") >= 0 && mp::find_column(first.fields, "total_steps") >= 0)
      throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument,
                             path + ": a curves file of many runs; --reference needs a single run's step,loss[,time_s] log "
                                    "(--run selects a run of --log only)");
  }
  text.clear();  // one copy in memory, read twice
  text.seekg(0);
  auto log = mp::read_loss_log(text, path, {});
  // Progress is step / last step, in [0, 1]: a step below 0 falls outside it, a last step at or
  // below 0 would reverse it or divide by 0. Named here: the forecast's own message named no file.
  if (log.points.front().step < 0)
    throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument,
                           path + ": its steps start at " + std::to_string(log.points.front().step) +
                               "; a --reference run's progress is step / last step, in [0, 1], so its steps must be >= 0");
  if (log.points.back().step <= 0)
    throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument,
                           path + ": its steps end at " + std::to_string(log.points.back().step) +
                               "; a --reference run's progress is step / last step, so its last step must be > 0");
  // Bridged timer restarts change the reference's time axis, and so the plan: said as --log's are.
  for (const auto& w : log.warnings) warnings.push_back("--reference " + path + ": " + w);
  mp::ReferenceCurve ref;
  const double last_step = static_cast<double>(log.points.back().step);
  const double last_time = log.points.back().time_s;
  for (const auto& p : log.points) {
    ref.progress.push_back(static_cast<double>(p.step) / last_step);
    ref.loss.push_back(p.loss);
    if (log.has_time && last_time > 0) ref.time_fraction.push_back(p.time_s / last_time);
  }
  return ref;
}

mp::LrSchedule load_lr_schedule(const std::string& path) {
  auto in = mp::open_csv_file(path);
  mp::LrSchedule s;
  // The first line as the loss logs' reader takes it (byte order mark, header in any case, gzip).
  auto first = mp::read_first_record(in, path);
  std::size_t n = first.line_no;
  int step_col = 0, lr_col = 1;
  std::size_t columns = 2;
  if (first.header) {
    // A file of many runs' schedules (bench/data/curves/dev_lr_schedules.csv) reads as one
    // schedule whose steps restart: say what it is instead.
    if (mp::find_column(first.fields, "run") >= 0)
      throw mp::CsvError(path, first.line_no, "a 'run' column: --lr-schedule takes one run's schedule (step,lr rows), not a file of several runs'");
    step_col = mp::find_column(first.fields, "step");
    lr_col = mp::find_column(first.fields, "lr");
    if (step_col < 0 || lr_col < 0)
      throw mp::CsvError(path, n, std::string("missing column '") + (step_col < 0 ? "step" : "lr") + "' (expected step,lr)");
    columns = first.fields.size();
  }
  std::string line;
  auto row = [&](const std::vector<std::string>& fields) {
    if (fields.size() != columns) throw mp::CsvError(path, n, first.header ? "expected one value per header column" : "expected step,lr");
    std::int64_t step = 0;
    double lr = 0;
    const std::string& a = fields[static_cast<std::size_t>(step_col)];
    const std::string& b = fields[static_cast<std::size_t>(lr_col)];
    // from_chars leaves the value at 0 when it is out of range (1e400, 1e-400, a step past 2^63),
    // and an lr of 0 is a schedule: the error code is checked, not only where parsing stopped.
    // Steps read as the loss log's are ("1e12" and "125.0" included).
    if (!mp::parse_csv_integer(a, step)) {
      const bool range = mp::csv_integer_out_of_range(a);
      throw mp::CsvError(path, n, (range ? "step is out of range: " : "step is not an integer: ") + shown_text(a));
    }
    // As the loss log's steps: a double holds each step exactly up to there.
    if (step > mp::kMaxCurveStep || step < -mp::kMaxCurveStep)
      throw mp::CsvError(path, n, "step " + std::to_string(step) + " is beyond 2^53, the largest step the predictor takes");
    if (mp::csv_double_out_of_range(b)) throw mp::CsvError(path, n, "lr is out of a double's range: " + shown_text(b));
    if (!mp::parse_csv_double(b, lr) || !std::isfinite(lr) || lr < 0)
      throw mp::CsvError(path, n, "lr is not a finite number >= 0: " + shown_text(b));
    if (!s.steps.empty() && step <= s.steps.back())
      throw mp::CsvError(path, n, "steps not increasing: step " + std::to_string(step) + " follows step " + std::to_string(s.steps.back()));
    s.steps.push_back(step);
    s.lr.push_back(lr);
  };
  if (!first.header) row(first.fields);
  while (mp::read_csv_line(in, line, path, n + 1)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    row(mp::split_csv_record(line, path, n));  // RFC 4180, as the loss logs
  }
  if (s.steps.empty()) throw mp::CsvError(path, n, "no schedule rows");
  // Said here, naming the file, rather than by the forecaster as "lr_schedule: ...".
  if (std::none_of(s.lr.begin(), s.lr.end(), [](double lr) { return lr > 0; }))
    throw mp::CsvError(path, n, "the rate is 0 on every row: a schedule that never trains");
  return s;
}

// Index of the warm-up step: the last logged step <= W.
std::size_t warmup_index_of(const mp::LossLog& log, std::int64_t w) {
  if (w < log.points.front().step) throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument, "--warmup-steps " + std::to_string(w) + " is before the first logged step");
  // Taking the last point instead would plan or score a warm-up the user did not ask for.
  if (w > log.points.back().step)
    throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument,
                           "--warmup-steps " + std::to_string(w) + " is beyond the log, which ends at step " +
                               std::to_string(log.points.back().step) + " (" + std::to_string(log.points.size()) + " points)");
  std::size_t i = 0;
  while (i + 1 < log.points.size() && log.points[i + 1].step <= w) ++i;
  return i;
}


// Every command's CIL covers one window: from the warm-up step to the end of the run. plan's
// run ends at --total-steps (its forecast goes there); replay and evaluate score the logged
// curve, so their run ends where the log does, and a --total-steps beyond it is refused rather
// than scored over a shorter window than the same run's plan.
// --window H replaces the run's end with H seconds of training time after the warm-up (the
// planner's window_end): the window is then reported in time, as the run's steps do not bound it.
Json cil_window_json(const mp::Trajectory& scored, std::size_t w, const mp::PublishCosts& costs) {
  const double from = scored.time_s[w];
  Json j{{"from_step", scored.steps[w]}, {"from_time_s", from}};
  if (std::isfinite(costs.window_s)) {
    j["window_s"] = costs.window_s;
    j["to_time_s"] = from + costs.window_s;
  } else {
    j["to_step"] = scored.steps.back();
    j["to_time_s"] = scored.time_s.back();
  }
  return j;
}

void check_total_within_log(const CommonArgs& a, const mp::LossLog& log, std::size_t warmup_index) {
  if (a.total_steps && *a.total_steps < log.points.back().step) {
    throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument,
                           "--total-steps " + std::to_string(*a.total_steps) + " ends before the log, which ends at step " +
                               std::to_string(log.points.back().step) +
                               ": CIL here is measured on the logged curve to its end (leave --total-steps out, or cut "
                               "the log at the run's end)");
  }
  if (a.total_steps && *a.total_steps > log.points.back().step) {
    throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument,
                           "--total-steps " + std::to_string(*a.total_steps) + " is beyond the log, which ends at step " +
                               std::to_string(log.points.back().step) +
                               ": CIL here is measured on the logged curve, from the warm-up to the end of the run, "
                               "so the log must reach the run's end (or leave --total-steps out)");
  }
  // Said as such: the time check below read it as a clock that stood still (from and to the same
  // point).
  if (warmup_index + 1 >= log.points.size()) {
    throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument,
                           a.log_path + ": nothing logged after the warm-up step (step " +
                               std::to_string(log.points[warmup_index].step) + " is the log's last)");
  }
  // Past the log, the last logged loss would be scored as served for the rest of the window.
  const double from = log.points[warmup_index].time_s, to = log.points.back().time_s;
  // A clock that stops at the warm-up leaves an empty window: every schedule scored CIL 0, "no
  // gain achievable" (an explicit --window 0 is refused).
  if (!(to > from)) {
    std::ostringstream why;
    why << a.log_path << ": time_s does not advance after the warm-up step (" << from << " s at step "
        << log.points[warmup_index].step << ", " << to << " s at step " << log.points.back().step
        << "): CIL is measured over the training time after the warm-up";
    throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument, why.str());
  }
  if (std::isfinite(a.window_s) && from + a.window_s > to) {
    std::ostringstream why;
    why << "--window " << a.window_s << " s ends at t = " << from + a.window_s << " s, after the log's last point (t = "
        << to << " s): CIL here is measured on the logged curve, so the window must end within it (at most "
        << to - from << " s after the warm-up, or leave --window out)";
    throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument, why.str());
  }
}

// replay and evaluate score the logged curve, so their run ends where the log does: a curves
// file's total_steps elsewhere is said to be set aside (evaluate's every-E baseline used it while
// the rest did not).
void warn_if_total_set_aside(Json& r, const mp::LossLog& log) {
  if (!log.total_steps || *log.total_steps == log.points.back().step) return;
  r["warnings"].push_back("the log's total_steps " + std::to_string(*log.total_steps) + " is set aside: the run is scored " +
                          "on the logged curve, which ends at step " + std::to_string(log.points.back().step));
}

// A regret for people: rounding leaves -0.000000 for a schedule that ties the optimum.
std::string regret_text(double pct) {
  char b[48];
  std::snprintf(b, sizeof b, "%.6f %%", std::abs(pct) < 5e-7 ? 0.0 : pct);
  return b;
}

// Regret as a share of the achievable gain, or null where there is none to speak of. The gain is
// compared with the size of the no-publish CIL: losses (and so CIL) may be negative.
Json regret_pct_json(double cil, double best, double none) {
  const double gain = none - best;
  if (!(gain > 1e-12 * std::abs(none))) return Json();
  // Nothing beats the optimum: below 0 is the rounding of two sums of the same schedule's CIL
  // (-9e-13 % was printed), shown as the tie it is.
  const double pct = 100.0 * (cil - best) / gain;
  return Json(pct < 0 && pct > -1e-6 ? 0.0 : pct);
}


Json schedule_json(const std::vector<std::int64_t>& steps, double cil, double stall_s) {
  return Json{{"publish_steps", steps}, {"predicted_cil", cil}, {"slowdown_s", stall_s * static_cast<double>(steps.size())}};
}

// `warnings` gets what reading the files said (a --reference whose time_s was bridged).
mp::ForecastOptions forecast_options(const CommonArgs& a, std::int64_t total_steps, std::vector<std::string>& warnings) {
  mp::ForecastOptions fo;
  fo.total_steps = total_steps;
  if (!a.reference_path.empty()) fo.reference = load_reference(a.reference_path, warnings);
  if (!a.lr_schedule_path.empty()) fo.lr_schedule = load_lr_schedule(a.lr_schedule_path);
  if (!std::isnan(a.anneal_drop)) {
    if (a.lr_schedule_path.empty())
      throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument, "--anneal-drop is the drop of a learning-rate anneal: it needs --lr-schedule");
    if (!std::isfinite(a.anneal_drop) || a.anneal_drop < 0)
      throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument, "--anneal-drop must be finite and >= 0, got " + std::to_string(a.anneal_drop));
    fo.anneal_drop = a.anneal_drop;
  }
  if (a.loss_floor == std::numeric_limits<double>::infinity())
    throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument, "--loss-floor must be a number or none, got inf");
  fo.loss_floor = a.loss_floor;
  return fo;
}

// Whether the schedule anneals within the run: its rate falls below where it is at step 0 by the
// run's end, the forecaster's own test (ProgressAxis::anneals_after). A rate that is constant,
// climbs only, or peaks or falls after the run's end gives --anneal-drop nothing to act on.
bool anneals_within(const mp::LrSchedule& s, std::int64_t total_steps) {
  return mp::detail::ProgressAxis(total_steps, s).anneals_after(0);
}

// The forecaster sets a schedule aside, and says so only in its note, while the log shows too
// little of the decay to measure what the anneal is worth, and a reference none of whose
// families it can fit: either, given on the command line, would otherwise go unused without a word.
void warn_of_inputs_set_aside(Json& r, const CommonArgs& a, const mp::ForecastOptions& fo, const std::string& note) {
  if (!a.reference_path.empty() && note.find("reference not used") != std::string::npos) {
    r["warnings"].push_back("--reference is not used: no reference family could be fitted sanely to the log's points "
                            "(a reference of another kind of run?)");
  }
  if (a.lr_schedule_path.empty()) return;
  // Said whether or not the forecaster set it aside: advice to give --anneal-drop could not help.
  if (!anneals_within(*fo.lr_schedule, fo.total_steps)) {
    r["warnings"].push_back("--lr-schedule has no anneal within the run: its rate never falls below its peak between the "
                            "peak and the run's end " + std::to_string(fo.total_steps) +
                            " (a schedule of another run?), so no --anneal-drop can change the forecast");
    return;
  }
  if (note.find("lr_schedule not used") == std::string::npos) return;
  r["warnings"].push_back("--lr-schedule is not used: the log up to the forecast holds too little of the rate's decay to measure "
                          "the loss drop it brings; give --anneal-drop (e.g. measured on an earlier run with this schedule)");
}

// A fixed-rule baseline under --max-slowdown: its first publishes that fit under the cap, as the
// VIPER baselines keep to it (viper_rules.cpp), so that every schedule reported is one the run
// could have made and their CILs compare.
std::vector<std::int64_t> within_slowdown(std::vector<std::int64_t> steps, const mp::PublishCosts& costs) {
  steps.resize(mp::publishes_allowed(costs, steps.size()));
  return steps;
}

Json baselines_json(const mp::Trajectory& truth_or_forecast, std::size_t w, const mp::PublishCosts& costs,
                    std::int64_t epoch_steps, const mp::Trajectory& viper_curve) {
  Json b = Json::object();
  auto add = [&](const std::string& name, std::vector<std::int64_t> steps) {
    steps = mp::snap_to_candidates(steps, truth_or_forecast, w);
    b[name] = schedule_json(steps, mp::evaluate_cil(truth_or_forecast, w, costs, steps), costs.stall_s);
  };
  add("every_candidate", within_slowdown(mp::every_candidate_schedule(truth_or_forecast, w), costs));
  add("every_e_steps", within_slowdown(mp::every_n_steps_schedule(truth_or_forecast, w, epoch_steps), costs));
  add("viper_fixed_interval", mp::fixed_interval_schedule(viper_curve, w, costs));
  add("viper_threshold", mp::threshold_schedule(viper_curve, w, costs));
  return b;
}


// CIL is the request rate times a loss integral over seconds, so a huge rate (or loss, or window)
// overflows a double; every schedule then scores inf and every regret NaN, which would read as a
// result. Refused instead, naming the rate: the schedules do not depend on it, only the CIL's scale.
void require_finite_cils(const Json& r, const CommonArgs& a) {
  // JSON has no infinity (nlohmann writes null): --publish-cost times the publishes overflowed.
  std::vector<const Json*> slowdowns;
  if (r.contains("slowdown_s")) slowdowns.push_back(&r.at("slowdown_s"));
  if (r.contains("optimal")) slowdowns.push_back(&r.at("optimal").at("slowdown_s"));
  for (const auto& b : r.at("baselines")) slowdowns.push_back(&b.at("slowdown_s"));
  for (const Json* s : slowdowns) {
    if (s->is_number() && std::isfinite(s->get<double>())) continue;
    std::ostringstream why;
    why << "--publish-cost " << a.publish_cost_s << " s times a schedule's publishes overflows a double: give a "
        << "publish cost in seconds of training";
    throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument, why.str());
  }
  std::vector<const Json*> cils = {&r.at("predicted_cil")};
  if (r.contains("expected_cil")) cils.push_back(&r.at("expected_cil"));
  if (r.contains("no_publish_cil")) cils.push_back(&r.at("no_publish_cil"));
  if (r.contains("optimal")) cils.push_back(&r.at("optimal").at("predicted_cil"));
  for (const auto& b : r.at("baselines")) cils.push_back(&b.at("predicted_cil"));
  for (const Json* c : cils) {
    // A CIL below the smallest normal double has lost digits (a rate of 5e-324 moved regrets by
    // half a point): refused like an overflow, the other way.
    if (std::fpclassify(c->get<double>()) == FP_SUBNORMAL) {
      std::ostringstream why;
      why << "the CIL underflows a double (" << c->get<double>() << ") with --request-rate " << a.request_rate
          << ", losing digits: the schedules do not depend on the rate, so give a larger one (1 scores CIL per request)";
      throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument, why.str());
    }
    if (std::isfinite(c->get<double>())) continue;
    std::ostringstream why;
    why << "the CIL overflows a double (" << c->get<double>() << ")";
    // The window multiplies as the rate does: a window of 1e308 s overflowed at any rate, and the
    // advice to lower a rate of 1e-100 could not help.
    if (!std::isnan(a.window_s)) {
      why << " over --window " << a.window_s << " s with --request-rate " << a.request_rate
          << ": CIL is the rate times the integral of the served loss over the window, so give a shorter window, "
             "or a smaller rate (the schedules do not depend on it), or rescale the losses";
    } else {
      why << " with --request-rate " << a.request_rate
          << ": CIL is the rate times the integral of the served loss over the window, and the schedules do not depend "
             "on the rate, so give a smaller one (1 scores CIL per request), or rescale the losses";
    }
    throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument, why.str());
  }
}

}  // namespace

Json run_plan(const CommonArgs& a) {
  check_costs(a);
  const auto log = load_log(a, 2);
  std::vector<mp::CurvePoint> prefix = log.points;
  if (a.warmup_step) prefix.resize(warmup_index_of(log, *a.warmup_step) + 1);
  if (prefix.size() < 2) throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument, "too few points before the warm-up step (need at least 2)");
  // The run's end: the option, else the curves file's total_steps, else, when --warmup-steps cut
  // the log, where the log ends (a finished run planned as if from its warm-up, to set beside
  // replay and evaluate on the same log).
  std::int64_t total = 0;
  std::string total_from;
  if (a.total_steps) {
    total = *a.total_steps;
    total_from = "--total-steps";
  } else if (log.total_steps) {
    total = *log.total_steps;
    total_from = "the log's total_steps";
  } else if (a.warmup_step) {
    total = log.points.back().step;
    total_from = "the log's last step";
  }
  if (total <= 0) throw UsageError("--total-steps is required (the log does not say, and without --warmup-steps the whole log is the warm-up)");
  if (total <= prefix.back().step) {
    // Named by where each number came from: with neither option given, the log simply reaches
    // the run's end, and nothing is left to plan.
    const std::string end = a.total_steps ? "--total-steps " + std::to_string(total)
                                          : "the run's end " + std::to_string(total) + " (" + total_from + ")";
    const std::string from = a.warmup_step ? "the warm-up step " + std::to_string(prefix.back().step)
                                           : "the log's last step " + std::to_string(prefix.back().step) +
                                                 " (no --warmup-steps: the whole log is the warm-up)";
    // The hint names what is left to change: the warm-up when it was the whole log, else the end.
    const std::string give = a.warmup_step ? (a.total_steps ? "a --total-steps after the warm-up" : "--total-steps beyond the log's")
                                           : "--warmup-steps";
    throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument,
                           "nothing to plan: " + end + " does not come after " + from + "; plan forecasts from the warm-up on (give " +
                               give + ", or replay or evaluate a finished run)");
  }
  const auto costs = costs_of(a);
  std::vector<std::string> warnings = log.warnings;
  const auto fo = forecast_options(a, total, warnings);
  // The library's plan from a prefix, which Python's modelcast.predictor.plan calls too.
  const auto planned_prefix = mp::plan_prefix(prefix, fo, costs);
  const auto& point_forecast = planned_prefix.point_forecast;
  const auto& hedged = planned_prefix.hedged;
  const auto& forecast = hedged.forecast;
  const auto& plan = planned_prefix.plan;
  const auto viper = mp::forecast_viper(prefix, fo);
  const auto planned = mp::extend_with_forecast(prefix, forecast);
  const auto viper_curve = mp::extend_with_forecast(prefix, viper);
  const std::size_t w = prefix.size() - 1;

  Json r;
  r["command"] = "plan";
  if (!warnings.empty()) r["warnings"] = warnings;
  warn_of_inputs_set_aside(r, a, fo, point_forecast.note);
  r["warmup_step"] = prefix.back().step;
  r["total_steps"] = total;
  r["total_steps_from"] = total_from;
  r["publish_steps"] = plan.publish_steps;
  r["cil_window"] = cil_window_json(planned, w, costs);
  // On the forecast's own time axis, like the baselines; expected_cil averages the time scenarios.
  r["predicted_cil"] = mp::evaluate_cil(planned, w, costs, plan.publish_steps);
  r["expected_cil"] = plan.cil;
  r["slowdown_s"] = plan.slowdown_s;
  r["baselines"] = baselines_json(planned, w, costs, a.epoch_steps.value_or(std::max<std::int64_t>(1, total / 10)), viper_curve);
  Json members = Json::array();
  for (const auto& m : forecast.members)
    members.push_back({{"family", m.family}, {"weight", m.weight}, {"backtest_rmse", std::isfinite(m.backtest_rmse) ? Json(m.backtest_rmse) : Json()}});
  const auto spread = mp::regret_spread(prefix, w, hedged, costs, plan.publish_steps);
  // A scenario is a (loss, time) pair here, as regret_spread weighs them; the text counts the same.
  r["expected_regret"] = {{"expected_pct", spread.expected_pct}, {"p10_pct", spread.p10_pct}, {"p50_pct", spread.p50_pct},
                          {"p90_pct", spread.p90_pct}, {"scenarios_with_gain", spread.scenarios},
                          {"gain_probability", spread.gain_probability}, {"scenarios", spread.pairs},
                          {"loss_scenarios", hedged.scenarios.size()}};
  const auto& choice = planned_prefix.choice;
  r["choice"] = {{"picked", choice.picked},
                 {"candidate", {{"publish_steps", choice.candidate}, {"expected_cil", choice.candidate_cil}}},
                 {"best_evenly_spaced", {{"publish_steps", choice.best_evenly_spaced},
                                         {"expected_cil", choice.best_evenly_spaced_cil}}},
                 {"expected_margin_pct", choice.expected_margin_pct},
                 {"win_probability", choice.win_probability},
                 {"required_confidence", choice.required_confidence},
                 {"reason", choice.reason}};
  Json time_scenarios = Json::array();
  for (const auto& t : hedged.time_scenarios)
    time_scenarios.push_back({{"kind", t.kind}, {"weight", t.weight}, {"end_time_s", t.time_s.empty() ? Json() : Json(t.time_s.back())}});
  r["time_scenarios"] = time_scenarios;
  r["forecast"] = {{"steps", forecast.steps}, {"loss", forecast.loss}, {"point_loss", point_forecast.loss},
                   {"lower", forecast.lower}, {"upper", forecast.upper},
                   {"time_s", forecast.time_s}, {"members", members}, {"fallback", forecast.fallback}, {"note", forecast.note}};
  if (forecast.fallback) r["warning"] = "forecast fell back to a conservative curve: " + forecast.note;
  require_finite_cils(r, a);
  if (!a.plot_path.empty()) {
    PlotData d;
    d.title = "modelcast-tune plan: " + (log.run.empty() ? a.log_path : log.run) + ", warm-up step " + std::to_string(prefix.back().step);
    d.forecast.x.push_back(prefix.back().time_s);
    d.forecast.y.push_back(prefix.back().loss);
    d.band_lower = d.band_upper = d.forecast;
    for (std::size_t i = 0; i < forecast.steps.size(); ++i) {
      const double t = planned.time_s[w + 1 + i];
      d.forecast.x.push_back(t), d.forecast.y.push_back(forecast.loss[i]);
      d.band_lower.x.push_back(t), d.band_lower.y.push_back(forecast.lower[i]);
      d.band_upper.x.push_back(t), d.band_upper.y.push_back(forecast.upper[i]);
    }
    write_schedule_plot(std::move(d), prefix, planned, w, costs, plan.publish_steps, a.plot_path);
    r["plot"] = a.plot_path;
  }
  return r;
}

Json run_replay(const CommonArgs& a) {
  check_costs(a);
  if (!a.warmup_step) throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument, "--warmup-steps is required");
  const auto log = load_log(a, 3);
  const std::size_t w = warmup_index_of(log, *a.warmup_step);
  if (w + 1 >= log.points.size()) throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument, "nothing logged after the warm-up step");
  if (w < 1) throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument, "too few points up to the warm-up step (need at least 2)");
  check_total_within_log(a, log, w);
  const std::int64_t total = log.points.back().step;
  const auto costs = costs_of(a);
  mp::OnlineOptions oo;
  std::vector<std::string> warnings = log.warnings;
  oo.forecast = forecast_options(a, total, warnings);
  oo.costs = costs;
  oo.warmup_step = log.points[w].step;
  mp::OnlineScheduler scheduler(oo);
  ProgressMeter progress(a.progress, "replay", log.points.size());
  std::size_t seen = 0;
  for (const auto& p : log.points) {
    progress.update(seen++);
    // The producer's clock includes the stalls of the publishes made so far.
    const double wall = p.time_s + costs.stall_s * static_cast<double>(scheduler.published_steps().size());
    scheduler.observe(p.step, p.loss, wall);
    scheduler.should_publish(p.step);
  }
  progress.update(seen);
  const auto truth = mp::trajectory_of(log.points);
  const auto& steps = scheduler.published_steps();
  const double cil = mp::evaluate_cil(truth, w, costs, steps);
  const auto best = mp::plan_in_hindsight(truth, w, costs);
  const double none = mp::evaluate_cil(truth, w, costs, {});
  const std::vector<mp::CurvePoint> prefix(log.points.begin(), log.points.begin() + static_cast<std::ptrdiff_t>(w + 1));
  const auto viper_curve = mp::extend_with_forecast(prefix, mp::forecast_viper(prefix, oo.forecast));

  Json r;
  r["command"] = "replay";
  if (!warnings.empty()) r["warnings"] = warnings;
  warn_if_total_set_aside(r, log);
  warn_of_inputs_set_aside(r, a, oo.forecast, scheduler.last_forecast().note);
  r["warmup_step"] = log.points[w].step;
  r["publish_steps"] = steps;
  r["cil_window"] = cil_window_json(truth, w, costs);
  r["scheduler"] = {{"fits", scheduler.stats().fits}, {"band_refits", scheduler.stats().band_refits},
                    {"plans", scheduler.stats().plans}};
  r["predicted_cil"] = cil;  // the log is the true curve: this is the schedule's actual CIL
  r["slowdown_s"] = costs.stall_s * static_cast<double>(steps.size());
  r["optimal"] = schedule_json(best.publish_steps, best.cil, costs.stall_s);
  r["no_publish_cil"] = none;
  r["regret_pct"] = regret_pct_json(cil, best.cil, none);
  r["baselines"] = baselines_json(truth, w, costs, a.epoch_steps.value_or(std::max<std::int64_t>(1, total / 10)), viper_curve);
  require_finite_cils(r, a);
  if (!a.plot_path.empty()) {
    PlotData d;
    d.title = "modelcast-tune replay: " + (log.run.empty() ? a.log_path : log.run);
    write_schedule_plot(std::move(d), log.points, truth, w, costs, steps, a.plot_path);
    r["plot"] = a.plot_path;
  }
  return r;
}

Json run_evaluate(const CommonArgs& a, const std::vector<std::int64_t>& publish_steps) {
  check_costs(a);
  if (!a.warmup_step) throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument, "--warmup-steps is required");
  const auto log = load_log(a, 2);
  const std::size_t w = warmup_index_of(log, *a.warmup_step);
  check_total_within_log(a, log, w);
  const auto truth = mp::trajectory_of(log.points);
  const auto costs = costs_of(a);
  // The optimum and the baselines keep to the cap, so a schedule over it would be scored against
  // schedules it was not compared fairly with (a negative regret): refused, saying what fits.
  if (const std::size_t fit = mp::publishes_allowed(costs, publish_steps.size()); fit < publish_steps.size()) {
    std::ostringstream why;
    why << "--publish-steps: " << publish_steps.size() << " publishes stall training "
        << costs.stall_s * static_cast<double>(publish_steps.size()) << " s, over --max-slowdown " << costs.max_slowdown_s
        << " s (at --publish-cost " << costs.stall_s << " s, " << fit << " fit)";
    throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument, why.str());
  }
  const double cil = mp::evaluate_cil(truth, w, costs, publish_steps);
  const auto best = mp::plan_in_hindsight(truth, w, costs);
  const double none = mp::evaluate_cil(truth, w, costs, {});
  const std::int64_t total = log.points.back().step;
  Json r;
  r["command"] = "evaluate";
  if (!log.warnings.empty()) r["warnings"] = log.warnings;
  warn_if_total_set_aside(r, log);
  r["warmup_step"] = log.points[w].step;
  r["publish_steps"] = publish_steps;
  r["cil_window"] = cil_window_json(truth, w, costs);
  r["predicted_cil"] = cil;  // on the true (logged) curve
  r["slowdown_s"] = costs.stall_s * static_cast<double>(publish_steps.size());
  r["optimal"] = schedule_json(best.publish_steps, best.cil, costs.stall_s);
  r["no_publish_cil"] = none;
  r["regret_pct"] = regret_pct_json(cil, best.cil, none);
  Json b = Json::object();
  const auto every = within_slowdown(mp::every_candidate_schedule(truth, w), costs);
  b["every_candidate"] = schedule_json(every, mp::evaluate_cil(truth, w, costs, every), costs.stall_s);
  const auto e = within_slowdown(mp::every_n_steps_schedule(truth, w, a.epoch_steps.value_or(std::max<std::int64_t>(1, total / 10))), costs);
  b["every_e_steps"] = schedule_json(e, mp::evaluate_cil(truth, w, costs, e), costs.stall_s);
  r["baselines"] = b;
  require_finite_cils(r, a);
  if (!a.plot_path.empty()) {
    PlotData d;
    d.title = "modelcast-tune evaluate: " + (log.run.empty() ? a.log_path : log.run);
    write_schedule_plot(std::move(d), log.points, truth, w, costs, publish_steps, a.plot_path);
    r["plot"] = a.plot_path;
  }
  return r;
}

std::string render_text(const Json& r) {
  std::ostringstream o;
  // Long schedules (a log with a point per step) are abbreviated; --json has them in full.
  auto steps = [](const Json& s) {
    std::string out;
    const std::size_t n = s.size();
    for (std::size_t i = 0; i < n; ++i) {
      if (n > 16 && i == 10) {
        out += ",... (" + std::to_string(n - 13) + " more) ...";
        i = n - 3;
      }
      if (!out.empty() && out.back() != '.') out += ',';
      else if (!out.empty()) out += ' ';
      out += std::to_string(s[i].get<std::int64_t>());
    }
    return out.empty() ? std::string("(none)") : out + " [" + std::to_string(n) + " publishes]";
  };
  const std::string cmd = r["command"];
  const Json& window = r["cil_window"];
  o << cmd << " (warm-up step " << r["warmup_step"].get<std::int64_t>() << "; every CIL below is over ";
  if (window.contains("to_step")) {
    o << "steps " << window["from_step"].get<std::int64_t>() << " to " << window["to_step"].get<std::int64_t>()
      << ", the warm-up to the end of the run)\n";
  } else {
    o << "the --window of " << window["window_s"].get<double>() << " s after the warm-up, t = "
      << window["from_time_s"].get<double>() << " s to " << window["to_time_s"].get<double>() << " s of training)\n";
  }
  if (r.contains("warning")) o << "warning: " << r["warning"].get<std::string>() << "\n";
  const char* cil_label = cmd == "plan" ? "predicted CIL" : "CIL";
  o << "  " << (cmd == "plan" ? "plan" : cmd == "replay" ? "online scheduler" : "schedule") << ": publish at " << steps(r["publish_steps"])
    << "\n    " << cil_label << " " << r["predicted_cil"].get<double>() << ", slowdown " << r["slowdown_s"].get<double>() << " s\n";
  if (r.contains("optimal"))
    o << "  optimal: publish at " << steps(r["optimal"]["publish_steps"]) << "\n    CIL " << r["optimal"]["predicted_cil"].get<double>()
      << "; no publish: " << r["no_publish_cil"].get<double>()
      << (r["regret_pct"].is_null() ? std::string("; no gain achievable") : "; regret " + regret_text(r["regret_pct"].get<double>())) << "\n";
  for (const auto& [name, b] : r["baselines"].items())
    o << "  baseline " << name << ": publish at " << steps(b["publish_steps"]) << "\n    " << cil_label << " "
      << b["predicted_cil"].get<double>() << ", slowdown " << b["slowdown_s"].get<double>() << " s\n";
  if (r.contains("choice")) o << "  why this plan: " << r["choice"]["reason"].get<std::string>() << "\n";
  if (r.contains("time_scenarios") && r["time_scenarios"].size() > 1) {
    o << "  too few intervals to measure the step time: expected CIL " << r["expected_cil"].get<double>() << " over time axes";
    for (const auto& t : r["time_scenarios"]) o << " " << t["kind"].get<std::string>() << " (" << t["weight"].get<double>() << ")";
    o << "\n";
  }
  if (r.contains("expected_regret")) {
    const auto& e = r["expected_regret"];
    o << "  expected regret over the " << e["scenarios_with_gain"].get<std::size_t>() << " of "
      << e["scenarios"].get<std::size_t>() << " forecast scenarios with a gain: " << e["expected_pct"].get<double>()
      << " % of the expected gain (per scenario: p10 " << e["p10_pct"].get<double>() << ", p50 " << e["p50_pct"].get<double>()
      << ", p90 " << e["p90_pct"].get<double>() << ")\n";
  }
  if (r.contains("forecast")) {
    o << "  forecast members:";
    for (const auto& m : r["forecast"]["members"]) o << " " << m["family"].get<std::string>() << "(" << m["weight"].get<double>() << ")";
    o << "\n";
  }
  if (r.contains("plot")) o << "  plot written to " << r["plot"].get<std::string>() << "\n";
  return o.str();
}

}  // namespace modelcast::tune
