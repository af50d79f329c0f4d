// The file baseline: today's practice. The producer writes the model to a file on the local
// disk and fsyncs it (then renames it into place, as checkpoint writers do); each consumer
// process polls for it every 1 ms (a polling server at its quickest) and reads it with O_DIRECT,
// bypassing the page cache, as a consumer on another node of a parallel file system would.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace bench {

// Milliseconds per repetition: start of the write until the last reader finished reading.
// `write_ms`, if given, gets the write + fsync + rename part of each repetition.
std::vector<double> measure_file_baseline(const std::byte* model, std::size_t size, int readers,
                                          const std::string& directory, int repetitions,
                                          std::vector<double>* write_ms = nullptr);

// Child side ("file-read" subcommand).
int run_file_reader(const std::string& directory, std::size_t size, int repetitions);

}  // namespace bench
