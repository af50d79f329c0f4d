// Loss-log parsing with line-numbered errors. Two formats, told apart by the header:
//   plain:  step,loss[,time_s]       (header optional; columns by name when present)
//   curves: run,track,record,step,total_steps,<loss column>,train_time_s
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "common/shown_text.h"
#include "modelcast/predictor_csv.h"
#include "csv_file.h"
#include "csv_record.h"

namespace modelcast::predictor {
namespace {

struct Columns {
  int step = -1, loss = -1, time = -1, run = -1, track = -1, record = -1, total = -1;
};

// A loss column that is the step, time or another column the reader uses for something else
// (--loss-col time_s) would be planned on as a loss without a word: refused, naming both roles.
void refuse_loss_column_of_another_role(const Columns& col, const std::string& source, std::size_t line_no,
                                        const std::string& loss_name) {
  for (auto [column, role] : {std::pair{col.step, "step"}, std::pair{col.time, "time"}, std::pair{col.run, "run"},
                              std::pair{col.track, "track"}, std::pair{col.record, "record"},
                              std::pair{col.total, "total_steps"}}) {
    if (column >= 0 && column == col.loss)
      throw CsvError(source, line_no, "the loss column " + shown_text(loss_name) + " is the log's " + role +
                                          " column; name a column of losses");
  }
}

struct RowReader {
  const std::string& source;
  std::size_t line_no;
  const std::vector<std::string>& fields;

