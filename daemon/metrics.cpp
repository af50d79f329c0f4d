#include "daemon/metrics.h"

#include <algorithm>

#include <prometheus/text_serializer.h>

namespace modelcastd {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

// Seconds: from a same-host update (milliseconds) to a slow cross-host one or a big disk write.
const prometheus::Histogram::BucketBoundaries kBuckets{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                       0.25,  0.5,    1,     2.5,  5,     10,   30};

double seconds(std::chrono::nanoseconds d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

Metrics::Metrics()
    : installed_(BuildCounter().Name("modelcastd_versions_installed_total").Help("Versions received and served").Register(*registry_)),
      rejected_(BuildCounter().Name("modelcastd_versions_rejected_total").Help("Versions refused (digest, layout, signature, size) by the consumer, or received and not served").Register(*registry_)),
      update_latency_(BuildHistogram().Name("modelcastd_update_latency_seconds").Help("Producer's publish() until served by the daemon").Register(*registry_)),
      bytes_received_(BuildCounter().Name("modelcastd_bytes_received_total").Help("Model bytes received from producers").Register(*registry_)),
      clients_(BuildGauge().Name("modelcastd_clients").Help("Local client connections").Register(*registry_)),
      holds_(BuildGauge().Name("modelcastd_client_holds").Help("Versions pinned by clients").Register(*registry_)),
      repository_writes_(BuildCounter().Name("modelcastd_repository_writes_total").Help("Versions written to the repository").Register(*registry_)),
      repository_failures_(BuildCounter().Name("modelcastd_repository_write_failures_total").Help("Repository writes that failed").Register(*registry_)),
      repository_duration_(BuildHistogram().Name("modelcastd_repository_write_seconds").Help("Time to write one version durably").Register(*registry_)),
      hook_runs_(BuildCounter().Name("modelcastd_hook_runs_total").Help("Hooks run").Register(*registry_)),
      hook_failures_(BuildCounter().Name("modelcastd_hook_failures_total").Help("Hooks that failed or timed out").Register(*registry_)),
      serving_version_(BuildGauge().Name("modelcastd_serving_version").Help("Version served per model (0: none yet)").Register(*registry_)),
      producer_connected_(BuildGauge().Name("modelcastd_producer_connected").Help("1 while the model's producer is joined, 0 before and after").Register(*registry_)),
      // Tells the end of a run (its producer said it stops) from a producer lost: both leave
      // producer_connected at 0.
      producer_stopped_(BuildGauge().Name("modelcastd_producer_stopped").Help("1 once the model's producer said it stopped (the end of its run), until a producer answers again").Register(*registry_)),
      reloads_refused_(BuildCounter().Name("modelcastd_reloads_refused_total").Help("SIGHUP reloads refused (the running configuration was kept)").Register(*registry_)) {
  reloads_refused_.Add({});
}

template <typename Report>
void Metrics::unless_removed(const std::string& model, Report&& report) {
  // The check and the series' Add under one lock: a report between a reload's model_removed
  // check and its Add made the series again.
  std::lock_guard lock(mutex_);
  if (!removed_.contains(model)) report();
}

void Metrics::model_added(const std::string& model, bool persists, bool hooks) {
  prometheus::Labels labels{{"model", model}};
  {
    std::lock_guard lock(mutex_);
    removed_.erase(model);
  }
  installed_.Add(labels);
  rejected_.Add(labels);
  update_latency_.Add(labels, kBuckets);
  bytes_received_.Add(labels);
  serving_version_.Add(labels);
  {
    std::lock_guard lock(mutex_);
    connected_[model] = &producer_connected_.Add(labels);
    stopped_[model] = &producer_stopped_.Add(labels);
  }
  if (persists) {
    repository_writes_.Add(labels);
    repository_failures_.Add(labels);
    repository_duration_.Add(labels, kBuckets);
  }
  if (hooks) {
    hook_runs_.Add(labels);
    hook_failures_.Add(labels);
  }
}

namespace {

template <typename T>
void remove_series(prometheus::Family<T>& family, const prometheus::Labels& labels) {
  if (family.Has(labels)) family.Remove(&family.Add(labels));
}

template <typename T>
void remove_series(prometheus::Family<T>& family, const prometheus::Labels& labels,
                   const prometheus::Histogram::BucketBoundaries& buckets) {
  if (family.Has(labels)) family.Remove(&family.Add(labels, buckets));
}

}  // namespace

void Metrics::model_removed(const std::string& model) {
  const prometheus::Labels labels{{"model", model}};
  std::lock_guard lock(mutex_);  // as unless_removed: no report comes between
  removed_.insert(model);
  connected_.erase(model);
  stopped_.erase(model);
  bytes_seen_.erase(model);
  rejected_seen_.erase(model);
  for (auto* family : {&installed_, &rejected_, &bytes_received_, &repository_writes_, &repository_failures_,
                       &hook_runs_, &hook_failures_}) {
    remove_series(*family, labels);
  }
  for (auto* family : {&serving_version_, &producer_connected_, &producer_stopped_}) remove_series(*family, labels);
  for (auto* family : {&update_latency_, &repository_duration_}) remove_series(*family, labels, kBuckets);
}

void Metrics::serving(const std::string& model, std::uint64_t version) {
  unless_removed(model, [&] {
    serving_version_.Add({{"model", model}}).Set(static_cast<double>(version));
  });
}

void Metrics::installed(const std::string& model, std::chrono::nanoseconds update_latency) {
  unless_removed(model, [&] {
    installed_.Add({{"model", model}}).Increment();
    // Negative where the producer's clock is ahead of this host's: a histogram has no bucket
    // for it, and its _sum went down (a counter in Prometheus's eyes). Counted as 0, the least
    // it can have been; /v1/models shows the signed figure, which says the clocks disagree.
    update_latency_.Add({{"model", model}}, kBuckets).Observe(seconds(std::max(update_latency, std::chrono::nanoseconds(0))));
  });
}

void Metrics::reload_refused() { reloads_refused_.Add({}).Increment(); }

void Metrics::rejected(const std::string& model) {
  unless_removed(model, [&] {
    rejected_.Add({{"model", model}}).Increment();
  });
}

void Metrics::repository_written(const std::string& model, std::chrono::nanoseconds took) {
  unless_removed(model, [&] {
    repository_writes_.Add({{"model", model}}).Increment();
    repository_duration_.Add({{"model", model}}, kBuckets).Observe(seconds(took));
  });
}

void Metrics::repository_failed(const std::string& model) {
  unless_removed(model, [&] {
    repository_failures_.Add({{"model", model}}).Increment();
  });
}

void Metrics::hook_ran(const std::string& model, bool ok) {
  unless_removed(model, [&] {
    hook_runs_.Add({{"model", model}}).Increment();
    auto& failures = hook_failures_.Add({{"model", model}});  // present at 0, so alerts can use it
    if (!ok) failures.Increment();
  });
}

namespace {

// Counters count increments: what a Consumer's cumulative count gained since it was last seen.
void add_since_seen(prometheus::Counter& counter, std::uint64_t now, std::uint64_t& seen) {
  if (now > seen) counter.Increment(static_cast<double>(now - seen));
  seen = now;
}

}  // namespace

// Before, a restarted model's new Consumer was told apart only by counting less than the old one
// had at the last scrape: what the old one received since that scrape was lost, and the new
// one's first counts were taken as the old one's gain.
void Metrics::consumer_replaced(const std::string& model, std::uint64_t bytes_received, std::uint64_t versions_rejected) {
  std::lock_guard lock(mutex_);
  add_since_seen(bytes_received_.Add({{"model", model}}), bytes_received, bytes_seen_[model]);
  add_since_seen(rejected_.Add({{"model", model}}), versions_rejected, rejected_seen_[model]);
  bytes_seen_[model] = 0;
  rejected_seen_[model] = 0;
}

std::string Metrics::render(const LiveValues& live) {
  clients_.Add({}).Set(static_cast<double>(live.clients));
  holds_.Add({}).Set(static_cast<double>(live.holds));
  {
    std::lock_guard lock(mutex_);
    for (const auto& [model, bytes] : live.bytes_received) {
      add_since_seen(bytes_received_.Add({{"model", model}}), bytes, bytes_seen_[model]);
    }
    for (const auto& [model, rejected] : live.versions_rejected) {
      add_since_seen(rejected_.Add({{"model", model}}), rejected, rejected_seen_[model]);
    }
    for (auto& [model, gauge] : connected_) {
      auto it = live.producer_connected.find(model);
      gauge->Set(it != live.producer_connected.end() && it->second ? 1 : 0);
    }
    for (auto& [model, gauge] : stopped_) {
      auto it = live.producer_stopped.find(model);
      gauge->Set(it != live.producer_stopped.end() && it->second ? 1 : 0);
    }
  }
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace modelcastd
