// Config files: a good one is read as written; each bad one is refused with the file, the line
// and the key named, by load_config and by modelcastd itself.
#include "daemon/config.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <thread>
#include <tuple>

#include "daemon_fixture.h"
#include "modelcast/error.h"
#include "modelcast/keys.h"

namespace daemon_test {
namespace {

const char* kGood = R"(# a full config
[daemon]
socket = "/tmp/x.sock"
log_level = "debug"

[http]
listen = "127.0.0.1:9999"

[repository]
path = "/var/lib/modelcastd"
keep = 5

[[model]]
name = "resnet"
endpoint = "tcp://10.0.0.5:7000"
producer_key_file = "/etc/modelcastd/trainer.key.pub"
max_model_bytes = "1GiB"
buffers = 5
persist = false
serve_peers = false
group = "resnet-tp"
group_size = 2
[model.wants]
"*" = { dim = 1, index = 1, count = 2 }
"lm_head.weight" = "whole"
"aux" = "nothing"
"emb" = { boxes = [{ offset = [0, 8], extent = [16, 8] }] }
[model.convert]
"*" = "bf16"
"lm_head.weight" = { to = "f8e4m3", fp8_block = 128 }
[model.hook]
http_post = "http://127.0.0.1:8000/v2/repository/models/{model}/load"

[[model]]
name = "bert"
endpoint = "ipc:///run/bert.sock"
max_model_bytes = 1048576
[model.hook]
command = ["/usr/bin/touch", "{path}"]
)";

TEST(DaemonConfig, AGoodFileIsReadAsWritten) {
  ScratchDir dir;
  write_file(dir / "good.toml", kGood);
  auto c = modelcastd::load_config(dir / "good.toml");
  EXPECT_EQ(c.socket_path, "/tmp/x.sock");
  EXPECT_EQ(c.log_level, "debug");
  EXPECT_EQ(c.http_listen, "127.0.0.1:9999");
  EXPECT_EQ(c.repository, "/var/lib/modelcastd");
  EXPECT_EQ(c.keep_versions, 5u);
  ASSERT_EQ(c.models.size(), 2u);
  EXPECT_EQ(c.models[0].name, "resnet");
  EXPECT_EQ(c.models[0].max_model_bytes, 1ull << 30);
  EXPECT_EQ(c.models[0].buffers, 5u);
  EXPECT_FALSE(c.models[0].persist);
  EXPECT_FALSE(c.models[0].serve_peers);
  EXPECT_TRUE(c.models[1].serve_peers);  // the default
  EXPECT_EQ(c.models[0].group, "resnet-tp");
  EXPECT_EQ(c.models[0].group_size, 2u);
  EXPECT_TRUE(c.models[1].group.empty());  // the default: no group
  using modelcast::TensorWant;
  const auto& wants = c.models[0].wants;
  ASSERT_EQ(wants.size(), 4u);  // in key order
  EXPECT_EQ(wants[0].tensor, "*");
  EXPECT_EQ(wants[0].kind, TensorWant::Kind::kShard);
  EXPECT_EQ(std::tuple(wants[0].dim, wants[0].index, wants[0].count), std::tuple(1u, 1u, 2u));
  EXPECT_EQ(wants[1].tensor, "aux");
  EXPECT_EQ(wants[1].kind, TensorWant::Kind::kNothing);
  EXPECT_EQ(wants[2].tensor, "emb");
  ASSERT_EQ(wants[2].kind, TensorWant::Kind::kBoxes);
  ASSERT_EQ(wants[2].boxes.size(), 1u);
  EXPECT_EQ(wants[2].boxes[0].offset, (std::vector<std::int64_t>{0, 8}));
  EXPECT_EQ(wants[2].boxes[0].extent, (std::vector<std::int64_t>{16, 8}));
  EXPECT_EQ(wants[3].tensor, "lm_head.weight");
  EXPECT_EQ(wants[3].kind, TensorWant::Kind::kWhole);
  const auto& conversions = c.models[0].conversions;
  ASSERT_EQ(conversions.size(), 2u);
  EXPECT_EQ(conversions[0].tensor, "*");
  EXPECT_EQ(conversions[0].to, modelcast::DType::kBF16);
  EXPECT_EQ(conversions[1].tensor, "lm_head.weight");
  EXPECT_EQ(conversions[1].to, modelcast::DType::kF8E4M3);
  EXPECT_EQ(conversions[1].fp8_block, 128u);
  EXPECT_TRUE(c.models[1].wants.empty());  // the default: every tensor whole, as sent
  EXPECT_TRUE(c.models[1].conversions.empty());
  // A reload sees a change of wants or conversions as a changed model.
  auto changed = c.models[0];
  changed.wants[0].index = 0;
  EXPECT_FALSE(changed == c.models[0]);
  changed = c.models[0];
  changed.conversions[1].fp8_block = 64;
  EXPECT_FALSE(changed == c.models[0]);
  EXPECT_TRUE(c.models[0] == c.models[0]);
  EXPECT_EQ(c.models[0].hook.http_post, "http://127.0.0.1:8000/v2/repository/models/{model}/load");
  EXPECT_EQ(c.models[1].max_model_bytes, 1048576u);
  EXPECT_EQ(c.models[1].buffers, 4u);  // the default
  EXPECT_TRUE(c.models[1].persist);
  EXPECT_EQ(c.models[1].hook.command, (std::vector<std::string>{"/usr/bin/touch", "{path}"}));
}

// The daemon configuration shown in the README is one the daemon reads as written.
TEST(DaemonConfig, TheReadmesConfigIsValid) {
  std::ifstream readme(std::string(MODELCAST_SOURCE_DIR) + "/README.md");
  ASSERT_TRUE(readme) << "cannot read README.md";
  std::string line, toml;
  bool inside = false;
  int blocks = 0;
  while (std::getline(readme, line)) {
    if (!inside && line == "```toml") {
      inside = true;
      blocks++;
    } else if (inside && line.rfind("```", 0) == 0) {
      inside = false;
    } else if (inside) {
      toml += line + "\n";
    }
  }
  ASSERT_EQ(blocks, 1) << "the README should show one daemon configuration";
  ScratchDir dir;
  write_file(dir / "readme.toml", toml);
  auto config = modelcastd::load_config(dir / "readme.toml");
  EXPECT_FALSE(config.models.empty());
}

struct BadCase {
  std::string text;
  int line;
  const char* key;
  const char* why;
};

const char* kModel = "[[model]]\nname = \"m\"\nendpoint = \"tcp://127.0.0.1:1\"\nmax_model_bytes = \"1MiB\"\n";

TEST(DaemonConfig, EachBadFileNamesFileLineAndKey) {
  std::string model = kModel;
  const BadCase cases[] = {
      {"[daemon]\nsockte = \"/x\"\n", 2, "daemon.sockte", "unknown key"},
      {"[daemon]\nlog_level = \"loud\"\n", 2, "daemon.log_level", "must be one of"},
      {"[daemon]\nsocket = 5\n", 2, "daemon.socket", "must be a string"},
      // Passed --check and then stopped the start.
      {"[daemon]\nsocket = \"/" + std::string(120, 'a') + "\"\n", 2, "daemon.socket", "at most 107"},
      {"[http]\nlisten = \"localhost\"\n", 2, "http.listen", "HOST:PORT"},
      {"[http]\nlisten = \"127.0.0.1:99999\"\n", 2, "http.listen", "PORT 0-65535"},
      {"[http]\nlisten = \"127.0.0.1:80x\"\n", 2, "http.listen", "PORT 0-65535"},
      // Passed --check; the start said "is another process listening there?".
      {"[http]\nlisten = \":9180\"\n", 2, "http.listen", "has no HOST"},
      {"[repository]\npath = \"/r\"\nkeep = 0\n", 3, "repository.keep", "between 1 and"},
      // Ran with no repository, without a word.
      {"[repository]\nkeep = 5\n", 1, "repository.path", "is missing or empty"},
      {"[repository]\npath = \"\"\n", 2, "repository.path", "is missing or empty"},
      // Passed --check and was used up to the NUL (another directory).
      {"[repository]\npath = \"/srv/repo\\u0000x\"\n", 2, "repository.path",
       "'/srv/repo\\x00x' contains a NUL byte at 9, which no path"},
      {"colour = \"blue\"\n", 1, "colour", "unknown key"},
      {(model + "buffers = 1\n"), 5, "model[0].buffers", "between 2 and"},
      {(model + "bufers = 3\n"), 5, "model[0].bufers", "unknown key"},
      {"[[model]]\nname = \"m\"\nendpoint = \"tcp://127.0.0.1:1\"\nmax_model_bytes = \"12 parsecs\"\n", 4,
       "model[0].max_model_bytes", "not a byte count"},
      {"[[model]]\nname = \"m\"\nendpoint = \"tcp://127.0.0.1:1\"\nmax_model_bytes = \"0\"\n", 4,
       "model[0].max_model_bytes", "out of range"},
      {"[[model]]\nname = \"m\"\nendpoint = \"tcp://127.0.0.1:1\"\nmax_model_bytes = \"2000000GiB\"\n", 4,
       "model[0].max_model_bytes", "out of range"},
      // Past 64 bits: was "not a byte count".
      {"[[model]]\nname = \"m\"\nendpoint = \"tcp://127.0.0.1:1\"\nmax_model_bytes = \"99999999999999999999999GiB\"\n", 4,
       "model[0].max_model_bytes", "out of range"},
      // A blank before the port: was "on another host".
      {"[[model]]\nname = \"m\"\nendpoint = \"tcp://127.0.0.1 :7000\"\nmax_model_bytes = 1\n", 3, "model[0].endpoint",
       "without blanks; got 'tcp://127.0.0.1 :7000'"},
      {"[[model]]\nname = \"m\"\nendpoint = \"tcp://127.0.0.1:1\"\n", 1, "model[0].max_model_bytes", "is required"},
      {"[[model]]\nname = \"m\"\nendpoint = \"garbage\"\nmax_model_bytes = 1\n", 3, "model[0].endpoint", "tcp://HOST:PORT"},
      {"[[model]]\nname = \"m\"\nendpoint = \"tcp://127.0.0.1\"\nmax_model_bytes = 1\n", 3, "model[0].endpoint",
       "tcp://HOST:PORT"},
      {"[[model]]\nname = \"m\"\nendpoint = \"tcp://127.0.0.1:0\"\nmax_model_bytes = 1\n", 3, "model[0].endpoint",
       "PORT 1-65535"},
      {"[[model]]\nname = \"m\"\nendpoint = \"tcp://10.0.0.5:7000\"\nmax_model_bytes = 1\n", 3, "model[0].endpoint",
       "on another host: pin the producer's key with producer_key_file"},
      {"[[model]]\nname = \"m\"\nendpoint = \"tcp://127.0.0.1.example.com:7000\"\nmax_model_bytes = 1\n", 3,
       "model[0].endpoint", "on another host"},
      // A mistyped address: was "on another host", and with a key it passed --check and never connected.
      {"[[model]]\nname = \"m\"\nendpoint = \"tcp://127.0.0.256:7000\"\nmax_model_bytes = 1\n", 3,
       "model[0].endpoint", "'127.0.0.256' is no IPv4 address"},
      {"[[model]]\nname = \"m\"\nendpoint = \"tcp://0.0.0.0:7000\"\nmax_model_bytes = 1\n", 3,
       "model[0].endpoint", "is a wildcard a producer binds to"},
      {"[[model]]\nname = \"a/b\"\nendpoint = \"x\"\nmax_model_bytes = 1\n", 2, "model[0].name", "must not contain"},
      // Passed --check and then stopped the start (memfd_create: Invalid argument).
      {"[[model]]\nname = \"" + std::string(300, 'm') + "\"\nendpoint = \"x\"\nmax_model_bytes = 1\n", 2, "model[0].name",
       "is 300 bytes; at most 255"},
      {(model + model), 5, "model[1].name", "listed twice"},
      {(model + "[model.hook]\nhttp_post = \"ftp://x\"\n"), 6, "model[0].hook.http_post", "http://"},
      {(model + "[model.hook]\ncommand = []\n"), 6, "model[0].hook.command", "non-empty array"},
      // Both passed the check: one failed at every version, the other ran nothing.
      {(model + "[model.hook]\ncommand = [\"\", \"x\"]\n"), 6, "model[0].hook.command", "names no program"},
      // Passed the check, which tested the program before the NUL; exec took "a\0b" as "a".
      {(model + "[model.hook]\ncommand = [\"/bin/echo\", \"a\\u0000b\"]\n"), 6, "model[0].hook.command",
       "element 1 holds a NUL at byte 1"},
      {(model + "[model.hook]\ntimeout_ms = 5000\n"), 5, "model[0].hook.http_post", "is missing"},
      // httplib's std::stoi threw on the hook thread at the first version (the daemon aborted);
      // 70000 posted to port 4464 and was logged as a success.
      {(model + "[model.hook]\nhttp_post = \"http://127.0.0.1:99999999999/load\"\n"), 6, "model[0].hook.http_post",
       "a port is 1-65535"},
      {(model + "[model.hook]\nhttp_post = \"http://127.0.0.1:70000/load\"\n"), 6, "model[0].hook.http_post",
       "has port '70000'"},
      {(model + "[model.hook]\nhttp_post = \"http://{model}:8000/load\"\n"), 6, "model[0].hook.http_post",
       "with a literal HOST"},
      // Posted, percent-encoded, to a path no server serves, and logged raw (a forged log line).
      {(model + "[model.hook]\nhttp_post = \"http://127.0.0.1:8000/load\\nmodel m: version 9 loaded\"\n"), 6,
       "model[0].hook.http_post", "holds a control character at byte 26"},
      {(model + "[model.hook]\nhttp_post = \"http://[::1:8000/load\"\n"), 6, "model[0].hook.http_post",
       "with a literal HOST"},
      // Passed --check, then the consumer refused them at the start (and the log showed them raw).
      {"[[model]]\nname = \"a\\nb\"\nendpoint = \"x\"\nmax_model_bytes = 1\n", 2, "model[0].name",
       "'a\\x0ab' contains a control character at byte 1"},
      {"[[model]]\nname = \"a\\u0000b\"\nendpoint = \"x\"\nmax_model_bytes = 1\n", 2, "model[0].name",
       "'a\\x00b' contains a NUL byte at 1"},
      {(model + "group = \"t\\tp\"\ngroup_size = 2\nbuffers = 3\n"), 5, "model[0].group", "control character at byte 1"},
      {(model + "[model.hook]\nretries = 2\n"), 6, "model[0].hook.retries", "unknown key"},
      // Passed the check and were sent literally at every version.
      {(model + "[model.hook]\nhttp_post = \"http://127.0.0.1:8000/v2/repository/models/{model}/load?v={verison}\"\n"), 6,
       "model[0].hook.http_post", "has '{verison}', which is no placeholder: they are {model}, {version} and {path}"},
      {(model + "[model.hook]\ncommand = [\"/bin/echo\", \"${HOME}/{path}\"]\n"), 6, "model[0].hook.command", "has '{HOME}'"},
      {(model + "persist = \"yes\"\n"), 5, "model[0].persist", "true or false"},
      // Ignored: versions asked for on disk, with nowhere to write them.
      {(model + "persist = true\n"), 5, "model[0].persist", "= true needs a [repository] section with its path"},
      {(model + "group = \"tp\"\n"), 1, "model[0].group_size", "is required with group"},
      {(model + "group_size = 2\n"), 5, "model[0].group", "is required with group_size"},
      {(model + "group = \"tp\"\ngroup_size = 0\n"), 6, "model[0].group_size", "between 1 and"},
      {(model + "buffers = 2\ngroup = \"tp\"\ngroup_size = 2\n"), 5, "model[0].buffers", ">= 3 for a group member"},
      {(model + "persist = false\n[model.wants]\nw = \"half\"\n"), 7, "model[0].wants.\"w\"", "\"whole\", \"nothing\""},
      {(model + "persist = false\n[model.wants]\nw = { dim = 0, index = 2, count = 2 }\n"), 7,
       "model[0].wants.\"w\".index", "between 0 and 1"},
      {(model + "persist = false\n[model.wants]\nw = { dim = 0, count = 2 }\n"), 7, "model[0].wants.\"w\"",
       "needs dim, index and count"},
      {(model + "persist = false\n[model.wants]\nw = { boxes = [{ offset = [0], extent = [1, 2] }] }\n"), 7,
       "model[0].wants.\"w\".boxes", "one entry per dimension"},
      {(model + "persist = false\n[model.wants]\nw = { boxes = [{ offset = [-1], extent = [1] }] }\n"), 7,
       "model[0].wants.\"w\".boxes.offset", "between 0 and"},
      {(model + "persist = false\n[model.wants]\nw = { boxes = [{ offset = [0, 0], extent = [4, 4] }, "
                "{ offset = [2, 2], extent = [4, 4] }] }\n"), 7, "model[0].wants.\"w\".boxes", "box 2 overlaps box 1"},
      {(model + "persist = false\n[model.wants]\nw = { boxes = [{ offset = [0, 0], extent = [4, 0] }] }\n"), 7,
       "model[0].wants.\"w\".boxes", "extent of 0 holds nothing"},
      {(model + "persist = false\n[model.wants]\nw = { boxes = [{ offset = [0, 0], extent = [4, 4] }, "
                "{ offset = [8], extent = [4] }] }\n"), 7, "model[0].wants.\"w\".boxes", "as many dimensions as the first"},
      {(model + "persist = false\n[model.wants]\nw = { dim = 16, index = 0, count = 2 }\n"), 7,
       "model[0].wants.\"w\".dim", "between 0 and 15"},
      {(model + "persist = false\n[model.convert]\nw = \"f64\"\n"), 7, "model[0].convert.\"w\"", "must be one of"},
      {(model + "persist = false\n[model.convert]\nw = { to = \"bf16\", fp8_block = 32 }\n"), 7,
       "model[0].convert.\"w\".fp8_block", "f8e4m3 only"},
      {(model + "[model.convert]\nw = \"bf16\"\n"), 5, "model[0].convert", "needs persist = false"},
      // Passed --check; a reload to them stopped the model and the consumer then refused them.
      {(model + "persist = false\n[model.convert]\n\"\" = \"bf16\"\n"), 7, "model[0].convert.\"\"", "names no tensor"},
      {(model + "persist = false\n[model.wants]\n\"a\\u0001b\" = \"whole\"\n"), 7, "model[0].wants.\"a\\x01b\"",
       "contains a control character at byte 1"},
      // Passed --check; the model then never started ("File name too long").
      {"[[model]]\nname = \"m\"\nendpoint = \"ipc:///run/" + std::string(200, 'a') + "\"\nmax_model_bytes = 1\n", 3,
       "model[0].endpoint", "ipc:// path is 205 bytes; a Unix socket path holds at most 107"},
      // Split the log line that showed the endpoint.
      {"[[model]]\nname = \"m\"\nendpoint = \"ipc:///run/a\\nb\"\nmax_model_bytes = 1\n", 3, "model[0].endpoint",
       "without blanks"},
      // Read as no key: plaintext, unsigned versions where the operator meant to pin one.
      {(model + "producer_key_file = \"\"\n"), 5, "model[0].producer_key_file", "is empty; leave the key out for none"},
      {(model + "producer_public_key = \"\"\n"), 5, "model[0].producer_public_key", "is empty"},
      {(model + "key_file = \"\"\n"), 5, "model[0].key_file", "is empty"},
      // A key is shown escaped: a newline in it forged a log line inside the refusal.
      {"[daemon]\n\"x\\n2026-12-05 info reloaded\" = 1\n" + model, 2, "daemon.x\\x0a2026-12-05 info reloaded", "unknown key"},
  };
  ScratchDir dir;
  int index = 0;
  for (const auto& c : cases) {
    std::string path = dir / ("bad" + std::to_string(index++) + ".toml");
    write_file(path, c.text);
    try {
      modelcastd::load_config(path);
      ADD_FAILURE() << "accepted:\n" << c.text;
    } catch (const modelcast::Error& e) {
      EXPECT_EQ(e.code(), modelcast::ErrorCode::kInvalidArgument);
      std::string expected = path + ":" + std::to_string(c.line) + ": key '" + c.key + "': ";
      EXPECT_EQ(std::string(e.what()).rfind(expected, 0), 0u) << "got: " << e.what() << "\nwanted: " << expected;
      EXPECT_NE(std::string(e.what()).find(c.why), std::string::npos) << e.what();
    }
  }
}

// Plaintext stays on this host: any loopback form needs no key, another host needs one.
// Braces that are not around a bare name (JSON in an argument) are the operator's, not a typo.
TEST(DaemonConfig, AHookArgumentMayHoldOtherBraces) {
  ScratchDir dir;
  write_file(dir / "json.toml", std::string(kModel) + "persist = false\n[model.hook]\ncommand = [\"/bin/echo\", " +
                                     "\"{\\\"model\\\": \\\"{model}\\\", \\\"v\\\": {version}}\"]\n");
  const auto config = modelcastd::load_config(dir / "json.toml");
  ASSERT_EQ(config.models.at(0).hook.command.size(), 2u);
  EXPECT_EQ(config.models.at(0).hook.command[1], "{\"model\": \"{model}\", \"v\": {version}}");
}

TEST(DaemonConfig, OnlyAnotherHostsEndpointNeedsTheProducersKey) {
  ScratchDir dir;
  int index = 0;
  for (const char* endpoint : {"tcp://127.0.0.1:7000", "tcp://127.1.2.3:7000", "tcp://localhost:7000",
                               "tcp://[::1]:7000", "ipc:///run/m.sock"}) {
    std::string path = dir / ("local" + std::to_string(index++) + ".toml");
    write_file(path, std::string("[[model]]\nname = \"m\"\nendpoint = \"") + endpoint + "\"\nmax_model_bytes = 1\n");
    EXPECT_NO_THROW(modelcastd::load_config(path)) << endpoint;
  }
  write_file(dir / "remote.toml",
             "[[model]]\nname = \"m\"\nendpoint = \"tcp://10.0.0.5:7000\"\nmax_model_bytes = 1\n"
             "producer_public_key = \"k\"\n");
  EXPECT_EQ(modelcastd::load_config(dir / "remote.toml").models.at(0).endpoint, "tcp://10.0.0.5:7000");
}

TEST(DaemonConfig, ATomlSyntaxErrorNamesFileAndLine) {
  ScratchDir dir;
  write_file(dir / "broken.toml", "[daemon]\nsocket = \"unterminated\n");
  try {
    modelcastd::load_config(dir / "broken.toml");
    FAIL();
  } catch (const modelcast::Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(dir / "broken.toml:2: ", 0), 0u) << e.what();
  }
}

