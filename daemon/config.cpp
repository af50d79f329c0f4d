// Config files are TOML read with toml++ (as key files are): its source positions give every
// error its line. Unknown keys are errors, not warnings, so a misspelt option cannot silently
// fall back to a default.
#include "daemon/config.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cctype>
#include <optional>
#include <cerrno>
#include <climits>
#include <cstring>
#include <cstdlib>
#include <charconv>
#include <tuple>
#include <filesystem>
#include <set>

#include "core/repository/repository.h"
#include "common/shown_text.h"
#include "modelcast/types.h"
#include "core/wire/socket_directory.h"
#include "core/wire/connect_host.h"
#include "modelcast/error.h"
#include "modelcast/keys.h"

namespace modelcastd {
namespace {

// The nearest existing ancestor of `path` when it is not a directory (a file, say); nullopt when
// the path exists itself or its nearest existing ancestor is a directory.
std::optional<std::string> file_above(const std::string& path) {
  std::error_code ec;
  if (path.empty() || std::filesystem::exists(path, ec)) return std::nullopt;
  for (auto up = std::filesystem::absolute(path, ec).parent_path(); !up.empty(); up = up.parent_path()) {
    if (std::filesystem::exists(up, ec)) {
      if (std::filesystem::is_directory(up, ec)) return std::nullopt;
      return up.string();
    }
    if (up == up.root_path()) break;
  }
  return std::nullopt;
}

class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)) {}

  [[noreturn]] void fail(const toml::node& node, const std::string& key, const std::string& what) const {
    // The key as printable text, cut short: a key is the file's text, and a newline in it forged a
    // log line ("reloaded ...") inside the message that refused the file.
    throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument, path_ + ":" + std::to_string(node.source().begin.line) +
                                                                       ": key '" + modelcast::printable_text(key, 200) +
                                                                       "': " + what);
  }

  // Every key of `table` must be in `known`; `prefix` names the table in messages.
  void only(const toml::table& table, const std::string& prefix, const std::set<std::string>& known) const {
    for (const auto& [key, node] : table) {
      if (!known.contains(std::string(key.str()))) fail(node, prefix + std::string(key.str()), "unknown key");
    }
  }

  const toml::table* table(const toml::table& parent, const std::string& key, const std::string& prefix) const {
    const toml::node* node = parent.get(key);
    if (!node) return nullptr;
    if (!node->is_table()) fail(*node, prefix + key, "must be a table");
    return node->as_table();
  }

  void string(const toml::table& t, const std::string& key, const std::string& prefix, std::string& out) const {
    const toml::node* node = t.get(key);
    if (!node) return;
    auto value = node->value<std::string>();
    if (!value || !node->is_string()) fail(*node, prefix + key, "must be a string");
    // A path, name or key is taken as a C string on its way (open, bind, exec), which ends at a
    // NUL: "/srv/repo\0x" passed --check and was used as "/srv/repo".
    if (const auto nul = value->find('\0'); nul != std::string::npos) {
      fail(*node, prefix + key, modelcast::shown_text(*value, 80) + " contains a NUL byte at " + std::to_string(nul) +
                                    ", which no path, name or key holds");
    }
    out = *value;
  }

  void boolean(const toml::table& t, const std::string& key, const std::string& prefix, bool& out) const {
    const toml::node* node = t.get(key);
    if (!node) return;
    if (!node->is_boolean()) fail(*node, prefix + key, "must be true or false");
    out = *node->value<bool>();
  }

  std::uint64_t integer(const toml::node& node, const std::string& key, std::uint64_t min, std::uint64_t max) const {
    if (!node.is_integer()) fail(node, key, "must be an integer");
    auto value = *node.value<std::int64_t>();
    if (value < 0 || static_cast<std::uint64_t>(value) < min || static_cast<std::uint64_t>(value) > max) {
      fail(node, key, "must be between " + std::to_string(min) + " and " + std::to_string(max));
    }
    return static_cast<std::uint64_t>(value);
  }

  // A byte count: an integer, or a string such as "256MiB" or "1GiB".
  std::uint64_t bytes(const toml::node& node, const std::string& key) const {
    if (node.is_integer()) return integer(node, key, 1, std::uint64_t{1} << 50);
    auto text = node.value<std::string>();
    if (!text || !node.is_string()) fail(node, key, "must be a byte count (an integer or e.g. \"512MiB\")");
    std::uint64_t number = 0;
    auto [end, error] = std::from_chars(text->data(), text->data() + text->size(), number);
    std::string unit(end, static_cast<const char*>(text->data() + text->size()));
    std::uint64_t scale = unit == "" || unit == "B" ? 1 : unit == "KiB" ? 1u << 10 : unit == "MiB" ? 1u << 20
                        : unit == "GiB" ? std::uint64_t{1} << 30 : 0;
    if (error == std::errc::result_out_of_range && scale != 0) {
      fail(node, key, "'" + *text + "' is out of range: from 1 byte to 1 PiB");
    }
    if (error != std::errc{} || scale == 0) {
      fail(node, key, "'" + *text + "' is not a byte count (an integer with B, KiB, MiB or GiB)");
    }
    if (number == 0 || number > (std::uint64_t{1} << 50) / scale) {
      fail(node, key, "'" + *text + "' is out of range: from 1 byte to 1 PiB");
    }
    return number * scale;
  }

  std::string where(const toml::node& node) const { return path_ + ":" + std::to_string(node.source().begin.line); }

 private:
  std::string path_;
};

