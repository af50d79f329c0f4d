// Shared set-up for the daemon tests: a scratch directory, config files, the daemon and the
// sidecar peer as child processes, and an in-process producer of the test model.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "child_process.h"
#include "exchange_fixture.h"
#include "modelcast/sidecar.h"

namespace daemon_test {

using namespace std::chrono_literals;
using testing_support::ChildProcess;

// A fresh directory under /tmp (short: it holds Unix socket paths), removed afterwards.
struct ScratchDir {
  ScratchDir() {
    char pattern[] = "/tmp/mcd-XXXXXX";
    path = mkdtemp(pattern);
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::permissions(path, std::filesystem::perms::owner_all, ignored);
    std::filesystem::remove_all(path, ignored);
  }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
  std::string path;
};

inline void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::trunc) << text;
}

// An [http] section that has the daemon pick a loopback port for its ops endpoint.
inline const std::string kHttp = "[http]\nlisten = \"127.0.0.1:0\"\n";

// The port the daemon logged for its ops endpoint at start (it was told to pick one).
inline int ops_port(const std::vector<std::string>& startup_lines) {
  for (const auto& line : startup_lines) {
    std::smatch m;
    if (std::regex_search(line, m, std::regex("ops endpoint at http://127\\.0\\.0\\.1:([0-9]+)/"))) return std::stoi(m[1]);
  }
  return 0;
}

// Reads lines until one contains `text`; returns it, or "" after `timeout`.
// Lines read are appended to `seen` when given.
inline std::string wait_for_text(ChildProcess& child, const std::string& text,
                                 std::chrono::milliseconds timeout = std::chrono::seconds(60),
                                 std::vector<std::string>* seen = nullptr) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return {};
    auto line = child.read_line(left);
    if (!line) return {};
    if (seen) seen->push_back(*line);
    if (line->find(text) != std::string::npos) return *line;
  }
}

class DaemonTest : public ::testing::Test {
 protected:
  void SetUp() override { setenv("UCX_NET_DEVICES", "lo", 1); }

  // A config serving model "test" from `endpoint`, plus `extra` TOML appended.
  std::string config(const std::string& endpoint, int buffers, const std::string& model_extra = "",
                     const std::string& extra = "", const std::string& max_bytes = "4MiB") {
    return "[daemon]\nsocket = \"" + socket() + "\"\n" + (extra.find("[http]") == std::string::npos ? "[http]\nlisten = \"\"\n" : "") +
           extra + "[[model]]\nname = \"test\"\nendpoint = \"" + endpoint + "\"\nmax_model_bytes = \"" + max_bytes +
           "\"\nbuffers = " + std::to_string(buffers) + "\n" + model_extra;
  }
  // A [repository] section at `path`.
  static std::string repository(const std::string& path, int keep) {
    return "[repository]\npath = \"" + path + "\"\nkeep = " + std::to_string(keep) + "\n";
  }
  // What the independent reader (read_safetensors.py) says of each entry of <repo>/test.
  static std::vector<std::string> read_repository(const std::string& repo, std::uint64_t seed = 1) {
    ChildProcess reader({"/usr/bin/python3", READ_SAFETENSORS_PY, repo + "/test", std::to_string(seed)});
    EXPECT_EQ(reader.wait(), 0);
    return reader.lines();
  }
  std::string socket() const { return dir / "attach.sock"; }

  // A producer of a 1 MiB model and a daemon (4 buffers) that has been sent its version 1.
  struct ServingFirst {
    std::unique_ptr<exchange_test::TestProducer> producer;
    std::string endpoint;
    std::unique_ptr<ChildProcess> daemon;
  };
  ServingFirst serve_first_version() {
    ServingFirst s;
    s.producer = std::make_unique<exchange_test::TestProducer>(1024);
    s.endpoint = s.producer->producer->control_endpoint();
    s.daemon = start_daemon(config(s.endpoint, 4));
    EXPECT_TRUE(s.producer->producer->wait_for_consumers(1, std::chrono::seconds(30)));
    s.producer->publish(1);
    return s;
  }

  // `launcher`: a program (and its arguments) that runs the daemon's command line.
  std::unique_ptr<ChildProcess> start_daemon(const std::string& config_text, std::vector<std::string> launcher = {}) {
    write_file(dir / "modelcastd.toml", config_text);
    launcher.insert(launcher.end(), {MODELCASTD, "--config", dir / "modelcastd.toml"});
    auto daemon = std::make_unique<ChildProcess>(launcher);
    startup_lines.clear();
    EXPECT_NE(wait_for_text(*daemon, " ready ", std::chrono::seconds(60), &startup_lines), "") << "modelcastd did not start";
    return daemon;
  }

  std::unique_ptr<ChildProcess> start_peer(std::vector<std::string> args) {
    std::vector<std::string> argv{MODELCAST_SIDECAR_PEER, "--socket", socket(), "--model", "test"};
    argv.insert(argv.end(), args.begin(), args.end());
    return std::make_unique<ChildProcess>(argv);
  }

  modelcast::sidecar::Client client() {
    return modelcast::sidecar::Client({socket(), "test", std::chrono::seconds(30)});
  }

  ScratchDir dir;
  std::vector<std::string> startup_lines;  // what the last daemon started logged until ready
};

}  // namespace daemon_test