// toml++ reads a directory as an empty document, which is a valid config with no model: given
// by mistake at start or at a reload, it would drop every model.
TEST(DaemonConfig, AFileThatCannotBeReadSaysWhy) {
  // toml++ said "<file>:0: File could not be opened for reading", without the reason.
  ScratchDir dir;
  try {
    modelcastd::load_config(dir / "missing.toml");
    FAIL() << "a missing file was read as a config";
  } catch (const modelcast::Error& e) {
    EXPECT_EQ(e.code(), modelcast::ErrorCode::kInvalidArgument);
    EXPECT_EQ(std::string(e.what()), (dir / "missing.toml") + ": cannot be read: No such file or directory");
  }
}

// A pipe (modelcastd -c /dev/stdin, a process substitution) was "File could not be opened for
// reading": toml++ asks a file for its size. /dev/zero, unbounded, would be read until memory ran out.
TEST(DaemonConfig, AConfigFromAPipeIsReadAndAnEndlessOneRefused) {
  ScratchDir dir;
  const std::string fifo = dir / "config.fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  std::thread writer([&] {
    std::ofstream out(fifo);  // opens once the reader does
    out << kModel;
  });
  const auto config = modelcastd::load_config(fifo);
  writer.join();
  ASSERT_EQ(config.models.size(), 1u);
  EXPECT_EQ(config.models[0].name, "m");
  try {
    modelcastd::load_config("/dev/zero");
    FAIL() << "/dev/zero was read as a config";
  } catch (const modelcast::Error& e) {
    EXPECT_EQ(std::string(e.what()), "/dev/zero: is larger than 16 MiB: not a config file");
  }
}

