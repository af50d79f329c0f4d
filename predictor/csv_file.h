// Opening a CSV input of the predictor (a loss log, a reference run, a learning-rate schedule)
// by its path, refused by name where a stream would read nothing or another file.
#pragma once

#include <fstream>
#include <string>

namespace modelcast::predictor {

// The file at `path`, open for reading. Throws CsvError naming it for a path holding a NUL byte
// (the file system would open the part before it), a directory (it opens, and reads as an empty
// file), or a file that cannot be opened (with the system's reason). Thread-safe.
std::ifstream open_csv_file(const std::string& path);

}  // namespace modelcast::predictor