// The first {name} in `text` that is no placeholder expand_placeholders() knows, if any: a
// misspelt {verison} passed the check and was sent literally at every version. Only a brace
// around a bare name counts, so JSON or other braces in an argument stay allowed.
std::optional<std::string> unknown_placeholder(const std::string& text) {
  for (std::size_t open = text.find('{'); open != std::string::npos; open = text.find('{', open + 1)) {
    const std::size_t close = text.find('}', open);
    if (close == std::string::npos) break;
    const std::string name = text.substr(open + 1, close - open - 1);
    const bool bare = !name.empty() && (std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_') &&
                      std::all_of(name.begin(), name.end(), [](unsigned char c) { return std::isalnum(c) || c == '_'; });
    if (bare && name != "model" && name != "version" && name != "path") return "{" + name + "}";
  }
  return std::nullopt;
}

HookConfig read_hook(const Reader& r, const toml::table& t, const std::string& prefix) {
  r.only(t, prefix, {"http_post", "command", "timeout_ms"});
  HookConfig hook;
  r.string(t, "http_post", prefix, hook.http_post);
  if (!hook.http_post.empty() && hook.http_post.rfind("http://", 0) != 0) {
    r.fail(*t.get("http_post"), prefix + "http_post", "must start with http://");
  }
  // A control character is no part of a URL: httplib sent it percent-encoded, to a path no server
  // serves, and the hook's log lines showed it raw (a newline began a forged line).
  if (const auto bad = std::find_if(hook.http_post.begin(), hook.http_post.end(),
                                    [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
      bad != hook.http_post.end()) {
    r.fail(*t.get("http_post"), prefix + "http_post",
           "holds a control character at byte " + std::to_string(bad - hook.http_post.begin()) + " (" +
               modelcast::shown_text(hook.http_post, 80) + "); a URL has none");
  }
  if (!hook.http_post.empty()) {
    // HOST[:PORT] checked here: httplib reads the port with std::stoi, which throws on the hook
    // thread for one past an int and takes one past 65535 modulo 2^16, another port.
    const std::string authority = hook.http_post.substr(7, hook.http_post.find('/', 7) - 7);
    const bool bracketed = authority.rfind('[', 0) == 0;  // an IPv6 literal: [::1]:8000
    const auto close = authority.find(']');
    const auto colon = authority.rfind(':');
    const bool has_port = colon != std::string::npos && (!bracketed || (close != std::string::npos && colon > close));
    const std::string host = has_port ? authority.substr(0, colon) : authority;
    if (host.empty() || (bracketed && close != host.size() - 1) || host.find_first_of("{}@?#% ") != std::string::npos) {
      r.fail(*t.get("http_post"), prefix + "http_post",
             "must be http://HOST[:PORT]/PATH with a literal HOST (placeholders go in the path), got " +
                 modelcast::shown_text(authority, 80) + " before the path");
    }
    if (has_port && listen_port(authority).value_or(0) == 0) {
      r.fail(*t.get("http_post"), prefix + "http_post",
             "has port " + modelcast::shown_text(authority.substr(colon + 1), 20) + "; a port is 1-65535");
    }
  }
  if (const toml::node* node = t.get("command")) {
    const toml::array* argv = node->as_array();
    if (!argv || argv->empty()) r.fail(*node, prefix + "command", "must be a non-empty array of strings");
    for (const auto& arg : *argv) {
      if (!arg.is_string()) r.fail(arg, prefix + "command", "must be a non-empty array of strings");
      hook.command.push_back(*arg.value<std::string>());
      // An argument reaches exec as a C string, which ends at a NUL: "a\0b" ran as "a", and the
      // program check tested the name before the NUL. Other control characters are valid in argv.
      if (const auto nul = hook.command.back().find('\0'); nul != std::string::npos) {
        r.fail(arg, prefix + "command",
               "element " + std::to_string(hook.command.size() - 1) + " holds a NUL at byte " + std::to_string(nul) +
                   " (" + modelcast::shown_text(hook.command.back(), 80) + "); a program's argument cannot");
      }
    }
  }
  if (!hook.http_post.empty() && !hook.command.empty()) {
    r.fail(t, prefix + "command", "a hook is either http_post or command, not both");
  }
  // Both passed the check and failed at every version ("cannot run : No such file"), or ran
  // nothing while the operator thought a hook was set.
  if (!hook.command.empty() && hook.command.front().empty()) {
    r.fail(*t.get("command"), prefix + "command", "names no program: its first element is empty");
  }
  if (hook.empty()) r.fail(t, prefix + "http_post", "is missing: a [model.hook] needs http_post or command");
  for (const auto& [key, texts] : {std::pair{"http_post", std::vector<std::string>{hook.http_post}}, std::pair{"command", hook.command}}) {
    for (const auto& text : texts) {
      if (const auto unknown = unknown_placeholder(text)) {
        r.fail(*t.get(key), prefix + key,
               "has " + modelcast::shown_text(*unknown, 40) +
                   ", which is no placeholder: they are {model}, {version} and {path} (a command runs without a shell)");
      }
    }
  }
  if (const toml::node* node = t.get("timeout_ms")) {
    hook.timeout = std::chrono::milliseconds(r.integer(*node, prefix + "timeout_ms", 1, 3'600'000));
  }
  return hook;
}

// The Consumer's own limits on wants (TensorSelection), checked here too so that --check finds
// them with the file, line and key.
constexpr std::size_t kMaxRank = 16;
constexpr std::size_t kMaxBoxes = 1024;

std::vector<std::int64_t> extents(const Reader& r, const toml::node& node, const std::string& key) {
  const toml::array* list = node.as_array();
  if (!list) r.fail(node, key, "must be an array of integers >= 0");
  std::vector<std::int64_t> out;
  for (const auto& item : *list) out.push_back(static_cast<std::int64_t>(r.integer(item, key, 0, (std::uint64_t{1} << 62) - 1)));
  return out;
}

// Whether two boxes of one rank, none empty, share an element: layout::overlaps, which the
// daemon cannot reach (libmodelcast exports its public API only).
bool boxes_overlap(const modelcast::TensorBox& a, const modelcast::TensorBox& b) {
  for (std::size_t d = 0; d < a.offset.size(); ++d) {
    if (std::max(a.offset[d], b.offset[d]) >= std::min(a.offset[d] + a.extent[d], b.offset[d] + b.extent[d])) return false;
  }
  return true;
}

// Whether a tcp:// endpoint's host is this one: the library's rule for where plaintext is allowed
// (localhost, [::1], a literal address in 127.0.0.0/8), which the daemon cannot reach.
bool loopback_host(const std::string& host) {
  if (host == "localhost" || host == "[::1]") return true;
  in_addr v4{};
  return inet_pton(AF_INET, host.c_str(), &v4) == 1 && (ntohl(v4.s_addr) >> 24) == 127;
}

// What the consumer refuses in a tensor name of its wants and conversions when the model starts
// (name_problem in the library): --check and a reload refuse it first, or a reload stopped the
// model serving and then could not start it again.
// The consumer's own rule (modelcast::name_problem), checked here so that --check and a reload
// refuse what the consumer would refuse when the model starts.
void check_tensor_name(const Reader& r, const toml::node& node, const std::string& key, const std::string& name) {
  if (name.empty()) r.fail(node, key, "names no tensor (\"*\" for every tensor not named)");
  if (auto why = modelcast::name_problem(name)) r.fail(node, key, *why);
}

// [model.wants]: per tensor name (or "*"), "whole", "nothing", a shard { dim, index, count } or
// { boxes = [{ offset = [...], extent = [...] }, ...] }. Whether a want fits the model is the
// Consumer's check, made against each version's manifest.
std::vector<modelcast::TensorWant> read_wants(const Reader& r, const toml::table& t, const std::string& prefix) {
  std::vector<modelcast::TensorWant> wants;
  for (const auto& [name_key, node] : t) {
    const std::string name(name_key.str());
    const std::string key = prefix + "\"" + name + "\"";
    check_tensor_name(r, node, key, name);
    if (auto word = node.value<std::string>(); word && node.is_string()) {
      if (*word == "whole") wants.push_back(modelcast::TensorWant::whole(name));
      else if (*word == "nothing") wants.push_back(modelcast::TensorWant::nothing(name));
      else r.fail(node, key, "must be \"whole\", \"nothing\", { dim, index, count } or { boxes = [...] }");
      continue;
    }
    const toml::table* want = node.as_table();
    if (!want) r.fail(node, key, "must be \"whole\", \"nothing\", { dim, index, count } or { boxes = [...] }");
    if (const toml::node* boxes = want->get("boxes")) {
      r.only(*want, key + ".", {"boxes"});
      const toml::array* list = boxes->as_array();
      if (!list || list->empty()) r.fail(*boxes, key + ".boxes", "must be a non-empty array of { offset, extent }");
      if (list->size() > kMaxBoxes) r.fail(*boxes, key + ".boxes", "lists more than " + std::to_string(kMaxBoxes) + " boxes");
      std::vector<modelcast::TensorBox> parsed;
      for (const auto& item : *list) {
        const toml::table* box = item.as_table();
        if (!box) r.fail(item, key + ".boxes", "must be a non-empty array of { offset, extent }");
        r.only(*box, key + ".boxes.", {"offset", "extent"});
        const toml::node* offset = box->get("offset");
        const toml::node* extent = box->get("extent");
        if (!offset || !extent) r.fail(item, key + ".boxes", "each box needs offset and extent");
        parsed.push_back({extents(r, *offset, key + ".boxes.offset"), extents(r, *extent, key + ".boxes.extent")});
        if (parsed.back().offset.size() != parsed.back().extent.size() || parsed.back().offset.size() > kMaxRank) {
          r.fail(item, key + ".boxes", "offset and extent must have one entry per dimension each (at most " +
                                           std::to_string(kMaxRank) + ")");
        }
        const auto& added = parsed.back();
        if (added.extent.size() != parsed.front().extent.size()) {
          r.fail(item, key + ".boxes", "every box must have as many dimensions as the first");
        }
        if (std::find(added.extent.begin(), added.extent.end(), 0) != added.extent.end()) {
          r.fail(item, key + ".boxes", "a box with an extent of 0 holds nothing; leave it out (or want \"nothing\")");
        }
        for (std::size_t i = 0; i + 1 < parsed.size(); ++i) {
          if (boxes_overlap(parsed[i], added)) {
            r.fail(item, key + ".boxes", "box " + std::to_string(parsed.size()) + " overlaps box " + std::to_string(i + 1));
          }
        }
      }
      wants.push_back(modelcast::TensorWant::of(name, std::move(parsed)));
      continue;
    }
    r.only(*want, key + ".", {"dim", "index", "count"});
    const toml::node* dim = want->get("dim");
    const toml::node* index = want->get("index");
    const toml::node* count = want->get("count");
    if (!dim || !index || !count) r.fail(node, key, "a shard needs dim, index and count");
    const auto n = r.integer(*count, key + ".count", 1, 1u << 20);
    wants.push_back(modelcast::TensorWant::shard(name, r.integer(*dim, key + ".dim", 0, kMaxRank - 1),
                                                 r.integer(*index, key + ".index", 0, n - 1), n));
  }
  return wants;
}

// [model.convert]: per tensor name (or "*"), a dtype ("bf16") or { to = "f8e4m3", fp8_block = N }.
std::vector<modelcast::TensorConversion> read_conversions(const Reader& r, const toml::table& t, const std::string& prefix) {
  std::vector<modelcast::TensorConversion> conversions;
  for (const auto& [name_key, node] : t) {
    const std::string name(name_key.str());
    const std::string key = prefix + "\"" + name + "\"";
    check_tensor_name(r, node, key, name);
    modelcast::TensorConversion c{name, modelcast::DType::kBF16, 0};
    const toml::node* to = &node;
    if (const toml::table* table = node.as_table()) {
      r.only(*table, key + ".", {"to", "fp8_block"});
      to = table->get("to");
      if (!to) r.fail(node, key + ".to", "is required");
      if (const toml::node* block = table->get("fp8_block")) c.fp8_block = r.integer(*block, key + ".fp8_block", 0, 1u << 30);
    }
    auto dtype = to->value<std::string>();
    auto parsed = dtype && to->is_string() ? modelcast::parse_dtype(*dtype) : std::nullopt;
    if (!parsed || (*parsed != modelcast::DType::kF32 && *parsed != modelcast::DType::kF16 &&
                    *parsed != modelcast::DType::kBF16 && *parsed != modelcast::DType::kF8E4M3)) {
      r.fail(*to, key, "must be one of \"f32\", \"f16\", \"bf16\", \"f8e4m3\" (or { to, fp8_block })");
    }
    c.to = *parsed;
    if (c.fp8_block != 0 && c.to != modelcast::DType::kF8E4M3) r.fail(node, key + ".fp8_block", "applies to f8e4m3 only");
    conversions.push_back(std::move(c));
  }
  return conversions;
}

// A name the consumer would refuse at the start is refused here, so that --check does; a control
// character (NUL included) would also forge the log lines that show the name.
void check_name(const Reader& r, const toml::table& t, const std::string& prefix, const char* key,
                const std::string& value) {
  if (auto why = modelcast::name_problem(value)) r.fail(*t.get(key), prefix + key, modelcast::shown_text(value) + " " + *why);
}

ModelConfig read_model(const Reader& r, const toml::table& t, const std::string& prefix) {
  r.only(t, prefix, {"name", "endpoint", "max_model_bytes", "buffers", "producer_public_key", "producer_key_file",
                     "key_file", "persist", "serve_peers", "group", "group_size", "wants", "convert", "hook"});
  ModelConfig model;
  model.source = r.where(t);
  r.string(t, "name", prefix, model.name);
  r.string(t, "endpoint", prefix, model.endpoint);
  if (model.name.empty()) r.fail(t, prefix + "name", "is required and must not be empty");
  if (auto why = modelcast::repository::model_directory_problem(model.name); why && !model.name.empty()) {
    r.fail(*t.get("name"), prefix + "name", *why);
  }
  check_name(r, t, prefix, "name", model.name);
  if (model.endpoint.empty()) r.fail(t, prefix + "endpoint", "is required and must not be empty");
  // Its form only, so that --check catches a typo; the library checks the rest when it connects
  // (a private directory for ipc://); a key for another host, below.
  // No blank or control character anywhere: "tcp://127.0.0.1 :7000" was taken as another host,
  // and a newline in an ipc:// path split the log line that showed it.
  const bool printable = std::none_of(model.endpoint.begin(), model.endpoint.end(),
                                      [](char c) { return static_cast<unsigned char>(c) <= 0x20 || c == 0x7f; });
  const bool ipc = printable && model.endpoint.rfind("ipc://", 0) == 0 && model.endpoint.size() > 6;
  const bool tcp = printable && model.endpoint.rfind("tcp://", 0) == 0 && model.endpoint.rfind(':') > 6 &&
                   listen_port(model.endpoint.substr(6)).value_or(0) != 0;
  if (!ipc && !tcp) {
    r.fail(*t.get("endpoint"), prefix + "endpoint",
           "must be tcp://HOST:PORT (PORT 1-65535) or ipc://PATH, without blanks; got " +
               modelcast::shown_text(model.endpoint, 80));
  }
  // The consumer's own rule, so that --check refuses the typo the model would fail on at start.
  if (auto why = tcp ? modelcast::wire::connect_host_problem(model.endpoint) : std::nullopt) {
    r.fail(*t.get("endpoint"), prefix + "endpoint", *why);
  }
  // ZeroMQ's ipc:// is a Unix socket: the path fits its sun_path, or the model never starts
  // ("File name too long").
  if (const std::size_t most = sizeof(sockaddr_un{}.sun_path) - 1; ipc && model.endpoint.size() - 6 > most) {
    r.fail(*t.get("endpoint"), prefix + "endpoint",
           "ipc:// path is " + std::to_string(model.endpoint.size() - 6) + " bytes; a Unix socket path holds at most " +
               std::to_string(most));
  }
  const toml::node* size = t.get("max_model_bytes");
  if (!size) r.fail(t, prefix + "max_model_bytes", "is required (it sizes the shared-memory buffers)");
  model.max_model_bytes = r.bytes(*size, prefix + "max_model_bytes");
  if (const toml::node* node = t.get("buffers")) model.buffers = r.integer(*node, prefix + "buffers", 2, 64);
  r.string(t, "producer_public_key", prefix, model.producer_public_key);
  r.string(t, "producer_key_file", prefix, model.producer_key_file);
  r.string(t, "key_file", prefix, model.key_file);
  // Given but empty (a template's variable left unset) read as no key: plaintext and unsigned
  // versions where the operator meant to pin one.
  for (const char* key : {"producer_public_key", "producer_key_file", "key_file"}) {
    if (const toml::node* node = t.get(key); node && node->value<std::string>().value_or("x").empty()) {
      r.fail(*node, prefix + key, "is empty; leave the key out for none");
    }
  }
  if (!model.producer_public_key.empty() && !model.producer_key_file.empty()) {
    r.fail(*t.get("producer_key_file"), prefix + "producer_key_file", "give producer_public_key or producer_key_file, not both");
  }
  // The daemon never takes plaintext versions from another host (it has no allow_plaintext_remote,
  // whose name the library's own message would give), so a remote endpoint needs the key here.
  if (tcp && !loopback_host(model.endpoint.substr(6, model.endpoint.rfind(':') - 6)) &&
      model.producer_public_key.empty() && model.producer_key_file.empty()) {
    r.fail(*t.get("endpoint"), prefix + "endpoint",
           "'" + model.endpoint + "' is on another host: pin the producer's key with producer_key_file or "
           "producer_public_key (versions from another host are encrypted and signed)");
  }
  // The library's consumer refuses it when the model starts: --check said "ok" to a config whose
  // model then never started.
  if (!model.key_file.empty() && model.producer_public_key.empty() && model.producer_key_file.empty()) {
    r.fail(*t.get("key_file"), prefix + "key_file",
           "is given but neither producer_key_file nor producer_public_key is: without the producer's key the "
           "control plane would be plaintext and versions unsigned; pin it or give no key_file");
  }
  r.boolean(t, "persist", prefix, model.persist);
  r.boolean(t, "serve_peers", prefix, model.serve_peers);
  r.string(t, "group", prefix, model.group);
  check_name(r, t, prefix, "group", model.group);
  if (const toml::node* node = t.get("group_size")) {
    model.group_size = static_cast<std::uint32_t>(r.integer(*node, prefix + "group_size", 1, 4096));
  }
  if (!model.group.empty() && model.group_size == 0) r.fail(t, prefix + "group_size", "is required with group");
  if (model.group.empty() && model.group_size != 0) r.fail(*t.get("group_size"), prefix + "group", "is required with group_size");
  if (!model.group.empty() && model.buffers < 3) {
    r.fail(*t.get("buffers"), prefix + "buffers", "must be >= 3 for a group member (serving, prepared, receiving)");
  }
  if (const toml::table* wants = r.table(t, "wants", prefix)) model.wants = read_wants(r, *wants, prefix + "wants.");
  if (const toml::table* convert = r.table(t, "convert", prefix)) {
    model.conversions = read_conversions(r, *convert, prefix + "convert.");
  }
  if (model.persist && (!model.wants.empty() || !model.conversions.empty())) {
    r.fail(*t.get(model.wants.empty() ? "convert" : "wants"), prefix + (model.wants.empty() ? "convert" : "wants"),
           "needs persist = false: the repository stores whole models as the producer sent them");
  }
  if (const toml::table* hook = r.table(t, "hook", prefix)) model.hook = read_hook(r, *hook, prefix + "hook.");
  return model;
}

}  // namespace

namespace {

bool same(const std::vector<modelcast::TensorWant>& a, const std::vector<modelcast::TensorWant>& b) {
  auto key = [](const modelcast::TensorWant& w) {
    std::vector<std::vector<std::int64_t>> boxes;
    for (const auto& box : w.boxes) {
      boxes.push_back(box.offset);
      boxes.push_back(box.extent);
    }
    return std::tuple(w.tensor, w.kind, w.dim, w.index, w.count, boxes);
  };
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [&](const auto& x, const auto& y) { return key(x) == key(y); });
}

bool same(const std::vector<modelcast::TensorConversion>& a, const std::vector<modelcast::TensorConversion>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const auto& x, const auto& y) {
    return x.tensor == y.tensor && x.to == y.to && x.fp8_block == y.fp8_block;
  });
}

}  // namespace

