// One CSV record (a line of a loss log) split into its fields per RFC 4180, through libcsv:
// quoted fields ("step","loss"), doubled quotes inside them, spaces around unquoted fields
// trimmed. A record does not span lines (loss logs never need it, and line numbers in errors
// stay exact).
#pragma once

#include <cstddef>
#include <cstdint>
#include <istream>
#include <string>
#include <string_view>
#include <vector>

namespace modelcast::predictor {

// Throws CsvError(source, line_no) for a malformed record (an unterminated quote, a quote
// inside an unquoted field), quoting the start of the line with control and non-ASCII bytes escaped.
std::vector<std::string> split_csv_record(const std::string& line, const std::string& source, std::size_t line_no);

// Longest line a CSV input of the predictor may have: a loss log's line is tens of bytes, and
// without a bound /dev/zero (or a file with no newline) was read into memory until it ran out.
inline constexpr std::size_t kMaxCsvLineBytes = std::size_t{64} << 20;

// std::getline with that bound: the next line (without its LF) into `line`; false at the end of
// the input. Throws CsvError(source, line_no) for a line past kMaxCsvLineBytes.
bool read_csv_line(std::istream& in, std::string& line, const std::string& source, std::size_t line_no);

// What every CSV input of the predictor (loss logs, references, learning-rate schedules) does
// with its first line, so that they accept the same files.
struct FirstRecord {
  std::vector<std::string> fields;
  std::size_t line_no = 0;  // 1-based
  bool header = false;      // the first field is not a number: a header, columns by name
};
// The first non-blank line, split. A UTF-8 byte order mark before it (spreadsheet exports write
// one) is not part of the first field. Throws CsvError for an empty input, for a gzip file
// (its magic bytes) rather than a malformed record of compressed bytes, for lines that end in CR
// alone, and for a header that names a column twice.
FirstRecord read_first_record(std::istream& in, const std::string& source);

// Index of a header's column named `name`, in any case ("Step", "LR"); -1 when there is none.
int find_column(const std::vector<std::string>& header, std::string_view name);

// A field as every CSV input of the predictor reads a number: the whole field, decimal
// (std::from_chars), one leading '+' allowed. false for anything else, an empty field included.
bool parse_csv_double(const std::string& field, double& out);
// A step: an integer, or a decimal or exponent form of one below 9e15 ("125.0", "1e12"), which a
// double holds exactly. false otherwise.
bool parse_csv_integer(const std::string& field, std::int64_t& out);
// Whether `field`, read as the two above read it, is a number past a double's range (1e400) or an
// integer past int64's: what messages say apart from "not a number".
bool csv_double_out_of_range(const std::string& field);
bool csv_integer_out_of_range(const std::string& field);

}  // namespace modelcast::predictor
