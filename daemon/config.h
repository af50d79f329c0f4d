// modelcastd's configuration: what the TOML file says, as plain structs with defaults.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "modelcast/consumer.h"

namespace modelcastd {

// What to tell the inference server once a version is in (and on disk, with a repository).
// Placeholders {model}, {version} and {path} are replaced in the URL and in every argument.
struct HookConfig {
  std::string http_post;              // URL; e.g. Triton's .../v2/repository/models/{model}/load
  std::vector<std::string> command;   // argv; run without a shell
  std::chrono::milliseconds timeout{10000};
  bool empty() const { return http_post.empty() && command.empty(); }
  bool operator==(const HookConfig& other) const = default;
};

struct ModelConfig {
  std::string name;                   // the model's name (producer's model_name)
  std::string endpoint;               // the producer's control endpoint
  std::uint64_t max_model_bytes = 0;  // required: sizes each shared-memory buffer
  std::size_t buffers = 4;            // >= 2; clients' holds and the repository writer pin some
  std::string producer_public_key;    // Z85; or producer_key_file
  std::string producer_key_file;
  std::string key_file;               // this daemon's key pair, for producers with an allow-list
  // The public keys the two files held when check_key_files read them: a key rotated in place
  // (same path, new key) makes the model a changed one, which a reload restarts.
  std::string keys_held;
  bool persist = true;                // write versions to the repository (when one is configured)
  bool serve_peers = true;            // relay blocks to other consumers when the producer asks
  // One of the group_size ranks of a server that switch versions together (ConsumerOptions::group,
  // needs buffers >= 3); empty: none.
  std::string group;
  std::uint32_t group_size = 0;
  // What this server keeps of each tensor, and in which dtype (ConsumerOptions::wants and
  // conversions): a tensor-parallel rank's shard, in the precision it serves. Clients then see
  // parts (with their place in the whole tensor) and converted tensors, which the daemon copies
  // into a shared-memory buffer of its own. Not with persist: the repository holds whole models.
  std::vector<modelcast::TensorWant> wants;
  std::vector<modelcast::TensorConversion> conversions;
  HookConfig hook;
  std::string source;                 // "file:line" where the model was declared, for messages
  bool operator==(const ModelConfig& other) const;
  // Equal but for the hook: what a reload can apply without restarting the model.
  bool same_but_hook(const ModelConfig& other) const;
};

struct DaemonConfig {
  std::string socket_path = "/run/modelcastd/attach.sock";  // clients attach here
  std::string log_level = "info";
  std::string http_listen = "127.0.0.1:9180";  // "" disables the ops endpoint
  std::string repository;                      // "" disables the on-disk repository
  std::size_t keep_versions = 3;               // newest K per model kept on disk
  std::vector<ModelConfig> models;
};

// The port of a HOST:PORT listen address ("[::1]:80" too), or nullopt when there is none or it
// lies outside 0-65535 (0: any free port).
std::optional<std::uint16_t> listen_port(const std::string& listen);

// What a config may be read from. A start reads a pipe too (`-c /dev/stdin`); a reload reads
// the file again on the thread that takes SIGTERM, so it takes only what it can open without
// waiting: a FIFO with no writer held that thread, and SIGTERM with it, until one came.
enum class ConfigFile { kAny, kRegularOnly };

// Reads and checks `path`. Throws modelcast::Error(kInvalidArgument) whose message starts with
// "<path>:<line>: key '<key>':" for an unknown key, a wrong type or a bad value, and names
// the file for one that cannot be read or parsed, or (kRegularOnly) is not a regular file, which
// it asks of the file it opened, so a file swapped for a FIFO meanwhile is refused too.
// Thread-safe (no shared state).
DaemonConfig load_config(const std::string& path, ConfigFile kind = ConfigFile::kAny);

// What load_config cannot see from the text: each model's key files (producer_key_file,
// key_file) exist and hold keys, which it records in keys_held. Throws Error(kInvalidArgument)
// naming the model, where it was declared, the key and the file. `--check`, start and reload
// call it, so a config that passes --check can start.
void check_key_files(DaemonConfig& config);

// What load_config cannot see either: each hook command's program can be run, as the daemon
// would run it (a name without '/' looked up in this process's PATH, as posix_spawnp does). A
// missing program failed every version's hook at run time while --check passed. Throws
// Error(kInvalidArgument) naming the model, where it was declared, the program and why. A
// program whose name holds a placeholder ({model}, {version}, {path}) is left to run time.
void check_hook_programs(const DaemonConfig& config);

}  // namespace modelcastd