bool ModelConfig::same_but_hook(const ModelConfig& o) const {
  return name == o.name && endpoint == o.endpoint && max_model_bytes == o.max_model_bytes && buffers == o.buffers &&
         producer_public_key == o.producer_public_key && producer_key_file == o.producer_key_file &&
         key_file == o.key_file && keys_held == o.keys_held && persist == o.persist && serve_peers == o.serve_peers && group == o.group &&
         group_size == o.group_size && same(wants, o.wants) && same(conversions, o.conversions);
}

bool ModelConfig::operator==(const ModelConfig& o) const {
  return same_but_hook(o) && hook == o.hook;
}

std::optional<std::uint16_t> listen_port(const std::string& listen) {
  auto colon = listen.rfind(':');
  if (colon == std::string::npos) return std::nullopt;
  const char* first = listen.data() + colon + 1;
  const char* last = listen.data() + listen.size();
  unsigned port = 0;
  auto [end, ec] = std::from_chars(first, last, port);
  if (first == last || ec != std::errc{} || end != last || port > 65535) return std::nullopt;
  return static_cast<std::uint16_t>(port);
}

namespace {

// A config says whom to trust and what to run: the producers' keys, the endpoints, and hook
// commands the daemon runs as its own user. One that other users may write, or replace, would
// let them do all that (a world-writable config was read without a word); refused as key files
// are. A pipe (-c /dev/stdin) is not checked: whoever feeds it starts the daemon.
void check_config_file_trusted(const std::string& path) {
  const std::string shown = modelcast::printable_text(path, 4096);  // a newline in it forged a log line
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return;
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument,
                           shown + ": " + ((st.st_mode & S_IWOTH) != 0 ? "every user" : "its group") +
                               " may write it (mode " + mode + "), and it says whom to trust and which commands to "
                               "run: chmod go-w it");
  }
  modelcast::wire::check_trusted_file(path, shown + ": ");
}