// A reload asks for a regular file of what it opened, not of the path before opening it: a
// config swapped for a FIFO after such a check held the signal thread, and SIGTERM, until a
// writer came. Here no writer ever comes; the old reading would wait for good.
TEST(DaemonConfig, AReloadRefusesAFifoWithoutWaitingForAWriter) {
  ScratchDir dir;
  const std::string fifo = dir / "config.fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  try {
    modelcastd::load_config(fifo, modelcastd::ConfigFile::kRegularOnly);
    FAIL() << "a FIFO was read as a config to reload";
  } catch (const modelcast::Error& e) {
    EXPECT_EQ(e.code(), modelcast::ErrorCode::kInvalidArgument);
    EXPECT_EQ(std::string(e.what()).rfind("'" + fifo + "' is a pipe: a reload reads the config file again", 0), 0u)
        << e.what();
  }
  const std::string file = dir / "good.toml";
  std::ofstream(file) << kModel;
  EXPECT_EQ(modelcastd::load_config(file, modelcastd::ConfigFile::kRegularOnly).models.size(), 1u);
}

// A config says whom to trust and which commands hooks run as the daemon's user: one that others
// may write (or replace, in a directory all may write) was read without a word.
TEST(DaemonConfig, AConfigOtherUsersMayWriteOrReplaceIsRefused) {
  ScratchDir dir;
  const std::string file = dir / "modelcastd.toml";
  write_file(file, std::string(kModel));
  ASSERT_EQ(chmod(file.c_str(), 0644), 0);
  EXPECT_NO_THROW(modelcastd::load_config(file));
  for (auto [mode, who] : {std::pair{0666, "every user"}, std::pair{0664, "its group"}}) {
    ASSERT_EQ(chmod(file.c_str(), mode), 0);
    try {
      modelcastd::load_config(file);
      ADD_FAILURE() << "mode " << mode << " taken";
    } catch (const modelcast::Error& e) {
      EXPECT_NE(std::string(e.what()).find(file + ": " + who + " may write it"), std::string::npos) << e.what();
    }
  }
  const std::string open = dir / "open";
  ASSERT_EQ(mkdir(open.c_str(), 0777), 0);
  ASSERT_EQ(chmod(open.c_str(), 0777), 0);  // every user may write it, no sticky bit
  write_file(open + "/modelcastd.toml", std::string(kModel));
  ASSERT_EQ(chmod((open + "/modelcastd.toml").c_str(), 0644), 0);
  try {
    modelcastd::load_config(open + "/modelcastd.toml");
    ADD_FAILURE() << "a config in a directory every user may write was taken";
  } catch (const modelcast::Error& e) {
    EXPECT_NE(std::string(e.what()).find(open + "/modelcastd.toml: "), std::string::npos) << e.what();
  }
  // A newline in the path: shown escaped, so the message cannot forge a log line (the path was
  // printed raw, twice).
  const std::string forged = dir / "evil\n[modelcastd] [info] all good";
  ASSERT_EQ(mkdir(forged.c_str(), 0777), 0);
  ASSERT_EQ(chmod(forged.c_str(), 0777), 0);
  write_file(forged + "/modelcastd.toml", std::string(kModel));
  ASSERT_EQ(chmod((forged + "/modelcastd.toml").c_str(), 0644), 0);
  try {
    modelcastd::load_config(forged + "/modelcastd.toml");
    ADD_FAILURE() << "a config in a directory every user may write was taken";
  } catch (const modelcast::Error& e) {
    EXPECT_NE(std::string(e.what()).find("evil\\x0a[modelcastd]"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
  }
}

TEST(DaemonConfig, ADirectoryIsRefusedAsAConfig) {
  ScratchDir dir;
  try {
    modelcastd::load_config(dir.path);
    FAIL() << "a directory was read as a config";
  } catch (const modelcast::Error& e) {
    EXPECT_EQ(e.code(), modelcast::ErrorCode::kInvalidArgument);
    EXPECT_EQ(std::string(e.what()), dir.path + ": is a directory, not a config file");
  }
}

// An empty file, as an editor leaves it mid-write, read at a reload stopped every model.
TEST(DaemonConfig, AConfigWithNoModelIsRefused) {
  ScratchDir dir;
  for (const char* text : {"", "# comments only\n", "[daemon]\nlog_level = \"debug\"\n"}) {
    write_file(dir / "c.toml", text);
    try {
      modelcastd::load_config(dir / "c.toml");
      ADD_FAILURE() << "accepted: " << text;
    } catch (const modelcast::Error& e) {
      EXPECT_EQ(e.code(), modelcast::ErrorCode::kInvalidArgument);
      EXPECT_EQ(std::string(e.what()).rfind(dir / "c.toml: configures no model", 0), 0u) << e.what();
    }
  }
}

// A repository path that names a file, or lies under one (which passed --check: the daemon
// started and every write failed), is refused; one yet to be made under a directory is not.
TEST(DaemonConfig, ARepositoryPathThatNamesAFileOrLiesUnderOneIsRefused) {
  ScratchDir dir;
  write_file(dir / "afile", "not a directory");
  for (const auto& [path, said] : {std::pair{dir / "afile", "'" + dir / "afile" + "' is a file, not a directory"},
                                   std::pair{dir / "afile/models/v1", "'" + dir / "afile/models/v1" + "' lies under '" +
                                                                          dir / "afile" + "', which is a file"}}) {
    write_file(dir / "c.toml", "[repository]\npath = \"" + path + "\"\n");
    try {
      modelcastd::load_config(dir / "c.toml");
      ADD_FAILURE() << "taken as the repository: " << path;
    } catch (const modelcast::Error& e) {
      EXPECT_EQ(std::string(e.what()), dir / "c.toml:2: key 'repository.path': " + said);
    }
  }
  write_file(dir / "c.toml", "[repository]\npath = \"" + dir / "models/v1" + "\"\n" + kModel);
  EXPECT_NO_THROW(modelcastd::load_config(dir / "c.toml"));
}

// A file where a persisted model's directory goes failed every version's write at run time while
// --check passed; a model that is not persisted does not write there.
TEST(DaemonConfig, AFileWhereAModelsRepositoryDirectoryGoesIsRefused) {
  ScratchDir dir;
  std::filesystem::create_directory(dir / "repo");
  write_file(dir / "repo/resnet", "not a directory");
  const std::string model = "[[model]]\nname = \"resnet\"\nendpoint = \"tcp://127.0.0.1:7000\"\nmax_model_bytes = \"1MiB\"\n";
  write_file(dir / "c.toml", "[repository]\npath = \"" + dir / "repo" + "\"\n" + model);
  try {
    modelcastd::load_config(dir / "c.toml");
    FAIL() << "a file was taken as the model's repository directory";
  } catch (const modelcast::Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(dir / "c.toml:4: key 'model[0].name': ", 0), 0u) << e.what();
    EXPECT_NE(std::string(e.what()).find("'" + dir / "repo" + "/resnet', where the repository keeps this model's versions, is a file"),
              std::string::npos) << e.what();
  }
  write_file(dir / "c.toml", "[repository]\npath = \"" + dir / "repo" + "\"\n" + model + "persist = false\n");
  EXPECT_EQ(modelcastd::load_config(dir / "c.toml").models.size(), 1u);
}

TEST(DaemonConfig, TheDaemonRefusesABadFileNamingIt) {
  ScratchDir dir;
  write_file(dir / "bad.toml", std::string(kModel) + "buffers = \"many\"\n");
  ChildProcess daemon({MODELCASTD, "--config", dir / "bad.toml"});
  EXPECT_EQ(daemon.wait(), 2);
  bool named = false;
  for (const auto& line : daemon.lines()) {
    named = named || line.find(dir / "bad.toml:5: key 'model[0].buffers': must be an integer") != std::string::npos;
  }
  EXPECT_TRUE(named);
}

TEST(DaemonConfig, AKeyRotatedInPlaceMakesTheModelAChangedOne) {
  // A reload compared key file paths only: a key replaced at the same path was "unchanged", so
  // SIGHUP said "reloaded" and the model kept the old key until a restart.
  ScratchDir dir;
  modelcast::save_key_pair(modelcast::generate_key_pair(), (dir / "daemon.key"));
  write_file(dir / "keys.toml", std::string(kModel) + "key_file = \"" + (dir / "daemon.key") + "\"\n" +
                                   "producer_public_key = \"" + modelcast::generate_key_pair().public_key + "\"\n");
  auto running = modelcastd::load_config(dir / "keys.toml");
  modelcastd::check_key_files(running);
  auto same = modelcastd::load_config(dir / "keys.toml");
  modelcastd::check_key_files(same);
  EXPECT_TRUE(same.models[0] == running.models[0]);
  modelcast::save_key_pair(modelcast::generate_key_pair(), (dir / "daemon.key"), /*overwrite=*/true);
  auto rotated = modelcastd::load_config(dir / "keys.toml");
  modelcastd::check_key_files(rotated);
  EXPECT_FALSE(rotated.models[0] == running.models[0]);
}

// A config whose key files are missing once passed --check ("ok, 1 model(s)") and then started
// a daemon that served nothing and said it was ready. --check, start and reload now load them.
TEST(DaemonConfig, MissingKeyFilesFailTheCheckAndTheStartNamingModelKeyAndFile) {
  ScratchDir dir;
  std::string missing = (dir / "trainer.key.pub");
  write_file(dir / "keys.toml", std::string(kModel) + "producer_key_file = \"" + missing + "\"\n");
  auto config = modelcastd::load_config(dir / "keys.toml");  // the text itself is fine
  try {
    modelcastd::check_key_files(config);
    FAIL() << "a missing producer_key_file passed";
  } catch (const modelcast::Error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("model 'm'"), std::string::npos) << what;
    EXPECT_NE(what.find("producer_key_file"), std::string::npos) << what;
    EXPECT_NE(what.find(missing), std::string::npos) << what;
  }
  for (std::vector<std::string> args : {std::vector<std::string>{"--check"}, std::vector<std::string>{}}) {
    std::vector<std::string> argv{MODELCASTD, "--config", (dir / "keys.toml")};
    argv.insert(argv.end(), args.begin(), args.end());
    ChildProcess daemon(argv);
    EXPECT_EQ(daemon.wait(), 2) << (args.empty() ? "start" : "--check");
    bool named = false;
    for (const auto& line : daemon.lines()) named = named || line.find(missing) != std::string::npos;
    EXPECT_TRUE(named);
  }

  // With the key there, both pass.
  modelcast::save_key_pair(modelcast::generate_key_pair(), (dir / "trainer.key"));
  EXPECT_NO_THROW(modelcastd::check_key_files(config));
  ChildProcess check({MODELCASTD, "--config", (dir / "keys.toml"), "--check"});
  EXPECT_EQ(check.wait(), 0);

  // The trainer's key pair itself (its .pub forgotten) read as its public key, and put the
  // trainer's secret on an inference host without a word.
  write_file(dir / "pair.toml", std::string(kModel) + "producer_key_file = \"" + (dir / "trainer.key") + "\"\n");
  auto pair = modelcastd::load_config(dir / "pair.toml");
  try {
    modelcastd::check_key_files(pair);
    FAIL() << "a key pair passed as producer_key_file";
  } catch (const modelcast::Error& e) {
    EXPECT_NE(std::string(e.what()).find("holds a secret key (it is the trainer's key pair)"), std::string::npos) << e.what();
  }
}

