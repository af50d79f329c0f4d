// The transports one side has created, in its order of preference: what a consumer offers in
// its join, and what a producer routes each consumer through.
//
// Threads: built and read by the owning service thread; the transports themselves are
// thread-safe (transport.h).
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "transports/transport_registry.h"

namespace modelcast::transport {

class TransportSet {
 public:
  // Creates each transport `names` selects (resolve_transports). Throws Error(kInvalidArgument)
  // for a bad list, or what creating a transport throws (Error(kTransport); Error(kResource) when
  // the process is short of threads, descriptors or shared memory for it).
  TransportSet(const std::vector<std::string>& names, Side side);

  std::size_t size() const { return transports_.size(); }
  Transport& at(std::size_t i) const { return *transports_.at(i); }
  // Shared, for owners that must keep a transport alive beyond the set (receive buffers).
  const std::shared_ptr<Transport>& shared(std::size_t i) const { return transports_.at(i); }

  // Index of the transport called `name`, if the set has it.
  std::optional<std::size_t> find(const std::string& name) const;
  bool holds(const Transport* transport) const;  // one of this set's
  // Names, capabilities and, with `addresses`, each transport's address.
  std::vector<TransportOffer> offers(bool addresses) const;
  // The names, comma-separated in the set's order: for stats and logs.
  std::string names() const;

 private:
  std::vector<std::shared_ptr<Transport>> transports_;
};

}  // namespace modelcast::transport