// What a reload may not read, said as the file's kind: it is asked of the descriptor opened, so
// a regular file swapped for a FIFO after a check of the path cannot hold the reload either.
void check_regular(int fd, const std::string& path) {
  struct stat status {};
  if (fstat(fd, &status) != 0 || S_ISREG(status.st_mode)) return;  // the read names what fails
  const char* what = S_ISFIFO(status.st_mode)   ? "a pipe"
                     : S_ISCHR(status.st_mode)  ? "a character device"
                     : S_ISSOCK(status.st_mode) ? "a socket"
                                                : "not a regular file";
  throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument,
                         modelcast::shown_text(path, 4096) + " is " + what +
                             ": a reload reads the config file again, and only a regular file can be read again; "
                             "restart the daemon to take a new configuration from it");
}

std::string read_config_text(const std::string& path, const std::string& shown, ConfigFile kind) {
  constexpr std::size_t kMaxConfigBytes = 16u << 20;
  // O_NONBLOCK where only a regular file will do: opening a FIFO then returns at once (and it is
  // refused); it changes nothing for a regular file's reads.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | (kind == ConfigFile::kRegularOnly ? O_NONBLOCK : 0));
  if (fd < 0) throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument, shown + ": cannot be read: " + std::strerror(errno));
  const struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  if (kind == ConfigFile::kRegularOnly) check_regular(fd, path);
  std::string text(kMaxConfigBytes + 1, '\0');
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = read(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument, shown + ": cannot be read: " + std::strerror(errno));
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  if (done > kMaxConfigBytes) {
    throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument, shown + ": is larger than 16 MiB: not a config file");
  }
  text.resize(done);
  return text;
}

}  // namespace