// modelcastd with `config` fails --check and the start, each with exit 2 (a configuration
// error, as the README says) and saying `said`.
void expect_check_and_start_fail(const std::string& config, const std::string& said) {
  for (auto [args, code] : {std::pair{std::vector<std::string>{"--check"}, 2}, std::pair{std::vector<std::string>{}, 2}}) {
    std::vector<std::string> argv{MODELCASTD, "--config", config};
    argv.insert(argv.end(), args.begin(), args.end());
    ChildProcess daemon(argv);
    EXPECT_EQ(daemon.wait(), code) << (args.empty() ? "start" : "--check");
    bool named = false;
    for (const auto& line : daemon.lines()) named = named || line.find(said) != std::string::npos;
    EXPECT_TRUE(named) << (args.empty() ? "start" : "--check") << " did not say " << said << ": " << joined_lines(daemon);
  }
}

// A hook command whose program is missing, or not executable, passed --check and then failed at
// every version ("hook ... failed"): the models were served, and the server never told.
TEST(DaemonConfig, AHookProgramThatCannotRunFailsTheCheckAndTheStartNamingIt) {
  ScratchDir dir;
  const std::string program = dir / "reload.sh";
  const auto with_hook = [&](const std::string& argv0) {
    write_file(dir / "hook.toml", "[daemon]\nsocket = \"" + dir / "attach.sock" + "\"\n[http]\nlisten = \"\"\n" +
                                      std::string(kModel) + "persist = false\n[model.hook]\ncommand = [\"" + argv0 +
                                      "\", \"{model}\"]\n");
    return dir / "hook.toml";
  };
  // Refused as the key files are, before anything starts: exit 2 for --check and the start.
  const auto expect_refused = [](const std::string& config, const std::string& said) {
    for (std::vector<std::string> args : {std::vector<std::string>{"--check"}, std::vector<std::string>{}}) {
      std::vector<std::string> argv{MODELCASTD, "--config", config};
      argv.insert(argv.end(), args.begin(), args.end());
      ChildProcess daemon(argv);
      EXPECT_EQ(daemon.wait(), 2) << (args.empty() ? "start" : "--check");
      bool named = false;
      for (const auto& line : daemon.lines()) named = named || line.find(said) != std::string::npos;
      EXPECT_TRUE(named) << (args.empty() ? "start" : "--check") << " did not say " << said << ": " << joined_lines(daemon);
    }
  };
  expect_refused(with_hook(program), "model 'm': key 'hook.command': program '" + program + "' is not an executable file");
  write_file(program, "#!/bin/sh\n");  // there, but not executable
  expect_refused(with_hook(program), "program '" + program + "' is not an executable file");
  std::filesystem::permissions(program, std::filesystem::perms::owner_exec, std::filesystem::perm_options::add);
  ChildProcess check({MODELCASTD, "--config", with_hook(program), "--check"});
  EXPECT_EQ(check.wait(), 0) << joined_lines(check);

  // A bare name is looked up in PATH, as the hook runner's posix_spawnp does.
  expect_refused(with_hook("modelcast-no-such-hook"),
                              "program 'modelcast-no-such-hook' is not an executable file in any directory of PATH");
  ChildProcess found({MODELCASTD, "--config", with_hook("sh"), "--check"});
  EXPECT_EQ(found.wait(), 0) << joined_lines(found);
  // A program named by a placeholder is only known per version.
  auto config = modelcastd::load_config(with_hook("{path}/reload"));
  EXPECT_NO_THROW(modelcastd::check_hook_programs(config));
}

