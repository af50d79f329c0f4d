// The daemon's Prometheus metrics (prometheus-cpp, Debian's prometheus-cpp-dev), rendered in
// the text format by the ops endpoint.
//
// Threads: every method may be called from any thread (prometheus-cpp's metrics are atomic and
// its families lock when adding a label set).
#pragma once

#include <chrono>
#include <map>
#include <set>
#include <memory>
#include <mutex>
#include <string>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

namespace modelcastd {

// Values read from their owners when metrics are rendered.
struct LiveValues {
  std::size_t clients = 0;
  std::size_t holds = 0;
  std::map<std::string, std::uint64_t> bytes_received;  // by model, cumulative
  std::map<std::string, std::uint64_t> versions_rejected;  // by model, by its consumer, cumulative
  std::map<std::string, bool> producer_connected;       // by model
  std::map<std::string, bool> producer_stopped;         // by model: it said so (the end of its run)
};

class Metrics {
 public:
  Metrics();
  // A model is configured: every series of it exists from now on, at 0 (Prometheus convention:
  // an alert on a counter that has never moved needs the series to be there).
  void model_added(const std::string& model, bool persists, bool hooks);
  // The version the daemon serves for `model` (from the producer or recovered from disk).
  void serving(const std::string& model, std::uint64_t version);
  void installed(const std::string& model, std::chrono::nanoseconds update_latency);
  // A version the daemon does not serve; the versions a model's consumer rejects are counted
  // from LiveValues at render().
  void rejected(const std::string& model);
  void repository_written(const std::string& model, std::chrono::nanoseconds took);
  void repository_failed(const std::string& model);
  void hook_ran(const std::string& model, bool ok);
  // `model`'s Consumer is about to go (a reload restarts or removes the model): its last counts
  // (cumulative, as in LiveValues) are counted, and a new Consumer's are counted from 0.
  void consumer_replaced(const std::string& model, std::uint64_t bytes_received, std::uint64_t versions_rejected);
  // A reload removed `model` (its Consumer gone, consumer_replaced counted): none of its series
  // is exported from now on (left at 0, they read as a model whose producer is down), and what
  // its work still under way reports (a repository write, a hook) is not counted, until a
  // reload adds it again (model_added).
  void model_removed(const std::string& model);
  // A SIGHUP whose config could not be used; the running one was kept.
  void reload_refused();
  // The text exposition format (text/plain; version=0.0.4).
  std::string render(const LiveValues& live);

 private:
  // Runs `report` unless `model` was removed (and not added since), under mutex_.
  template <typename Report>
  void unless_removed(const std::string& model, Report&& report);
  std::shared_ptr<prometheus::Registry> registry_ = std::make_shared<prometheus::Registry>();
  prometheus::Family<prometheus::Counter>& installed_;
  prometheus::Family<prometheus::Counter>& rejected_;
  prometheus::Family<prometheus::Histogram>& update_latency_;
  prometheus::Family<prometheus::Counter>& bytes_received_;
  prometheus::Family<prometheus::Gauge>& clients_;
  prometheus::Family<prometheus::Gauge>& holds_;
  prometheus::Family<prometheus::Counter>& repository_writes_;
  prometheus::Family<prometheus::Counter>& repository_failures_;
  prometheus::Family<prometheus::Histogram>& repository_duration_;
  prometheus::Family<prometheus::Counter>& hook_runs_;
  prometheus::Family<prometheus::Counter>& hook_failures_;
  prometheus::Family<prometheus::Gauge>& serving_version_;
  prometheus::Family<prometheus::Gauge>& producer_connected_;
  prometheus::Family<prometheus::Gauge>& producer_stopped_;
  prometheus::Family<prometheus::Counter>& reloads_refused_;
  std::mutex mutex_;
  std::map<std::string, std::uint64_t> bytes_seen_;  // mutex_: the counter counts increments
  std::map<std::string, std::uint64_t> rejected_seen_;  // mutex_: as bytes_seen_
  // mutex_: each configured model's series, set from LiveValues at render().
  std::map<std::string, prometheus::Gauge*> connected_;
  std::map<std::string, prometheus::Gauge*> stopped_;  // as connected_
  std::set<std::string> removed_;  // mutex_: models a reload removed (none of their series is made)
};

}  // namespace modelcastd
