// One log line per interval for events a peer can cause at will (refused handshakes, malformed
// messages), so that a flood of them cannot flood the log; the line that is let through says how
// many were held back. Counters (ProducerStats, ConsumerStats) still count every event. A dozen
// lines: spdlog has no rate limit of its own.
// Threads: one caller at a time (the service thread that owns it).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

namespace modelcast {

class LogRate {
 public:
  using Clock = std::chrono::steady_clock;
  explicit LogRate(Clock::duration interval = std::chrono::seconds(10)) : interval_(interval) {}

  // Whether an event at `now` is logged: then the words to append to its line ("" or " (and N
  // more since the last one logged)"), else nullopt and the event is counted as held back.
  std::optional<std::string> admit(Clock::time_point now) {
    if (logged_once_ && now - last_ < interval_) {
      ++held_back_;
      return std::nullopt;
    }
    std::string note;
    if (held_back_ > 0) note = " (and " + std::to_string(held_back_) + " more since the last one logged)";
    logged_once_ = true;
    last_ = now;
    held_back_ = 0;
    return note;
  }

 private:
  Clock::duration interval_;
  bool logged_once_ = false;
  Clock::time_point last_{};
  std::uint64_t held_back_ = 0;
};

// `text` with the number after each "version " written '#': the key under which the same error
// of one version after another counts as one text, while texts that differ in any other number (a
// rank, a relay's address, a tensor 'layers.3.w') stay apart.
inline std::string with_versions_left_out(std::string_view text) {
  constexpr std::string_view kWord = "version ";
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    if (text.substr(i, kWord.size()) == kWord && i + kWord.size() < text.size() && text[i + kWord.size()] >= '0' &&
        text[i + kWord.size()] <= '9') {
      out += kWord;
      out += '#';
      i += kWord.size();
      while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
    } else {
      out += text[i++];
    }
  }
  return out;
}

// LogRate per text: a text other than the last one logged is logged at once (a new error is news),
// the same one again at most once per interval (a refusal repeated at every retry is not). Texts
// that differ only in the versions they name are the same: a consumer that rejects every version
// (a layout it does not expect) said so once per version.
class RepeatRate {
 public:
  using Clock = LogRate::Clock;
  explicit RepeatRate(Clock::duration interval = std::chrono::seconds(10)) : interval_(interval), rate_(interval) {}

  // As LogRate::admit, for an event that says `text`.
  std::optional<std::string> admit(const std::string& text, Clock::time_point now) {
    if (std::string key = with_versions_left_out(text); key != last_key_) {
      last_key_ = std::move(key);
      rate_ = LogRate(interval_);
    }
    return rate_.admit(now);
  }

 private:
  Clock::duration interval_;
  LogRate rate_;
  std::string last_key_;
};

// `text` with each run of digits written '#': the key under which events that differ only in
// their numbers (a version, a path named after it) count as one text for RepeatedLines.
inline std::string with_numbers_left_out(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    const bool digit = c >= '0' && c <= '9';
    if (!digit) {
      out += c;
    } else if (out.empty() || out.back() != '#') {
      out += '#';
    }
  }
  return out;
}

// A steady condition said for every event (a full disk at every version, a hook that fails at
// every version), each line naming its numbers: a line that is the same but for its numbers is
// let through at most once per interval, per subject (a model). Each text has its own rate, so
// two conditions that alternate are each limited, and one first seen is said at once.
// Threads: any (callers on a writer's or a hook runner's thread).
class RepeatedLines {
 public:
  explicit RepeatedLines(LogRate::Clock::duration interval = std::chrono::seconds(10)) : interval_(interval) {}

  // As LogRate::admit, for `line` about `subject`.
  std::optional<std::string> admit(const std::string& subject, std::string_view line) {
    std::lock_guard lock(mutex_);
    std::string key = subject + '\n' + with_numbers_left_out(line);
    if (by_text_.size() >= kMostTexts && !by_text_.contains(key)) by_text_.clear();
    return by_text_.try_emplace(std::move(key), interval_).first->second.admit(LogRate::Clock::now());
  }

 private:
  static constexpr std::size_t kMostTexts = 256;  // texts remembered; forgotten all at once past that
  const LogRate::Clock::duration interval_;
  std::mutex mutex_;
  std::map<std::string, LogRate> by_text_;
};

}  // namespace modelcast
