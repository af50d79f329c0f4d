// libFuzzer target: the control-plane decoder, modelcast::protocol::decode.
//
// Contract under test (core/wire/protocol.h): decode throws modelcast::Error for any input that is
// not a well-formed message and never anything else; it never crashes or allocates without
// bound. A message that decodes must survive a round trip: encode(decode(x)) decodes again and
// re-encodes to the same bytes (the encoding of a message is canonical).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <vector>

#include "core/wire/protocol.h"
#include "modelcast/error.h"

namespace mp = modelcast::protocol;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  mp::Message message;
  try {
    message = mp::decode(bytes);
  } catch (const modelcast::Error&) {
    return 0;  // a refused message: the documented outcome
  }
  const std::vector<std::byte> encoded = mp::encode(message);
  mp::Message again;
  try {
    again = mp::decode(encoded);
  } catch (const modelcast::Error& e) {
    std::fprintf(stderr, "fuzz_control_message: a decoded message re-encodes to bytes decode refuses: %s\n", e.what());
    std::abort();
  }
  if (again.index() != message.index() || mp::encode(again) != encoded) {
    std::fprintf(stderr, "fuzz_control_message: encode(decode(encode(m))) differs from encode(m)\n");
    std::abort();
  }
  return 0;
}