// A socket in a directory others can write (as /tmp) could be bound by another user while the
// daemon restarts: --check and the start refuse it, naming the directory and why.
TEST(DaemonConfig, ASocketInADirectoryOthersCanWriteFailsTheCheckAndTheStart) {
  ScratchDir dir;
  const std::string shared = dir / "shared";
  std::filesystem::create_directory(shared);
  std::filesystem::permissions(shared, std::filesystem::perms::all | std::filesystem::perms::sticky_bit);
  write_file(dir / "shared.toml", "[daemon]\nsocket = \"" + shared + "/attach.sock\"\n[http]\nlisten = \"\"\n" +
                                      std::string(kModel));
  expect_check_and_start_fail(dir / "shared.toml", "'" + shared + "' is writable by every user");
  EXPECT_FALSE(std::filesystem::exists(shared + "/attach.sock"));
}

// Whoever can write the repository chooses what a restarted daemon serves, a pinned producer key
// or not: --check and the start refuse one the group can write (systemd's UMask=0007 made the
// daemon's own directories so), naming it and why.
TEST(DaemonConfig, ARepositoryOthersCanWriteFailsTheCheckAndTheStart) {
  ScratchDir dir;
  const std::string repo = dir / "repo";
  std::filesystem::create_directory(repo);
  std::filesystem::permissions(repo, std::filesystem::perms::group_write, std::filesystem::perm_options::add);
  write_file(dir / "r.toml", "[daemon]\nsocket = \"" + (dir / "attach.sock") + "\"\n[http]\nlisten = \"\"\n[repository]\npath = \"" +
                                 repo + "\"\n" + std::string(kModel));
  expect_check_and_start_fail(dir / "r.toml", "repository '" + repo + "': its directory '" + repo + "' is writable by");
}

