// One CSV record (a line of a loss log) split into its fields per RFC 4180, through libcsv:
// quoted fields ("step","loss"), doubled quotes inside them, spaces around unquoted fields
// trimmed. A record does not span lines (loss logs never need it, and line numbers in errors
// stay exact).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace modelcast::predictor {

// Throws CsvError(source, line_no) for a malformed record (an unterminated quote, a quote
// inside an unquoted field).
std::vector<std::string> split_csv_record(const std::string& line, const std::string& source, std::size_t line_no);

}  // namespace modelcast::predictor