DaemonConfig load_config(const std::string& path, ConfigFile kind) {
  // The path as messages show it: escaped, so that a newline in it cannot forge a log line.
  const std::string shown = modelcast::printable_text(path, 4096);
  toml::table root;
  // toml++ reads a directory as an empty document; an empty config is valid (every default),
  // so a directory given by mistake would start, or reload, with no model at all.
  if (std::error_code ec; std::filesystem::is_directory(path, ec)) {
    throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument, shown + ": is a directory, not a config file");
  }
  check_config_file_trusted(path);
  // Read here rather than by toml::parse_file, which says "File could not be opened for reading"
  // at line 0 without the reason, and of a pipe (-c /dev/stdin) says so too: it asks the size.
  // Bounded, so /dev/zero given by mistake is refused rather than read until memory runs out.
  const std::string text = read_config_text(path, shown, kind);
  try {
    root = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument,
                           shown + ":" + std::to_string(e.source().begin.line) + ": " + std::string(e.description()));
  }
  Reader r(shown);
  r.only(root, "", {"daemon", "http", "repository", "model"});
  DaemonConfig config;
  if (const toml::table* daemon = r.table(root, "daemon", "")) {
    r.only(*daemon, "daemon.", {"socket", "log_level"});
    r.string(*daemon, "socket", "daemon.", config.socket_path);
    r.string(*daemon, "log_level", "daemon.", config.log_level);
    static const std::set<std::string> levels{"trace", "debug", "info", "warn", "error", "off"};
    if (!levels.contains(config.log_level)) {
      r.fail(*daemon->get("log_level"), "daemon.log_level", "must be one of trace, debug, info, warn, error, off");
    }
    if (config.socket_path.empty()) r.fail(*daemon->get("socket"), "daemon.socket", "must not be empty");
    // A Unix socket's path must fit sockaddr_un::sun_path, with its terminating NUL: found here,
    // --check says so, rather than the start.
    if (config.socket_path.size() >= sizeof(sockaddr_un{}.sun_path)) {
      r.fail(*daemon->get("socket"), "daemon.socket",
             "is " + std::to_string(config.socket_path.size()) + " bytes long; a Unix socket path holds at most " +
                 std::to_string(sizeof(sockaddr_un{}.sun_path) - 1));
    }
  }
  if (const toml::table* http = r.table(root, "http", "")) {
    r.only(*http, "http.", {"listen"});
    r.string(*http, "listen", "http.", config.http_listen);
    if (!config.http_listen.empty() && !listen_port(config.http_listen)) {
      r.fail(*http->get("listen"), "http.listen", "must be HOST:PORT with PORT 0-65535, or \"\" to disable");
    } else if (!config.http_listen.empty() && config.http_listen.front() == ':') {
      // ":PORT" is every interface to some tools and an error to others; the endpoint is only
      // ever exposed on purpose.
      r.fail(*http->get("listen"), "http.listen",
             "has no HOST: give 127.0.0.1:PORT for this machine only, 0.0.0.0:PORT or [::]:PORT for every interface");
    }
  }
  if (const toml::table* repo = r.table(root, "repository", "")) {
    r.only(*repo, "repository.", {"path", "keep"});
    r.string(*repo, "path", "repository.", config.repository);
    // A section without a path ran with no repository at all, and said nothing: versions the
    // operator meant to keep were never written.
    if (config.repository.empty()) {
      r.fail(repo->get("path") ? *repo->get("path") : *repo, "repository.path",
             "is missing or empty: [repository] needs the directory to keep versions in (omit the section to keep "
             "versions in memory only)");
    }
    // A path that cannot be written is reported per write and delivery goes on (a read-only
    // mount, say); one that names a file can never hold a version.
    if (std::error_code ec; !config.repository.empty() && std::filesystem::exists(config.repository, ec) &&
                            !std::filesystem::is_directory(config.repository, ec)) {
      r.fail(*repo->get("path"), "repository.path", "'" + config.repository + "' is a file, not a directory");
    }
    // Nor can one under a file: no directory can be made there, and every write would say so.
    if (const auto file = file_above(config.repository)) {
      r.fail(*repo->get("path"), "repository.path", "'" + config.repository + "' lies under '" + *file + "', which is a file");
    }
    if (const toml::node* keep = repo->get("keep")) config.keep_versions = r.integer(*keep, "repository.keep", 1, 1000);
  }
  if (const toml::node* models = root.get("model")) {
    const toml::array* list = models->as_array();
    if (!list || !list->is_array_of_tables()) r.fail(*models, "model", "must be an array of tables ([[model]])");
    std::set<std::string> names;
    for (std::size_t i = 0; i < list->size(); ++i) {
      std::string prefix = "model[" + std::to_string(i) + "].";
      auto model = read_model(r, *list->get(i)->as_table(), prefix);
      if (!names.insert(model.name).second) r.fail(*list->get(i), prefix + "name", "'" + model.name + "' is listed twice");
      // persist defaults to true and means "when there is a repository"; said explicitly with
      // none configured, it asked for versions on disk that would never be written.
      if (const toml::node* persist = list->get(i)->as_table()->get("persist");
          persist && model.persist && config.repository.empty()) {
        r.fail(*persist, prefix + "persist", "= true needs a [repository] section with its path: no version would be written");
      }
      // Its versions are written under <path>/<name>: a file there would fail every write, one
      // "cannot create directory" at a time, while the config looked fine.
      if (const std::string dir = config.repository + "/" + model.name; !config.repository.empty() && model.persist) {
        if (std::error_code ec; std::filesystem::exists(dir, ec) && !std::filesystem::is_directory(dir, ec)) {
          r.fail(*list->get(i)->as_table()->get("name"), prefix + "name",
                 modelcast::shown_text(dir, 4096) + ", where the repository keeps this model's versions, is a file, not a directory");
        }
      }
      config.models.push_back(std::move(model));
    }
  }
  // An empty file is what an editor or a config tool leaves while it rewrites one: read at a
  // reload, it would stop every model. A daemon with no model has nothing to do.
  if (config.models.empty()) {
    throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument,
                           shown + ": configures no model (a [[model]] table with name, endpoint and max_model_bytes)");
  }
  return config;
}