  // A field as quoted back in an error: at most 40 bytes of it, anything but printable ASCII as
  // \xNN (a NUL byte would end the message there: what() is a C string).
  static std::string shown(const std::string& field) {
    return shown_text(field) + (field.size() > 40 ? " (" + std::to_string(field.size()) + " bytes)" : "");
  }
  const std::string& at(int column, const char* name) const {
    if (column >= static_cast<int>(fields.size()))
      throw CsvError(source, line_no, std::string("missing value for column '") + name + "'");
    return fields[static_cast<std::size_t>(column)];
  }
  std::int64_t integer(int column, const char* name) const {
    std::int64_t v = 0;
    if (!parse_csv_integer(at(column, name), v)) {
      double d = 0;  // "1e16" is an integer, but one a double may hold rounded
      const bool large = parse_csv_double(at(column, name), d) && std::isfinite(d) && d == std::floor(d);
      throw CsvError(source, line_no, std::string("column '") + name + "' is not an integer" +
                                          (large ? " written exactly (past 9e15, a decimal or an exponent may be rounded: write its digits)" : "") + ": " +
                                          shown(at(column, name)));
    }
    return v;
  }
  double number(int column, const char* name) const {
    double v = 0;
    if (!parse_csv_double(at(column, name), v)) {
      const std::string& text = at(column, name);
      const bool range = csv_double_out_of_range(text);
      throw CsvError(source, line_no, std::string("column '") + name + (range ? "' is out of a double's range: " : "' is not a number: ") +
                                          shown(text));
    }
    if (!std::isfinite(v))
      throw CsvError(source, line_no, std::string("column '") + name + "' is not finite: " + shown(at(column, name)));
    return v;
  }
};

// Both readers take a row's values by these rules, so a file one refuses the other does not take.
// A row with more fields than the header (or the first row) has is refused rather than read by
// position: "625,3,913,224.1" (a decimal comma) would silently be loss 3 at time 913.
void refuse_extra_fields(const std::vector<std::string>& fields, std::size_t width, bool header,
                         const std::string& source, std::size_t line_no) {
  if (fields.size() <= width) return;
  throw CsvError(source, line_no, "expected " + std::to_string(width) + " fields (as " +
                                      (header ? "the header names" : "the first row has") + "), got " +
                                      std::to_string(fields.size()) +
                                      ": a decimal comma, or a delimiter inside an unquoted field?");
}

std::int64_t step_of(const RowReader& row, int column) {
  const std::int64_t step = row.integer(column, "step");
  if (step > kMaxCurveStep || step < -kMaxCurveStep)
    throw CsvError(row.source, row.line_no, "step " + std::to_string(step) + " is beyond 2^53, the largest step the predictor takes");
  return step;
}

double time_of(const RowReader& row, int column, const char* name) {
  const double time_s = row.number(column, name);
  if (time_s < 0) {
    throw CsvError(row.source, row.line_no, std::string("column '") + name + "' is negative (" +
                                                RowReader::shown(row.at(column, name)) + "): it is seconds of training since it started");
  }
  if (time_s > kMaxCurveValue) {
    throw CsvError(row.source, row.line_no, std::string("column '") + name + "' is beyond 1e100 (" +
                                                RowReader::shown(row.at(column, name)) + "): it is seconds of training since it started");
  }
  return time_s;
}

double loss_of(const RowReader& row, int column, const char* name) {
  const double loss = row.number(column, name);
  if (std::abs(loss) > kMaxCurveValue) {
    throw CsvError(row.source, row.line_no, std::string("column '") + name + "' is beyond +-1e100 (" +
                                                RowReader::shown(row.at(column, name)) +
                                                "): the predictor's fits square losses; rescale the loss");
  }
  return loss;
}

// A run's total_steps, the same on each of its rows: a value that changed part-way was taken from
// the last row without a word.
void set_total_steps(LossLog& log, std::int64_t total, const std::string& source, std::size_t line_no) {
  if (log.total_steps && *log.total_steps != total) {
    throw CsvError(source, line_no, "total_steps " + std::to_string(total) + " differs from the run's earlier rows' " +
                                        std::to_string(*log.total_steps) + " (a run has one planned length)");
  }
  log.total_steps = total;
}

// A curves row's total_steps: the run's planned length, within which each of its steps lies.
std::int64_t total_steps_of(const RowReader& row, int column, std::int64_t step) {
  const std::int64_t total = row.integer(column, "total_steps");
  if (total <= 0 || total > kMaxCurveStep) {
    throw CsvError(row.source, row.line_no, "total_steps " + std::to_string(total) + " is not in [1, 2^53]");
  }
  if (step > total) {
    throw CsvError(row.source, row.line_no, "step " + std::to_string(step) + " is past the run's total_steps " + std::to_string(total));
  }
  return total;
}

// time_offset carries the shift applied after a timer restart to the following rows.
void append_point(LossLog& log, const std::string& source, std::size_t line_no, CurvePoint p, double& time_offset) {
  if (!log.points.empty() && p.step <= log.points.back().step) {
    // A run logged twice into one file (a restart under the same id) goes back to its first step.
    const std::string again = p.step == log.points.front().step && !log.run.empty()
                                  ? " (run " + shown_text(log.run) + " starts over here: the file holds it more than once)"
                                  : "";
    throw CsvError(source, line_no, "steps not increasing: step " + std::to_string(p.step) + " follows step " +
                                        std::to_string(log.points.back().step) + again);
  }
  p.time_s += time_offset;
  if (!log.points.empty() && std::isfinite(p.time_s) && p.time_s < log.points.back().time_s) {
    // Timer restarted (e.g. warm-up/compilation steps excluded from timing): continue the clock
    // at the previous point's time plus the previous step time.
    const auto& prev = log.points.back();
    const double step_time = log.points.size() >= 2
        ? (prev.time_s - log.points[log.points.size() - 2].time_s) /
              (static_cast<double>(prev.step) - static_cast<double>(log.points[log.points.size() - 2].step))
        : 0.0;
    // Differences in double: steps near the ends of int64 (a hostile or corrupt log) would
    // overflow as integers.
    const double shift =
        prev.time_s + step_time * (static_cast<double>(p.step) - static_cast<double>(prev.step)) - p.time_s;
    time_offset += shift;
    p.time_s += shift;
    if (!(p.time_s <= kMaxCurveValue)) {
      throw CsvError(source, line_no, "time_s decreases (timer restart?), and continuing the clock from the previous rows "
                                      "takes it beyond 1e100 s: check the time_s column");
    }
    log.warnings.push_back(source + ":" + std::to_string(line_no) + ": time_s decreases (timer restart?); later times shifted by " +
                           std::to_string(shift) + " s");
  }
  log.points.push_back(p);
}

}  // namespace

namespace {
// "source:line: message", or "source: message" for what concerns the whole file (line 0).
std::string located(const std::string& source, std::size_t line, const std::string& message) {
  std::string out = source;
  if (line > 0) out.append(":").append(std::to_string(line));
  return out.append(": ").append(message);
}
}  // namespace

CsvError::CsvError(const std::string& source, std::size_t line, const std::string& message)
    : Error(ErrorCode::kInvalidArgument, located(source, line, message)), line_(line) {}

namespace {
// Why a header without a 'step' column may be one: another delimiter, or a comment line first.
std::string header_hint(const std::vector<std::string>& header) {
  if (header.size() == 1 && header[0].find(';') != std::string::npos)
    return "; the header is one field holding ';': separate the fields with commas";
  if (header.size() == 1 && header[0].find('\t') != std::string::npos)
    return "; the header is one field holding tabs: separate the fields with commas";
  if (!header.empty() && header[0].rfind('#', 0) == 0) return "; the first line starts with '#': the header must be the first line (comments are not read)";
  return "";
}
}  // namespace

LossLog read_loss_log(std::istream& in, const std::string& source, const CsvOptions& options) {
  std::string line;
  std::vector<std::string> header;
  // First non-empty line: header or (plain, headerless) data.
  auto first_record = read_first_record(in, source);
  const std::vector<std::string> first = std::move(first_record.fields);
  std::size_t line_no = first_record.line_no;
  const bool has_header = first_record.header;
  LossLog log;
  Columns col;
  bool curves = false;
  std::string loss_name = "loss";
  std::size_t pending_line = 0;  // headerless: the first line is data
  if (has_header) {
    header = first;
    curves = find_column(header, "run") >= 0 && find_column(header, "total_steps") >= 0;
    loss_name = !options.loss_column.empty() ? options.loss_column : curves ? "val_loss" : "loss";
    if (curves) {
      col.run = find_column(header, "run");
      col.track = find_column(header, "track");
      col.record = find_column(header, "record");
      col.total = find_column(header, "total_steps");
      col.step = find_column(header, "step");
      col.loss = find_column(header, loss_name);
      col.time = find_column(header, "train_time_s");
      if (col.step < 0) throw CsvError(source, line_no, "missing column 'step'");
      if (col.loss < 0) throw CsvError(source, line_no, "missing loss column " + shown_text(loss_name));
      refuse_loss_column_of_another_role(col, source, line_no, loss_name);
      if (options.run.empty()) {
        throw CsvError(source, line_no, "a curves file (it has run and total_steps columns): choose one of its runs "
                                          "(modelcast-tune's --run ID, Python's run=ID)");
      }
    } else {
      col.step = find_column(header, "step");
      col.loss = find_column(header, loss_name);
      col.time = find_column(header, "time_s");
      if (col.step < 0) throw CsvError(source, line_no, "missing column 'step' (expected step,loss[,time_s])" + header_hint(header));
      if (col.loss < 0) {
        std::string found;
        for (const auto& name : header) found += (found.empty() ? "" : ",") + printable_text(name, 40);
        throw CsvError(source, line_no, "missing column " + shown_text(loss_name) + " (expected step," +
                                            printable_text(loss_name, 40) + "[,time_s]; the header is " +
                                            printable_text(found, 200) +
                                            "): name the loss column with --loss-col (Python: loss_column=)");
      }
      refuse_loss_column_of_another_role(col, source, line_no, loss_name);
    }
  } else {
    // Reading the second column instead would score a loss the caller did not ask for.
    if (!options.loss_column.empty())
      throw CsvError(source, line_no, "a loss column (" + shown_text(options.loss_column) +
                                          ") names a header column; this log has no header (its columns are step,loss[,time_s])");
    if (first.size() < 2) throw CsvError(source, line_no, "expected step,loss[,time_s], got " + std::to_string(first.size()) + " column(s)");
    col.step = 0;
    col.loss = 1;
    col.time = first.size() >= 3 ? 2 : -1;
    pending_line = line_no;
  }
  if (!curves && !options.run.empty()) {
    throw CsvError(source, line_no, "a run id (" + shown_text(options.run) +
                                        ") selects a run of a curves file (with run and total_steps columns); "
                                        "this is a single run's step,loss[,time_s] log");
  }
  log.has_time = col.time >= 0;
  bool found_run = false;
  std::size_t first_run_line = 0, left_run_line = 0;  // where the run's rows begin, and end
  std::vector<std::string> other_runs;  // for the message when the run is not in the file
  double time_offset = 0.0;
  std::size_t last_line = line_no;
  auto handle = [&](const std::vector<std::string>& fields, std::size_t at_line) {
    refuse_extra_fields(fields, first.size(), has_header, source, at_line);
    RowReader row{source, at_line, fields};
    if (curves) {
      const auto& run = row.at(col.run, "run");
      if (run != options.run) {
        // The whole file is read: rows of the run after another run's would be lost unread.
        if (found_run && left_run_line == 0) left_run_line = at_line;
        if (!found_run && other_runs.size() < 8 && std::find(other_runs.begin(), other_runs.end(), run) == other_runs.end())
          other_runs.push_back(run);
        return;
      }
      if (left_run_line != 0) {
        throw CsvError(source, at_line, "rows of run " + shown_text(options.run) + " are not together: the run also has rows from line " +
                                            std::to_string(first_run_line) + ", with other runs between (from line " +
                                            std::to_string(left_run_line) + ")");
      }
      if (!found_run) first_run_line = at_line;
      found_run = true;
      log.run = options.run;
      if (col.track >= 0) log.track = row.at(col.track, "track");
      if (col.record >= 0) log.record = row.at(col.record, "record");
    }
    CurvePoint p;
    p.step = step_of(row, col.step);
    if (curves) set_total_steps(log, total_steps_of(row, col.total, p.step), source, at_line);
    p.loss = loss_of(row, col.loss, loss_name.c_str());
    if (col.time >= 0) p.time_s = time_of(row, col.time, curves ? "train_time_s" : "time_s");
    append_point(log, source, at_line, p, time_offset);
  };
  if (pending_line) handle(first, pending_line);
  while (read_csv_line(in, line, source, line_no + 1)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    last_line = line_no;
    handle(split_csv_record(line, source, line_no), line_no);
  }
  if (curves && !found_run) {
    std::string runs;
    for (const auto& r : other_runs) runs += (runs.empty() ? "" : ", ") + shown_text(r);
    throw CsvError(source, last_line, "run " + shown_text(options.run) + " not found" +
                                          (runs.empty() ? std::string(" (the file has no rows)")
                                                        : " (the file's runs include " + runs + ")"));
  }
  if (log.points.size() < options.min_points)
    throw CsvError(source, last_line, "too few points: " + std::to_string(log.points.size()) + " (need at least " +
                                          std::to_string(options.min_points) + ")");
  // The curve families are functions of the step itself (a power law in it, say): a log that
  // begins far past step 0, as a fine-tuning or a resumed phase that counts global steps does,
  // is fitted as the flat tail of such a curve, and the same run shifted by an offset gets
  // another forecast. Whether the offset is the run's own history only the caller knows.
  if (log.points.empty()) return log;  // allowed by min_points 0: no point to say anything of
  if (const auto& f = log.points.front(), &b = log.points.back(); f.step > 0 && b.step > f.step && f.step >= 10 * (b.step - f.step))
    log.warnings.push_back(source + ": the log starts at step " + std::to_string(f.step) + ", more than 10 times its own span of " +
                           std::to_string(b.step - f.step) +
                           " steps past step 0; forecasts take the step as the run's progress, so if the run began near step " +
                           std::to_string(f.step) + " (a new phase counting global steps), count its steps from there");
  return log;
}

LossLog read_loss_log_file(const std::string& path, const CsvOptions& options) {
  auto in = open_csv_file(path);
  return read_loss_log(in, path, options);
}

CurveCollection read_curve_collection(std::istream& in, const std::string& source, const std::string& loss_column) {
  std::string line;
  // As read_loss_log reads it: a byte order mark, blank lines before the header, a gzip file.
  auto first_record = read_first_record(in, source);
  std::size_t line_no = first_record.line_no;
  const auto header = std::move(first_record.fields);
  Columns col;
  col.run = find_column(header, "run");
  col.track = find_column(header, "track");
  col.record = find_column(header, "record");
  col.total = find_column(header, "total_steps");
  col.step = find_column(header, "step");
  col.loss = find_column(header, loss_column);
  col.time = find_column(header, "train_time_s");
  for (auto [c, name] : {std::pair{col.run, "run"}, {col.total, "total_steps"}, {col.step, "step"}, {col.time, "train_time_s"}})
    if (c < 0) throw CsvError(source, line_no, std::string("missing column '") + name + "'");
  if (col.loss < 0) throw CsvError(source, line_no, "missing loss column " + shown_text(loss_column));
  refuse_loss_column_of_another_role(col, source, line_no, loss_column);
  CurveCollection out;
  bool current_bad = false;
  std::map<std::string, std::size_t> first_line_of_run;  // rows of one run must be together
  while (read_csv_line(in, line, source, line_no + 1)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const auto fields = split_csv_record(line, source, line_no);
    refuse_extra_fields(fields, header.size(), true, source, line_no);
    RowReader row{source, line_no, fields};
    const auto& run = row.at(col.run, "run");
    if (out.runs.empty() || out.runs.back().run != run) {
      // Read as two runs of one id, each scored apart, before.
      if (auto [seen, fresh] = first_line_of_run.emplace(run, line_no); !fresh) {
        throw CsvError(source, line_no, "rows of run " + shown_text(run) + " are not together: the run also has rows from line " +
                                            std::to_string(seen->second) + ", with other runs between");
      }
      if (current_bad) {
        out.skipped_runs.push_back(out.runs.back().run);
        out.runs.pop_back();
      }
      current_bad = false;
      LossLog log;
      log.run = run;
      log.track = col.track >= 0 ? row.at(col.track, "track") : "";
      log.record = col.record >= 0 ? row.at(col.record, "record") : "";
      log.has_time = true;
      out.runs.push_back(std::move(log));
    }
    if (current_bad) continue;
    CurvePoint p{step_of(row, col.step), loss_of(row, col.loss, loss_column.c_str()), time_of(row, col.time, "train_time_s")};
    auto& log = out.runs.back();
    const std::int64_t total = total_steps_of(row, col.total, p.step);
    if (!log.points.empty() && p.step <= log.points.back().step) {
      current_bad = true;  // concatenated restarts of one run id (skipped, whatever their length)
      continue;
    }
    set_total_steps(log, total, source, line_no);
    log.points.push_back(p);
  }
  if (current_bad && !out.runs.empty()) {
    out.skipped_runs.push_back(out.runs.back().run);
    out.runs.pop_back();
  }
  return out;
}

}  // namespace modelcast::predictor
