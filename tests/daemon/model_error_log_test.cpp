// What modelcastd's log says of a model's consumer errors: each once, naming the model (a daemon
// serves several). The library logs every error it reports, so the daemon does not log its
// on_error again: it did, and every refusal came out twice, the first time without the model.
#include <algorithm>

#include "daemon_fixture.h"
#include "eventually.h"
#include "modelcast/producer.h"

namespace daemon_test {
namespace {

TEST_F(DaemonTest, AModelsRefusalIsLoggedOnceNamingTheModel) {
  modelcast::ProducerOptions options;
  options.model_name = "other";
  options.control_endpoint = "tcp://127.0.0.1:0";
  modelcast::Producer producer(options);
  auto daemon = start_daemon(config(producer.control_endpoint(), 2));
  // The consumer reports a refusal before it asks again (one thread), so by the second refusal
  // the first one's lines are out.
  ASSERT_TRUE(testing_support::eventually([&] { return producer.stats().refused_joins >= 2; }));
  daemon->terminate();
  EXPECT_EQ(daemon->wait(), 0);
  std::vector<std::string> lines = startup_lines;
  lines.insert(lines.end(), daemon->lines().begin(), daemon->lines().end());
  // A repeat logged 10 s on says how many it held back ("... more"): only first sayings count.
  const std::string refusal = "serves model 'other'";
  const auto said = std::count_if(lines.begin(), lines.end(), [&](const std::string& line) {
    return line.find(refusal) != std::string::npos && line.find(" more") == std::string::npos;
  });
  EXPECT_EQ(said, 1) << testing_support::joined_lines(*daemon);
  const bool named = std::any_of(lines.begin(), lines.end(), [&](const std::string& line) {
    return line.find(refusal) != std::string::npos && line.find("model 'test': ") != std::string::npos;
  });
  EXPECT_TRUE(named) << "the refusal's line does not name the daemon's model";
}

}  // namespace
}  // namespace daemon_test
