// Command lines of modelcast's programs: "--name=" with nothing after the "=". CLI11 reads it as
// "--name" and takes the next argument as its value ("--log= run.csv" read the log; "--run=
// --publish-cost 1" lost --publish-cost). An option for which "" means something (an empty
// list) is told to take it as a separate argument. Threads: any (a pure function).
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace modelcast {

// The error to print for the first such argument of argv, or nullopt when there is none.
inline std::optional<std::string> empty_option_value(int argc, const char* const* argv,
                                                     const std::vector<std::string>& may_be_empty = {}) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--") return std::nullopt;  // what follows is not options
    if (arg.size() > 3 && arg.substr(0, 2) == "--" && arg.back() == '=' && arg.find('=') == arg.size() - 1) {
      const std::string name(arg.substr(0, arg.size() - 1));
      if (std::find(may_be_empty.begin(), may_be_empty.end(), name) != may_be_empty.end()) {
        return std::string(arg) + " gives no value: write " + name + " \"\" for an empty one";
      }
      return std::string(arg) + " gives no value: write " + name + " VALUE (an empty value means nothing here)";
    }
  }
  return std::nullopt;
}

}  // namespace modelcast
