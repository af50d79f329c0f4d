#include "transports/capabilities.h"

#include <algorithm>

#include "modelcast/error.h"

namespace modelcast::transport {

bool Capabilities::moves(MemoryKind source, MemoryKind destination) const {
  return std::find(pairs.begin(), pairs.end(), MemoryPair{source, destination}) != pairs.end();
}

bool Capabilities::handles(MemoryKind kind) const {
  return std::any_of(pairs.begin(), pairs.end(),
                     [kind](const MemoryPair& p) { return p.source == kind || p.destination == kind; });
}

std::string_view reach_name(Reach reach) noexcept {
  switch (reach) {
    case Reach::kProcess: return "process";
    case Reach::kHost: return "host";
    case Reach::kNetwork: return "network";
  }
  return "unknown";
}

std::string describe(const Capabilities& c) {
  std::string s;
  for (const auto& p : c.pairs) {
    if (!s.empty()) s += ", ";
    s += std::string(memory_kind_name(p.source)) + "->" + std::string(memory_kind_name(p.destination));
  }
  s += "; reach " + std::string(reach_name(c.reach));
  if (c.two_sided) s += "; two-sided";
  if (c.one_sided) s += "; one-sided";
  return s;
}

std::vector<std::uint8_t> encode_pairs(const std::vector<MemoryPair>& pairs) {
  std::vector<std::uint8_t> bytes;
  bytes.reserve(pairs.size());
  for (const auto& p : pairs) {
    bytes.push_back(static_cast<std::uint8_t>((static_cast<unsigned>(p.source) << 4) |
                                              static_cast<unsigned>(p.destination)));
  }
  return bytes;
}

std::vector<MemoryPair> decode_pairs(const std::vector<std::uint8_t>& bytes) {
  constexpr unsigned kLastKind = static_cast<unsigned>(MemoryKind::kCuda);
  std::vector<MemoryPair> pairs;
  pairs.reserve(bytes.size());
  for (auto b : bytes) {
    unsigned source = b >> 4, destination = b & 0xFu;
    if (source > kLastKind || destination > kLastKind) {
      throw Error(ErrorCode::kProtocol, "unknown memory kind in a transport capability (byte " +
                                            std::to_string(b) + ")");
    }
    pairs.push_back({static_cast<MemoryKind>(source), static_cast<MemoryKind>(destination)});
  }
  return pairs;
}

}  // namespace modelcast::transport