void check_hook_programs(const DaemonConfig& config) {
  for (const auto& model : config.models) {
    if (model.hook.command.empty()) continue;
    const std::string& program = model.hook.command.front();
    if (program.find('{') != std::string::npos) continue;
    const auto fail = [&](const std::string& why) {
      throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument, model.source + ": model '" + model.name +
                                                                         "': key 'hook.command': program " +
                                                                         modelcast::shown_text(program, 4096) + " " + why);
    };
    const auto runnable = [](const std::string& path) {
      std::error_code ec;
      return std::filesystem::is_regular_file(path, ec) && access(path.c_str(), X_OK) == 0;
    };
    if (program.empty()) fail("is empty");
    if (program.find('/') != std::string::npos) {
      if (!runnable(program)) fail("is not an executable file");
      continue;
    }
    // posix_spawnp's search: PATH, or its default when PATH is unset; an empty entry is ".".
    const char* env = std::getenv("PATH");
    const std::string path = env ? env : "/bin:/usr/bin";
    bool found = false;
    for (std::size_t start = 0; !found && start <= path.size();) {
      const std::size_t end = std::min(path.find(':', start), path.size());
      const std::string dir = end > start ? path.substr(start, end - start) : ".";
      found = runnable(dir + "/" + program);
      start = end + 1;
    }
    if (!found) fail("is not an executable file in any directory of PATH (" + modelcast::shown_text(path, 4096) + ")");
  }
}

