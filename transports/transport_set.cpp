#include "transports/transport_set.h"

#include <algorithm>

namespace modelcast::transport {

TransportSet::TransportSet(const std::vector<std::string>& names, Side side) {
  for (const TransportFactory* factory : resolve_transports(names)) transports_.push_back(factory->make(side));
}

std::vector<TransportOffer> TransportSet::offers(bool addresses) const {
  std::vector<TransportOffer> out;
  for (const auto& t : transports_) {
    out.push_back({t->name(), t->capabilities(), addresses ? t->address() : std::vector<std::byte>{}});
  }
  return out;
}

std::optional<std::size_t> TransportSet::find(const std::string& name) const {
  for (std::size_t i = 0; i < transports_.size(); ++i) {
    if (transports_[i]->name() == name) return i;
  }
  return std::nullopt;
}

bool TransportSet::holds(const Transport* transport) const {
  return std::any_of(transports_.begin(), transports_.end(), [&](const auto& t) { return t.get() == transport; });
}

std::string TransportSet::names() const {
  std::string s;
  for (const auto& t : transports_) s += (s.empty() ? "" : ",") + t->name();
  return s;
}

}  // namespace modelcast::transport
