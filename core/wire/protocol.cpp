#include "core/wire/protocol.h"

#include "common/shown_text.h"
#include "core/wire/manifest_codec.h"
#include "core/wire/msgpack_fields.h"
#include "core/wire/offer_codec.h"
#include "core/wire/unpack_bounds.h"
#include "core/wire/want_codec.h"
#include "modelcast/error.h"

namespace modelcast::protocol {
namespace {

using namespace wire;

enum class Type : std::uint8_t {
  kAnnounce = 1, kJoinRequest, kJoinReply, kFetchRequest, kFetchReply, kAck, kPing, kDigests,
  kRelayOrder, kRelayCancel, kRelayFailed, kRelayOffer, kLeave
};


// --- encoding: bodies are maps keyed by short field names ---------------------------------

// The first three fields of every reply: whether it was granted, and if not, why.
void pack_outcome(Packer& pk, bool ok, Refusal refusal, const std::string& error) {
  pk.pack("ok"); pk.pack(ok);
  pk.pack("why"); pk.pack(static_cast<std::uint8_t>(refusal));
  pk.pack("err"); pack_str(pk, error);
}

struct BodyPacker {
  Packer& pk;
  void operator()(const Announce& m) const {
    pk.pack_map((m.group ? (m.group->given_up != 0 ? 7 : 6) : 4) + (m.stopping ? 1 : 0));
    pk.pack("inc"); pk.pack(m.incarnation);
    pk.pack("ver"); pk.pack(m.version);
    pk.pack("step"); pk.pack(m.step);
    pk.pack("t_pub"); pk.pack(m.publish_time_ns);
    if (m.group) {
      pk.pack("gcommit"); pk.pack(m.group->committed);
      pk.pack("gmembers"); pk.pack(m.group->members);
      // Only when there is one: a peer built before it ignores a key it does not know.
      if (m.group->given_up != 0) { pk.pack("gfailed"); pk.pack(m.group->given_up); }
    }
    if (m.stopping) { pk.pack("bye"); pk.pack(true); }  // only then, as "gfailed"
  }
  void operator()(const JoinRequest& m) const {
    pk.pack_map((m.path ? 10 : 9) + (m.group.empty() ? 0 : 2) + (m.wants.empty() ? 0 : 1));
    pk.pack("model"); pack_str(pk, m.model);
    pk.pack("name"); pack_str(pk, m.consumer_name);
    pk.pack("offers");
    pk.pack_array(static_cast<std::uint32_t>(m.offers.size()));
    for (const auto& offer : m.offers) pack_offer(pk, offer);
    pk.pack("mem"); pk.pack(static_cast<std::uint8_t>(m.memory.kind));
    pk.pack("dev"); pk.pack(m.memory.device);
    pk.pack("host"); pack_str(pk, m.host_id);
    pk.pack("proc"); pk.pack(m.process);
    pk.pack("session"); pk.pack(m.session);
    pk.pack("relays"); pk.pack(m.serves_peers);
    if (m.path) {
      pk.pack("path"); pk.pack(static_cast<std::uint8_t>(*m.path));
    }
    if (!m.group.empty()) {
      pk.pack("group"); pack_str(pk, m.group);
      pk.pack("gsize"); pk.pack(m.group_size);
    }
    if (!m.wants.empty()) {
      pk.pack("wants");
      pk.pack_array(static_cast<std::uint32_t>(m.wants.size()));
      for (const auto& want : m.wants) pack_want(pk, want);
    }
  }
  void operator()(const JoinReply& m) const {
    // Ranks other than 0 say their rank too (without the list, which is rank 0's to give), so that
    // a consumer pointed at one of them knows it holds pieces, not the model.
    const bool has_rank = m.rank != 0 || !m.rank_endpoints.empty();
    pk.pack_map(7 + (has_rank ? 1 : 0) + (m.rank_endpoints.empty() ? 0 : 1) + (m.model_bytes ? 1 : 0));
    pack_outcome(pk, m.ok, m.refusal, m.error);
    pk.pack("inc"); pk.pack(m.incarnation);
    pk.pack("latest"); pk.pack(m.latest_version);
    pk.pack("transport"); pack_str(pk, m.transport);
    pk.pack("path"); pk.pack(static_cast<std::uint8_t>(m.path));
    if (has_rank) {
      pk.pack("rank"); pk.pack(m.rank);
    }
    if (!m.rank_endpoints.empty()) {
      pk.pack("ranks"); pk.pack(m.rank_endpoints);
    }
    if (m.model_bytes) {
      pk.pack("bytes"); pk.pack(m.model_bytes);
    }
  }
  void operator()(const FetchRequest& m) const {
    pk.pack_map(m.has_wants ? 5 : 4);
    pk.pack("inc"); pk.pack(m.incarnation);
    pk.pack("ver"); pk.pack(m.version);
    pk.pack("fetch"); pk.pack(m.fetch_id);
    pk.pack("base"); pk.pack(m.base_version);
    if (m.has_wants) {
      pk.pack("wants");
      pk.pack_array(static_cast<std::uint32_t>(m.wants.size()));
      for (const auto& want : m.wants) pack_want(pk, want);
    }
  }
  void operator()(const FetchReply& m) const {
    pk.pack_map((m.region.empty() ? 9 : 10) + (m.relay.empty() ? 0 : 1));
    pack_outcome(pk, m.ok, m.refusal, m.error);
    pk.pack("fetch"); pk.pack(m.fetch_id);
    pk.pack("chunk"); pk.pack(m.chunk_bytes);
    pk.pack("pending"); pk.pack(m.digests_pending);
    pk.pack("base"); pk.pack(m.base_version);
    pk.pack("manifest"); pack_manifest(pk, m.manifest);
    pk.pack("sig"); pack_bin(pk, m.signature);
    if (!m.region.empty()) {
      pk.pack("region"); pack_bin(pk, m.region);
    }
    if (!m.relay.empty()) {
      pk.pack("relay"); pack_str(pk, m.relay);
    }
  }
  void operator()(const Digests& m) const {
    pk.pack_map(5);
    pk.pack("fetch"); pk.pack(m.fetch_id);
    pk.pack("ver"); pk.pack(m.version);
    pk.pack("xxh3"); pk.pack(m.digests);
    pk.pack("bxxh3"); pk.pack(m.block_digests);
    pk.pack("sig"); pack_bin(pk, m.signature);
  }
  void operator()(const Ping& m) const {
    pk.pack_map(1);
    pk.pack("inc"); pk.pack(m.incarnation);
  }
  void operator()(const Ack& m) const {
    pk.pack_map(8);
    pk.pack("inc"); pk.pack(m.incarnation);
    pk.pack("ver"); pk.pack(m.version);
    pk.pack("fetch"); pk.pack(m.fetch_id);
    pk.pack("ok"); pk.pack(m.ok);
    pk.pack("err"); pack_str(pk, m.error);
    pk.pack("rfault"); pk.pack(static_cast<std::uint8_t>(m.relay_fault));
    pk.pack("again"); pk.pack(m.again);
    pk.pack("discarded"); pk.pack(m.discarded);
  }
  void operator()(const RelayOrder& m) const {
    pk.pack_map(m.export_region ? 9 : 8);
    pk.pack("inc"); pk.pack(m.incarnation);
    pk.pack("order"); pk.pack(m.order_id);
    pk.pack("ver"); pk.pack(m.version);
    pk.pack("fetch"); pk.pack(m.fetch_id);
    pk.pack("bbytes"); pk.pack(m.block_bytes);
    pk.pack("blocks"); pk.pack(m.blocks);
    pk.pack("addr"); pack_bin(pk, m.peer_address);
    pk.pack("detect"); pk.pack(m.detect_failure);
    if (m.export_region) { pk.pack("export"); pk.pack(true); }
  }
  void operator()(const RelayCancel& m) const {
    pk.pack_map(3);
    pk.pack("inc"); pk.pack(m.incarnation);
    pk.pack("order"); pk.pack(m.order_id);
    pk.pack("done"); pk.pack(m.delivered);
  }
  void operator()(const Leave& m) const {
    pk.pack_map(1);
    pk.pack("inc"); pk.pack(m.incarnation);
  }
  void operator()(const RelayOffer& m) const {
    pk.pack_map(3);
    pk.pack("inc"); pk.pack(m.incarnation);
    pk.pack("order"); pk.pack(m.order_id);
    pk.pack("region"); pack_bin(pk, m.region);
  }
  void operator()(const RelayFailed& m) const {
    pk.pack_map(3);
    pk.pack("inc"); pk.pack(m.incarnation);
    pk.pack("order"); pk.pack(m.order_id);
    pk.pack("err"); pack_str(pk, m.error);
  }
};

// --- decoding: every access checked, every failure named ----------------------------------

Refusal refusal(std::uint8_t code) {
  if (code > static_cast<std::uint8_t>(Refusal::kNoTransport)) fail("unknown refusal code " + std::to_string(code));
  return static_cast<Refusal>(code);
}

RelayFault relay_fault(std::uint8_t code) {
  if (code > static_cast<std::uint8_t>(RelayFault::kBadBlock)) fail("ack: unknown relay fault " + std::to_string(code));
  return static_cast<RelayFault>(code);
}

DeliveryPath delivery_path(std::uint8_t code, const char* message) {
  if (code > static_cast<std::uint8_t>(DeliveryPath::kStaged)) {
    fail(std::string(message) + ": unknown delivery path " + std::to_string(code));
  }
  return static_cast<DeliveryPath>(code);
}

// Made printable where it enters, not where it is shown: every later use is then safe.
std::string peer_text(const Fields& f, const char* key) {
  return printable_text(f.get<std::string>(key), kShownPeerTextBytes, Backslash::kKept);
}

Message unpack_body(Type type, const msgpack::object& body) {
  switch (type) {
    case Type::kAnnounce: {
      Fields f(body, "announce");
      Announce m{f.get<std::uint64_t>("inc"), f.get<std::uint64_t>("ver"), f.get<std::int64_t>("step"),
                 f.get<std::int64_t>("t_pub"), std::nullopt};
      if (f.has("gcommit")) {
        m.group = GroupState{f.get<std::uint64_t>("gcommit"), f.get<std::uint32_t>("gmembers"),
                             f.has("gfailed") ? f.get<std::uint64_t>("gfailed") : 0};
      }
      m.stopping = f.has("bye") && f.get<bool>("bye");
      return m;
    }
    case Type::kJoinRequest: {
      Fields f(body, "join request");
      return JoinRequest{f.get<std::string>("model"),
                         f.get<std::string>("name"),
                         unpack_offers(f.at("offers")),
                         {memory_kind(f.get<std::uint8_t>("mem"), "join request"), f.get<int>("dev")},
                         f.get<std::string>("host"),
                         f.get<std::uint64_t>("proc"),
                         f.get<std::uint64_t>("session"),
                         f.has("path") ? std::optional(delivery_path(f.get<std::uint8_t>("path"), "join request")) : std::nullopt,
                         f.get<bool>("relays"),
                         f.has("group") ? f.get<std::string>("group") : std::string(),
                         f.has("group") ? f.get<std::uint32_t>("gsize") : 0u,
                         f.has("wants") ? unpack_wants(f.at("wants")) : std::vector<TensorWant>{}};
    }
    case Type::kJoinReply: {
      Fields f(body, "join reply");
      return JoinReply{f.get<bool>("ok"), refusal(f.get<std::uint8_t>("why")), peer_text(f, "err"),
                       f.get<std::uint64_t>("inc"), f.get<std::uint64_t>("latest"),
                       f.get<std::string>("transport"), delivery_path(f.get<std::uint8_t>("path"), "join reply"),
                       f.has("rank") ? f.get<std::uint32_t>("rank") : 0u,
                       f.has("ranks") ? f.get<std::vector<std::string>>("ranks") : std::vector<std::string>{},
                       f.has("bytes") ? f.get<std::uint64_t>("bytes") : std::uint64_t{0}};
    }
    case Type::kFetchRequest: {
      Fields f(body, "fetch request");
      FetchRequest request{f.get<std::uint64_t>("inc"), f.get<std::uint64_t>("ver"), f.get<std::uint64_t>("fetch"),
                           f.get<std::uint64_t>("base")};
      if (f.has("wants")) {
        request.has_wants = true;
        request.wants = unpack_wants(f.at("wants"));
      }
      return request;
    }
    case Type::kFetchReply: {
      Fields f(body, "fetch reply");
      FetchReply m;
      m.ok = f.get<bool>("ok");
      m.refusal = refusal(f.get<std::uint8_t>("why"));
      m.error = peer_text(f, "err");
      m.fetch_id = f.get<std::uint64_t>("fetch");
      m.chunk_bytes = f.get<std::uint64_t>("chunk");
      m.digests_pending = f.get<bool>("pending");
      m.base_version = f.get<std::uint64_t>("base");
      m.manifest = unpack_manifest(f.at("manifest"));
      m.signature = f.bin("sig");
      if (f.has("region")) m.region = f.bin("region");
      if (f.has("relay")) m.relay = peer_text(f, "relay");
      return m;
    }
    case Type::kAck: {
      Fields f(body, "ack");
      return Ack{f.get<std::uint64_t>("inc"), f.get<std::uint64_t>("ver"),
                 f.get<std::uint64_t>("fetch"),  f.get<bool>("ok"),
                 peer_text(f, "err"),            relay_fault(f.get<std::uint8_t>("rfault")),
                 f.has("again") && f.get<bool>("again"), f.has("discarded") && f.get<bool>("discarded")};
    }
    case Type::kRelayOrder: {
      Fields f(body, "relay order");
      return RelayOrder{f.get<std::uint64_t>("inc"),    f.get<std::uint64_t>("order"),
                        f.get<std::uint64_t>("ver"),    f.get<std::uint64_t>("fetch"),
                        f.get<std::uint64_t>("bbytes"), f.get<std::vector<std::uint32_t>>("blocks"),
                        f.bin("addr"),                  f.get<bool>("detect"),
                        f.has("export") && f.get<bool>("export")};
    }
    case Type::kRelayCancel: {
      Fields f(body, "relay cancel");
      return RelayCancel{f.get<std::uint64_t>("inc"), f.get<std::uint64_t>("order"),
                         f.has("done") && f.get<bool>("done")};
    }
    case Type::kLeave: {
      Fields f(body, "leave");
      return Leave{f.get<std::uint64_t>("inc")};
    }
    case Type::kRelayOffer: {
      Fields f(body, "relay offer");
      return RelayOffer{f.get<std::uint64_t>("inc"), f.get<std::uint64_t>("order"), f.bin("region")};
    }
    case Type::kRelayFailed: {
      Fields f(body, "relay failed");
      return RelayFailed{f.get<std::uint64_t>("inc"), f.get<std::uint64_t>("order"), peer_text(f, "err")};
    }
    case Type::kDigests: {
      Fields f(body, "digests");
      return Digests{f.get<std::uint64_t>("fetch"), f.get<std::uint64_t>("ver"),
                     f.get<std::vector<std::uint64_t>>("xxh3"), f.get<std::vector<std::uint64_t>>("bxxh3"), f.bin("sig")};
    }
    case Type::kPing: {
      Fields f(body, "ping");
      return Ping{f.get<std::uint64_t>("inc")};
    }
  }
  fail("unknown message type " + std::to_string(static_cast<int>(type)));
}

}  // namespace

namespace {

// A message in this build's body format, in an envelope claiming `version`.
std::vector<std::byte> encode_as(const Message& message, std::uint16_t version) {
  msgpack::sbuffer buffer;
  Packer pk(&buffer);
  pk.pack_array(4);
  pk.pack(kMagic);
  pk.pack(version);
  pk.pack(static_cast<std::uint8_t>(message.index() + 1));
  std::visit(BodyPacker{pk}, message);
  const auto* p = reinterpret_cast<const std::byte*>(buffer.data());
  return {p, p + buffer.size()};
}

}  // namespace

std::vector<std::byte> encode(const Message& message) { return encode_as(message, kVersion); }

std::size_t fetch_request_bytes(const std::vector<TensorWant>& wants) {
  FetchRequest request;
  request.has_wants = true;
  request.wants = wants;
  return encode(request).size();
}

std::optional<std::uint16_t> foreign_version(std::span<const std::byte> bytes) {
  // An envelope starts with the same 8 or so bytes in every version: a 4-element array, the
  // magic as a uint32, the version as a positive fixint or a uint8/uint16.
  if (bytes.size() < 7 || bytes[0] != std::byte{0x94} || bytes[1] != std::byte{0xce}) return std::nullopt;
  std::uint32_t magic = 0;
  for (int i = 2; i < 6; ++i) magic = (magic << 8) | std::to_integer<std::uint32_t>(bytes[i]);
  if (magic != kMagic) return std::nullopt;
  auto tag = std::to_integer<unsigned>(bytes[6]);
  std::uint16_t version = 0;
  if (tag <= 0x7f) {
    version = static_cast<std::uint16_t>(tag);
  } else if (tag == 0xcc && bytes.size() >= 8) {
    version = std::to_integer<std::uint16_t>(bytes[7]);
  } else if (tag == 0xcd && bytes.size() >= 9) {
    version = static_cast<std::uint16_t>(std::to_integer<unsigned>(bytes[7]) << 8 | std::to_integer<unsigned>(bytes[8]));
  } else {
    return std::nullopt;
  }
  if (version == kVersion) return std::nullopt;
  return version;
}

std::optional<std::vector<std::byte>> encode_version_refusal(std::uint16_t version) {
  const std::string why = "unsupported protocol version " + std::to_string(version) +
                          ": this producer speaks protocol version " + std::to_string(kVersion) +
                          "; use a consumer of the same modelcast release";
  // Protocol 6 checked a host version by its tensor digests, protocol 7 knew neither Leave nor
  // relays read over CUDA IPC; their join replies are this build's.
  if (version == 6 || version == 7) {
    return encode_as(JoinReply{false, Refusal::kBadRequest, why, 0, 0, "", DeliveryPath::kHostUcx}, version);
  }
  if (version != 5) return std::nullopt;
  // Protocol 5's join reply: this build's, with the announcement endpoint it named then.
  msgpack::sbuffer buffer;
  Packer pk(&buffer);
  pk.pack_array(4);
  pk.pack(kMagic);
  pk.pack(version);
  pk.pack(static_cast<std::uint8_t>(Type::kJoinReply));
  pk.pack_map(8);
  pack_outcome(pk, false, Refusal::kBadRequest, why);
  pk.pack("inc"); pk.pack(std::uint64_t{0});
  pk.pack("pub"); pack_str(pk, "");
  pk.pack("latest"); pk.pack(std::uint64_t{0});
  pk.pack("transport"); pack_str(pk, "");
  pk.pack("path"); pk.pack(static_cast<std::uint8_t>(DeliveryPath::kHostUcx));
  const auto* p = reinterpret_cast<const std::byte*>(buffer.data());
  return std::vector<std::byte>(p, p + buffer.size());
}

Message decode(std::span<const std::byte> bytes, const DecodeLimits& limits) {
  if (bytes.size() > limits.max_message_bytes) {
    fail("message of " + std::to_string(bytes.size()) + " bytes exceeds the limit of " +
         std::to_string(limits.max_message_bytes));
  }
  // msgpack-c reserves room for a container's declared size before reading its elements, so
  // every size a peer declares is capped here, by the limits and by the message's own size;
  // depth caps recursion.
  const auto unpack_limit = unpack_bounds(bytes.size(), limits.max_array, limits.max_map, limits.max_string,
                                          limits.max_binary, limits.max_depth);
  msgpack::object_handle handle;
  try {
    std::size_t offset = 0;
    handle = msgpack::unpack(reinterpret_cast<const char*>(bytes.data()), bytes.size(), offset, nullptr, nullptr,
                             unpack_limit);
    if (offset != bytes.size()) fail("message has " + std::to_string(bytes.size() - offset) + " trailing bytes");
  } catch (const msgpack::insufficient_bytes&) {
    fail("truncated message (" + std::to_string(bytes.size()) + " bytes)");
  } catch (const msgpack::size_overflow& e) {
    fail(std::string("message declares a container or string beyond the decoding limits: ") + e.what());
  } catch (const msgpack::unpack_error& e) {
    fail(std::string("malformed message: ") + e.what());
  } catch (const std::bad_alloc&) {
    fail("message too large to decode (" + std::to_string(bytes.size()) + " bytes)");
  }
  const msgpack::object& root = handle.get();
  if (root.type != msgpack::type::ARRAY || root.via.array.size != 4) fail("message is not a 4-element envelope");
  const msgpack::object* items = root.via.array.ptr;
  std::uint32_t magic = 0;
  std::uint16_t version = 0;
  std::uint8_t type = 0;
  try {
    magic = items[0].as<std::uint32_t>();
    version = items[1].as<std::uint16_t>();
    type = items[2].as<std::uint8_t>();
  } catch (const std::exception&) {
    fail("message envelope has the wrong types");
  }
  if (magic != kMagic) fail("not a modelcast message (bad magic)");
  if (version != kVersion) {
    fail("unsupported protocol version " + std::to_string(version) + " (this build speaks " +
         std::to_string(kVersion) + ")");
  }
  if (type < 1 || type > static_cast<std::uint8_t>(Type::kLeave)) fail("unknown message type " + std::to_string(type));
  try {
    return unpack_body(static_cast<Type>(type), items[3]);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    // Conversions inside msgpack-c (a string into a map, say) throw their own types.
    fail(std::string("malformed message body: ") + e.what());
  }
}

std::vector<std::byte> manifest_signing_bytes(const Manifest& manifest) {
  static constexpr std::string_view kDomain = "modelcast manifest signature v1";
  msgpack::sbuffer buffer;
  buffer.write(kDomain.data(), kDomain.size());
  Packer pk(&buffer);
  pack_manifest(pk, manifest);
  const auto* p = reinterpret_cast<const std::byte*>(buffer.data());
  return {p, p + buffer.size()};
}

}  // namespace modelcast::protocol
