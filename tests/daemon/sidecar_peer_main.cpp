// modelcast-sidecar-peer: a local inference process attached to modelcastd, for the daemon's
// multi-process tests. Prints one line per event ("seen V", "torn ...", "held V").
//
//   follow --until-version N [--readers R]   wait for versions until N, checking every byte of
//                                            each, while R threads acquire and check views
//   hold                                     acquire the newest version, print "held V", then
//                                            wait for stdin to close (the test may kill us)
#include <atomic>
#include <cstdio>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "modelcast/error.h"
#include "modelcast/sidecar.h"
#include "sidecar_check.h"

using namespace std::chrono_literals;

namespace {

void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

int follow(const modelcast::sidecar::Client& client, std::uint64_t until, int readers, std::uint64_t seed) {
  std::atomic<bool> stop{false}, torn{false};
  std::atomic<std::uint64_t> checks{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < readers; ++r) {
    threads.emplace_back([&] {
      while (!stop) {
        auto view = client.acquire();
        if (!view) continue;
        if (auto problem = sidecar_test::check(view, seed); !problem.empty()) {
          say("torn " + problem);
          torn = true;
          return;
        }
        ++checks;
      }
    });
  }
  int status = 0;
  std::uint64_t seen = 0;
  while (seen < until) {
    auto view = client.wait_for_version(seen + 1, 60s);
    if (!view) {
      say("timeout waiting for version " + std::to_string(seen + 1));
      status = 2;
      break;
    }
    if (auto problem = sidecar_test::check(view, seed); !problem.empty()) {
      say("corrupt " + problem);
      status = 3;
    }
    seen = view.version();
    say("seen " + std::to_string(seen));
  }
  stop = true;
  for (auto& t : threads) t.join();
  if (torn) return 4;
  say("reader checks " + std::to_string(checks.load()));
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"modelcast sidecar test peer"};
  modelcast::sidecar::ClientOptions options;
  std::uint64_t until = 1, seed = 1;
  int readers = 0;
  app.add_option("--socket", options.socket_path)->required();
  app.add_option("--model", options.model)->required();
  app.add_option("--seed", seed);
  auto* follow_cmd = app.add_subcommand("follow");
  follow_cmd->add_option("--until-version", until);
  follow_cmd->add_option("--readers", readers);
  app.add_subcommand("hold");
  app.require_subcommand(1);
  CLI11_PARSE(app, argc, argv);
  options.connect_timeout = 30s;
  try {
    modelcast::sidecar::Client client(options);
    say("attached");
    if (*follow_cmd) return follow(client, until, readers, seed);
    auto view = client.wait_for_version(1, 60s);
    if (!view) {
      say("timeout");
      return 2;
    }
    say("held " + std::to_string(view.version()));
    std::string line;
    while (std::getline(std::cin, line)) {
    }
    return 0;
  } catch (const modelcast::Error& e) {
    say(std::string("error ") + e.what());
    return 1;
  }
}