void check_key_files(DaemonConfig& config) {
  for (auto& model : config.models) {
    auto check = [&](const char* key, const std::string& file, auto load) {
      if (file.empty()) return;
      try {
        load(file);
      } catch (const modelcast::Error& e) {
        throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument, model.source + ": model '" + model.name +
                                                                           "': key '" + key + "' (" + modelcast::shown_text(file, 4096) +
                                                                           "): " + e.what());
      }
    };
    if (!model.producer_public_key.empty()) {
      try {
        modelcast::check_public_key(model.producer_public_key, "producer_public_key");
      } catch (const modelcast::Error& e) {
        throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument,
                               model.source + ": model '" + model.name + "': " + e.what());
      }
    }
    std::string producer_key, own_key;
    check("producer_key_file", model.producer_key_file, [&](const std::string& f) {
      producer_key = modelcast::load_public_key(f);
      // The trainer's key pair (its .pub forgotten) reads as its public key too, but the secret
      // in it lets whoever reads this host's files sign versions as the trainer.
      bool pair = false;
      try {
        (void)modelcast::load_key_pair(f);
        pair = true;
      } catch (const modelcast::Error&) {
      }
      if (pair) {
        throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument,
                               "holds a secret key (it is the trainer's key pair): give its public key file (the "
                               ".pub beside it), and keep the secret on the trainer's host");
      }
    });
    check("key_file", model.key_file, [&](const std::string& f) { own_key = modelcast::load_key_pair(f).public_key; });
    model.keys_held = producer_key + " " + own_key;
  }
}

}  // namespace modelcastd
