// Checks a sidecar View against the shared test model (tests/support/test_model.h): every byte
// of every tensor must be what testmodel::fill wrote for the view's version.
#pragma once

#include <algorithm>
#include <cstring>
#include <string>

#include "modelcast/sidecar.h"
#include "test_model.h"

namespace sidecar_test {

// Empty if `view` holds exactly version view.version() of the test model; else what differs.
inline std::string check(const modelcast::sidecar::View& view, std::uint64_t seed) {
  auto tensors = view.tensors();
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    const auto* bytes = static_cast<const unsigned char*>(tensors[t].data);
    std::size_t size = tensors[t].size_bytes();
    for (std::size_t i = 0; i * 8 < size; ++i) {
      std::uint64_t expected = testmodel::word(seed, view.version(), t, i);
      if (std::memcmp(bytes + i * 8, &expected, std::min<std::size_t>(8, size - i * 8)) != 0) {
        return "tensor '" + tensors[t].name() + "' word " + std::to_string(i) + " differs from version " +
               std::to_string(view.version());
      }
    }
  }
  return {};
}

}  // namespace sidecar_test