// A path that cannot be examined (here a loop of symbolic links; a directory the daemon's user
// may not search does the same) aborted --check and the start with a std::filesystem error.
TEST(DaemonConfig, ARepositoryPathThatCannotBeExaminedFailsTheCheckAndTheStartNamingIt) {
  ScratchDir dir;
  std::filesystem::create_symlink(dir / "loop", dir / "loop");
  const std::string repo = dir / "loop/repo";
  write_file(dir / "r.toml", "[daemon]\nsocket = \"" + (dir / "attach.sock") + "\"\n[http]\nlisten = \"\"\n[repository]\npath = \"" +
                                 repo + "\"\n" + std::string(kModel));
  expect_check_and_start_fail(dir / "r.toml", "[repository] path '" + repo + "' cannot be examined: Too many levels of symbolic links");
}

// A directory at the socket path passed --check and stopped the start.
TEST(DaemonConfig, ADirectoryAtTheSocketPathFailsTheCheckAndTheStart) {
  ScratchDir dir;
  std::filesystem::create_directory(dir / "attach.sock");
  write_file(dir / "c.toml", "[daemon]\nsocket = \"" + (dir / "attach.sock") + "\"\n[http]\nlisten = \"\"\n" +
                                 std::string(kModel));
  expect_check_and_start_fail(dir / "c.toml", "is taken by a directory");
  EXPECT_TRUE(std::filesystem::is_directory(dir / "attach.sock"));
}

