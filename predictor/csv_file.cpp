#include "csv_file.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "modelcast/predictor_csv.h"

namespace modelcast::predictor {

std::ifstream open_csv_file(const std::string& path) {
  if (const auto nul = path.find('\0'); nul != std::string::npos)
    throw CsvError(path.substr(0, nul), 0, "the path goes on past a NUL byte at byte " + std::to_string(nul) + ", which no file name holds");
  if (std::error_code ec; std::filesystem::is_directory(path, ec)) throw CsvError(path, 0, "is a directory, not a file");
  std::ifstream in(path);
  if (!in) throw CsvError(path, 0, std::string("cannot open file: ") + std::strerror(errno));
  return in;
}

}  // namespace modelcast::predictor
