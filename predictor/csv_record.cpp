#include "csv_record.h"

#include <csv.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <new>
#include <utility>

#include "common/shown_text.h"
#include "modelcast/predictor_csv.h"

namespace modelcast::predictor {
namespace {

// One line's fields. libcsv ends a record at a CR outside quotes too: fields after one are
// another record on the same line, which taking columns by index dropped without a word.
struct Collector {
  std::vector<std::string> fields;
  bool ended = false;            // a record ended
  bool field_after_end = false;  // and a field followed it
};

void on_field(void* text, std::size_t length, void* data) {
  auto* c = static_cast<Collector*>(data);
  c->field_after_end = c->field_after_end || c->ended;
  c->fields.emplace_back(static_cast<const char*>(text), length);
}

void on_record_end(int, void* data) { static_cast<Collector*>(data)->ended = true; }

class Parser {
 public:
  Parser() {
    if (csv_init(&parser_, CSV_STRICT | CSV_STRICT_FINI) != 0) throw std::bad_alloc();
  }
  Parser(const Parser&) = delete;
  Parser& operator=(const Parser&) = delete;
  ~Parser() { csv_free(&parser_); }
  csv_parser* get() { return &parser_; }

 private:
  csv_parser parser_{};
};

// The start of a line as an error quotes it, at most 80 characters with other than printable
// ASCII escaped: a binary file's line can be megabytes of bytes a terminal would act on.
std::string excerpt(const std::string& line) {
  constexpr std::size_t kShown = 80;
  std::string out;
  std::size_t i = 0;
  for (; i < line.size() && out.size() < kShown; ++i) {
    const auto c = static_cast<unsigned char>(line[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  if (i < line.size()) out += "... (" + std::to_string(line.size()) + " bytes)";
  return out;
}

bool blank(const std::string& line) { return line.find_first_not_of(" \t\r") == std::string::npos; }

}  // namespace

std::vector<std::string> split_csv_record(const std::string& line, const std::string& source, std::size_t line_no) {
  Parser parser;
  Collector collector;
  const bool parsed = csv_parse(parser.get(), line.data(), line.size(), on_field, on_record_end, &collector) == line.size();
  if (!parsed || csv_fini(parser.get(), on_field, on_record_end, &collector) != 0) {
    // Records are read a line at a time: a quoted field that goes on past the line's end (legal
    // in RFC 4180, never in a loss log of numbers) is said to be that, not "error parsing data".
    if (std::count(line.begin(), line.end(), '"') % 2 != 0) {
      throw CsvError(source, line_no, "a quoted field is not closed on its line (a record is one line): " + excerpt(line));
    }
    throw CsvError(source, line_no, std::string("malformed CSV record (") + csv_strerror(csv_error(parser.get())) +
                                        "): " + excerpt(line));
  }
  if (collector.field_after_end) {
    throw CsvError(source, line_no, "a CR inside the line (outside quotes) ends a record there: lines end in LF or CRLF: " +
                                        excerpt(line));
  }
  return std::move(collector.fields);
}

bool read_csv_line(std::istream& in, std::string& line, const std::string& source, std::size_t line_no) {
  line.clear();
  bool any = false;
  char chunk[8192];
  for (;;) {
    in.getline(chunk, sizeof chunk);
    const auto got = static_cast<std::size_t>(in.gcount());
    if (in.bad()) return any;
    if (!in.fail()) {  // a whole line: got counts its LF, unless the input ended first
      line.append(chunk, in.eof() ? got : got - 1);
      return true;
    }
    if (in.eof()) return any || got > 0;  // the input ended before any byte of a line
    // The chunk filled before the LF: the line goes on.
    line.append(chunk, got);
    any = true;
    in.clear();
    if (line.size() > kMaxCsvLineBytes) {
      throw CsvError(source, line_no, "the line is longer than " + std::to_string(kMaxCsvLineBytes >> 20) +
                                          " MiB: not a CSV loss log (a device or a file without line ends?)");
    }
  }
}

FirstRecord read_first_record(std::istream& in, const std::string& source) {
  FirstRecord first;
  std::string line;
  while (read_csv_line(in, line, source, first.line_no + 1)) {
    ++first.line_no;
    if (first.line_no == 1 && line.rfind("\x1f\x8b", 0) == 0)
      throw CsvError(source, 1, "looks gzip-compressed; decompress it first (gunzip)");
    // PowerShell's and Excel's "Unicode text" is UTF-16: read as bytes it is NULs between the
    // letters, which the checks below called a binary file or a missing column.
    // Without a byte-order mark: four printable ASCII characters each with a NUL beside it (a
    // binary file that starts with a small number is not taken for text).
    const auto utf16_without_mark = [&](std::size_t text_at) {
      if (line.size() < 8) return false;
      for (std::size_t i = 0; i < 8; i += 2) {
        const auto c = static_cast<unsigned char>(line[i + text_at]);
        if (line[i + 1 - text_at] != '\0' || c < 0x20 || c >= 0x7f) return false;
      }
      return true;
    };
    if (first.line_no == 1 && (line.rfind("\xFF\xFE", 0) == 0 || line.rfind("\xFE\xFF", 0) == 0 ||
                               utf16_without_mark(0) || utf16_without_mark(1)))
      throw CsvError(source, 1, "is UTF-16 text; convert it to UTF-8 first (iconv -f UTF-16 -t UTF-8)");
    if (first.line_no == 1 && line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);
    if (!blank(line)) break;
  }
  if (first.line_no == 0 || blank(line)) throw CsvError(source, std::max<std::size_t>(first.line_no, 1), "empty file");
  // getline splits at LF only: a file whose lines end in CR alone reads as one long line.
  if (const auto cr = line.find('\r'); cr != std::string::npos && cr + 1 < line.size()) {
    // An executable or archive has CRs and NULs in its first "line": not a Mac text file.
    if (line.find('\0') != std::string::npos)
      throw CsvError(source, first.line_no, "holds NUL bytes and CRs inside a line: not a text CSV file (a binary file?)");
    throw CsvError(source, first.line_no, "lines end in CR alone (classic Mac OS): convert them to LF or CRLF");
  }
  first.fields = split_csv_record(line, source, first.line_no);
  const std::string& f = first.fields.front();
  double probe = 0;
  first.header = !parse_csv_double(f, probe);
  // Columns are found by name: a name twice would read one of them silently.
  for (std::size_t i = 0; first.header && i < first.fields.size(); ++i) {
    const std::string& name = first.fields[i];
    if (name.empty()) continue;
    if (find_column(first.fields, name) != static_cast<int>(i)) {
      throw CsvError(source, first.line_no, "column " + shown_text(name) + " appears twice in the header");
    }
  }
  return first;
}

int find_column(const std::vector<std::string>& header, std::string_view name) {
  auto same = [name](const std::string& column) {
    return column.size() == name.size() &&
           std::equal(column.begin(), column.end(), name.begin(), [](char a, char b) {
             return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
           });
  };
  const auto it = std::find_if(header.begin(), header.end(), same);
  return it == header.end() ? -1 : static_cast<int>(it - header.begin());
}

namespace {

// Where a number's digits start: past one '+' (printf's "%+d", and what Python's float() and
// every spreadsheet read), which std::from_chars does not take. A headerless log whose first
// row began "+0" was read as a header, and said to lack a 'step' column.
const char* digits_of(const std::string& field) {
  const char* begin = field.data();
  if (field.size() > 1 && begin[0] == '+' && begin[1] != '-' && begin[1] != '+') ++begin;
  return begin;
}

}  // namespace

bool parse_csv_double(const std::string& field, double& out) {
  if (field.empty()) return false;
  const char* end = field.data() + field.size();
  const auto [ptr, ec] = std::from_chars(digits_of(field), end, out);
  return ec == std::errc() && ptr == end;
}

bool csv_double_out_of_range(const std::string& field) {
  double v = 0;
  return !field.empty() &&
         std::from_chars(digits_of(field), field.data() + field.size(), v).ec == std::errc::result_out_of_range;
}

bool csv_integer_out_of_range(const std::string& field) {
  std::int64_t v = 0;
  return !field.empty() &&
         std::from_chars(digits_of(field), field.data() + field.size(), v).ec == std::errc::result_out_of_range;
}

bool parse_csv_integer(const std::string& field, std::int64_t& out) {
  if (field.empty()) return false;
  const char* end = field.data() + field.size();
  const auto [ptr, ec] = std::from_chars(digits_of(field), end, out);
  if (ec == std::errc() && ptr == end) return true;
  double d = 0;  // "125.0", "1e12"
  if (parse_csv_double(field, d) && std::isfinite(d) && d == std::floor(d) && std::abs(d) < 9e15) {
    out = static_cast<std::int64_t>(d);
    return true;
  }
  return false;
}

}  // namespace modelcast::predictor