// log_level = "off" silenced the only word on why the start failed: exit 1 and nothing said.
// (What no check can foresee: the ops port taken by another process.)
TEST(DaemonConfig, AFailedStartIsExplainedWhateverTheLogLevel) {
  ScratchDir dir;
  const int taken = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(taken, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  ASSERT_EQ(bind(taken, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  ASSERT_EQ(listen(taken, 1), 0);
  ASSERT_EQ(getsockname(taken, reinterpret_cast<sockaddr*>(&address), &length), 0);
  const std::string listen_at = "127.0.0.1:" + std::to_string(ntohs(address.sin_port));
  write_file(dir / "quiet.toml", "[daemon]\nlog_level = \"off\"\nsocket = \"" + (dir / "attach.sock") +
                                     "\"\n[http]\nlisten = \"" + listen_at + "\"\n" + std::string(kModel));
  // stderr as well as stdout: where the word goes when the log is off.
  ChildProcess daemon({"/bin/sh", "-c", std::string(MODELCASTD) + " --config '" + (dir / "quiet.toml") + "' 2>&1"});
  EXPECT_EQ(daemon.wait(), 1);
  bool named = false;
  for (const auto& line : daemon.lines())
    named = named || (line.find("modelcastd: cannot start:") == 0 && line.find("is another process listening there?") != std::string::npos);
  EXPECT_TRUE(named) << joined_lines(daemon);
  close(taken);
}

// An ops address no resolver knows, or another machine's, passed --check, and the start said "is
// another process listening there?".
TEST(DaemonConfig, AnHttpHostThatIsNotThisMachinesFailsTheCheckAndTheStart) {
  ScratchDir dir;
  const std::string daemon = "[daemon]\nsocket = \"" + (dir / "attach.sock") + "\"\n[http]\nlisten = ";
  // .invalid never resolves (RFC 6761); 192.0.2.1 is a documentation address (RFC 5737), on no
  // interface here.
  write_file(dir / "name.toml", daemon + "\"nohost.invalid:0\"\n" + std::string(kModel));
  expect_check_and_start_fail(dir / "name.toml", "host 'nohost.invalid' does not resolve");
  write_file(dir / "other.toml", daemon + "\"192.0.2.1:0\"\n" + std::string(kModel));
  expect_check_and_start_fail(dir / "other.toml", "cannot bind host '192.0.2.1' (Cannot assign requested address");
  write_file(dir / "here.toml", daemon + "\"localhost:0\"\n" + std::string(kModel));
  ChildProcess check({MODELCASTD, "--config", (dir / "here.toml"), "--check"});
  EXPECT_EQ(check.wait(), 0) << joined_lines(check);
}

// --check finds what each model's consumer would refuse at the start: a plaintext ipc://
// endpoint in a directory others can write, and an inline producer key that is no public key
// (never quoted: it may be a secret key put there by mistake).
TEST(DaemonConfig, TheCheckFindsWhatAModelsConsumerWouldRefuse) {
  ScratchDir dir;
  const std::string shared = dir / "shared";
  std::filesystem::create_directory(shared);
  std::filesystem::permissions(shared, std::filesystem::perms::all | std::filesystem::perms::sticky_bit);
  const std::string daemon = "[daemon]\nsocket = \"" + (dir / "attach.sock") + "\"\n[http]\nlisten = \"\"\n";
  const std::string model = "[[model]]\nname = \"m\"\nmax_model_bytes = \"1MiB\"\n";
  // A key pair whose secret key is no Ed25519 point (about half of them), to give as the public key.
  auto keys = modelcast::generate_key_pair();
  for (int tries = 0; tries < 200; ++tries, keys = modelcast::generate_key_pair()) {
    try {
      modelcast::check_public_key(keys.secret_key, "secret");
    } catch (const modelcast::Error&) {
      break;
    }
  }
  struct Case {
    std::string file, model, said;
  };
  const std::vector<Case> cases{
      // Named as every other error is (it said neither the file's line nor the model).
      {"ipc.toml", "endpoint = \"ipc://" + shared + "/model.sock\"\n",
       (dir / "ipc.toml") + ":5: model 'm': key 'endpoint': plaintext consumer endpoint"},
      {"ipc.toml", "endpoint = \"ipc://" + shared + "/model.sock\"\n", "'" + shared + "' is writable by every user"},
      {"short.toml", "endpoint = \"tcp://127.0.0.1:1\"\nproducer_public_key = \"abc\"\n",
       "producer_public_key is not a key: expected 40 Z85 characters, got 3 characters"},
      {"secret.toml", "endpoint = \"tcp://127.0.0.1:1\"\nproducer_public_key = \"" + keys.secret_key + "\"\n",
       "producer_public_key is not an Ed25519 public key"},
      // "ok" here, then the model never started: "key_file is given but producer_public_key is not".
      {"unpinned.toml", "endpoint = \"tcp://127.0.0.1:1\"\nkey_file = \"" + (dir / "consumer.key") + "\"\n",
       "key_file': is given but neither producer_key_file nor producer_public_key is"},
  };
  modelcast::save_key_pair(modelcast::generate_key_pair(), dir / "consumer.key");
  for (const auto& c : cases) {
    write_file(dir / c.file, daemon + model + c.model);
    ChildProcess check({MODELCASTD, "--config", dir / c.file, "--check"});
    EXPECT_EQ(check.wait(), 2) << c.file << ": " << joined_lines(check);
    bool named = false;
    for (const auto& line : check.lines()) {
      named = named || line.find(c.said) != std::string::npos;
      EXPECT_EQ(line.find(keys.secret_key.substr(0, 8)), std::string::npos) << "the secret key is quoted: " << line;
    }
    EXPECT_TRUE(named) << c.file << ": " << joined_lines(check);
  }
}

}  // namespace
}  // namespace daemon_test
