// libFuzzer target: manifests as a consumer receives them, in a FetchReply.
//
// The input is the msgpack body of a FetchReply; the harness puts it in the message envelope
// [magic, version, type=FetchReply, body] so the fuzzer spends its time inside the body and the
// manifest, not on the envelope. A reply that decodes has its manifest checked with
// validate_manifest. Only modelcast::Error may leave either call.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <type_traits>
#include <variant>
#include <vector>

#include "core/model/manifest.h"
#include "core/wire/protocol.h"
#include "modelcast/error.h"

namespace mp = modelcast::protocol;

namespace {

// msgpack: fixarray(4), uint32 kMagic, fixint kVersion, fixint type (FetchReply is the 5th
// alternative of protocol::Message, type index + 1).
constexpr std::uint8_t kFetchReplyType = 5;
static_assert(std::is_same_v<std::variant_alternative_t<kFetchReplyType - 1, mp::Message>, mp::FetchReply>);
static_assert(mp::kVersion < 0x80, "the envelope below packs the version as a positive fixint");

std::vector<std::byte> envelope(const std::uint8_t* body, std::size_t size) {
  const std::uint32_t magic = mp::kMagic;
  const std::uint8_t head[] = {0x94,
                               0xce,
                               static_cast<std::uint8_t>(magic >> 24),
                               static_cast<std::uint8_t>(magic >> 16),
                               static_cast<std::uint8_t>(magic >> 8),
                               static_cast<std::uint8_t>(magic),
                               static_cast<std::uint8_t>(mp::kVersion),
                               kFetchReplyType};
  std::vector<std::byte> out(sizeof head + size);
  for (std::size_t i = 0; i < sizeof head; ++i) out[i] = static_cast<std::byte>(head[i]);
  for (std::size_t i = 0; i < size; ++i) out[sizeof head + i] = static_cast<std::byte>(body[i]);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::vector<std::byte> message = envelope(data, size);
  mp::Message decoded;
  try {
    decoded = mp::decode(message);
  } catch (const modelcast::Error&) {
    return 0;
  }
  const auto* reply = std::get_if<mp::FetchReply>(&decoded);
  if (reply == nullptr) {
    std::fprintf(stderr, "fuzz_manifest: a FetchReply envelope decoded as message type %zu\n", decoded.index() + 1);
    std::abort();
  }
  try {
    modelcast::validate_manifest(reply->manifest);
  } catch (const modelcast::Error&) {
    return 0;
  }
  // A manifest that passes: the receive path then trusts these (offset, size) pairs.
  const auto& m = reply->manifest;
  for (const auto& t : m.tensors) {
    if (t.offset > m.total_bytes || t.size > m.total_bytes - t.offset) {
      std::fprintf(stderr, "fuzz_manifest: a validated manifest has tensor '%s' outside total_bytes\n",
                   t.spec.name.c_str());
      std::abort();
    }
  }
  return 0;
}
