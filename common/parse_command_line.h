// Command lines of modelcast's programs, parsed with CLI11 and one exit status per outcome:
// CLI11_PARSE ends with CLI11's own code for each kind of error (104 a bad number, 105 a failed
// check, 106 a missing option, 109 an extra argument, 114 an option given twice...), which no one
// can document or rely on. Here a usage error exits 2, as POSIX utilities do; --help and
// --version exit 0. Threads: the main thread, before any other starts.
#pragma once

#include <algorithm>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/empty_option_value.h"

namespace modelcast {

// The status to exit with at once (2 after printing the usage error; 0 after --help or
// --version), or nullopt when the options were read and the program goes on. `may_be_empty`
// names the options for which "" means something (an empty list).
inline std::optional<int> parse_command_line(CLI::App& app, int argc, const char* const* argv,
                                             const std::vector<std::string>& may_be_empty = {}) {
  if (auto empty = empty_option_value(argc, argv, may_be_empty)) {
    std::cerr << "error: " << *empty << "\n";
    return 2;
  }
  // CLI11 says "A subcommand is required" of a misspelt one.
  const auto commands = app.get_subcommands([](const CLI::App*) { return true; });
  if (!commands.empty() && argc > 1 && argv[1][0] != '-') {
    std::string names;
    bool known = false;
    for (const auto* command : commands) {
      known = known || command->check_name(argv[1]);
      names += (names.empty() ? "" : ", ") + command->get_name();
    }
    if (!known) {
      std::cerr << "error: unknown command '" << argv[1] << "' (the commands: " << names << "; --help says more)\n";
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // prints the help, the version or the error
  }
  // "-c ''" as "--config=" above: an empty path reached the program, which said only
  // ": cannot be read". Flags take no value and are left out.
  std::vector<const CLI::App*> apps{&app};
  for (const auto* command : app.get_subcommands()) apps.push_back(command);
  for (const auto* parsed : apps) {
    for (const auto* option : parsed->get_options()) {
      if (option->get_type_size() == 0) continue;
      if (std::find(may_be_empty.begin(), may_be_empty.end(), option->get_name()) != may_be_empty.end()) continue;
      for (const auto& value : option->results()) {
        if (value.empty()) {
          std::cerr << "error: " << option->get_name() << " is given an empty value (an empty value means nothing here)\n";
          return 2;
        }
      }
    }
  }
  return std::nullopt;
}

}  // namespace modelcast
