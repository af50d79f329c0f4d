// How text that a peer or a caller chose (a consumer's or a tensor's name, the model a join asked
// for, a peer's error) is shown in an error or a log line: quoted, at most `limit` bytes of it,
// anything but printable ASCII as \xNN. So it can neither forge a log line (a newline), drive a
// terminal (escape sequences) nor make a line of megabytes. A dozen lines: fmt's "{:?}" escapes
// but does not cap, and errors here are built as strings before any logger sees them.
// Threads: any (a pure function).
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace modelcast {

// Whether a backslash is shown as \x5c. A name is: "a\x0ab" then means a newline, not those
// four characters. A peer's message text is not, so that a name the peer showed escaped
// reads the same once more (a peer's text, unlike a name, is never matched against anything).
enum class Backslash { kEscaped, kKept };

// `text` with anything but printable ASCII as \xNN, cut at `limit` bytes ("..." then).
inline std::string printable_text(std::string_view text, std::size_t limit, Backslash backslash = Backslash::kEscaped) {
  std::string out;
  for (unsigned char c : text.substr(0, limit)) {
    if (c >= 0x20 && c < 0x7f && (c != '\\' || backslash == Backslash::kKept)) {
      out += static_cast<char>(c);
    } else {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", c);
      out += escaped;
    }
  }
  return text.size() > limit ? out + "..." : out;
}

// Where `text` has its first control character (below 0x20, DEL, or a C1 control U+0080 to
// U+009F, which UTF-8 writes as 0xc2 0x80-0x9f: NEL ends a line and CSI starts an escape sequence
// on some terminals and log viewers), which would forge or garble a log line showing it; npos
// when it has none. The one rule names are checked by.
inline std::size_t control_character_at(std::string_view text) {
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f) return i;
    if (c == 0xc2 && i + 1 < text.size() && (static_cast<unsigned char>(text[i + 1]) & 0xe0) == 0x80) return i;
  }
  return std::string_view::npos;
}

// A name, quoted: 'printable text'.
inline std::string shown_text(std::string_view text, std::size_t limit = 40) {
  // Appended rather than `"'" + ... + "'"`, which gcc 12 at -O3 reports as -Wrestrict (GCC bug
  // 105329, a false positive) wherever this is inlined.
  std::string out(1, '\'');
  out += printable_text(text, limit);
  out += '\'';
  return out;
}

}  // namespace modelcast
