#include "csv_record.h"

#include <csv.h>

#include <new>
#include <utility>

#include "modelcast/predictor_csv.h"

namespace modelcast::predictor {
namespace {

struct Collector {
  std::vector<std::string> fields;
};

void on_field(void* text, std::size_t length, void* data) {
  static_cast<Collector*>(data)->fields.emplace_back(static_cast<const char*>(text), length);
}

void on_record_end(int, void*) {}

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

}  // namespace

std::vector<std::string> split_csv_record(const std::string& line, const std::string& source, std::size_t line_no) {
  Parser parser;
  Collector collector;
  const bool parsed = csv_parse(parser.get(), line.data(), line.size(), on_field, on_record_end, &collector) == line.size();
  if (!parsed || csv_fini(parser.get(), on_field, on_record_end, &collector) != 0) {
    throw CsvError(source, line_no, std::string("malformed CSV record (") + csv_strerror(csv_error(parser.get())) +
                                        "): " + line);
  }
  return std::move(collector.fields);
}

}  // namespace modelcast::predictor
