// Writes the seed corpus of the fuzz targets: valid inputs made with the project's own encoders
// and the known crash inputs of the control-message decoder. Usage: fuzz_make_corpus DIR
// (normally fuzz/corpus). Files are small and deterministic; rerun after a protocol change.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <msgpack.hpp>

#include "core/model/manifest.h"
#include "core/wire/protocol.h"
#include "transports/cuda_ipc/ipc_descriptor.h"
#include "transports/ucx/address_seal.h"

namespace fs = std::filesystem;
namespace mp = modelcast::protocol;
using Bytes = std::vector<std::byte>;

namespace {

fs::path g_root;

Bytes envelope_prefix(std::uint8_t type);
void must_decode(const Bytes& message, const char* what, bool validate = false);

void write(const std::string& target, const std::string& name, const Bytes& bytes) {
  if (target == "fuzz_control_message" && name.rfind("known-crash", 0) != 0) must_decode(bytes, name.c_str());
  if (target == "fuzz_manifest" && name.rfind("known-crash", 0) != 0) {
    Bytes message = envelope_prefix(5);
    message.insert(message.end(), bytes.begin(), bytes.end());
    must_decode(message, name.c_str(), true);
  }
  const fs::path dir = g_root / target;
  fs::create_directories(dir);
  std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "cannot write %s\n", (dir / name).c_str());
    std::exit(1);
  }
}

Bytes raw(std::initializer_list<int> values) {
  Bytes out;
  for (int v : values) out.push_back(static_cast<std::byte>(v));
  return out;
}

Bytes text(std::string_view s) {
  Bytes out;
  for (char c : s) out.push_back(static_cast<std::byte>(c));
  return out;
}

Bytes cat(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The 8 bytes protocol::encode puts before a body: fixarray(4), uint32 magic, version, type.
constexpr std::size_t kEnvelopeBytes = 8;
Bytes envelope_prefix(std::uint8_t type) {
  return raw({0x94, 0xce, 0x4d, 0x43, 0x53, 0x54, mp::kVersion, type});
}

Bytes body_of(const Bytes& message) {
  // Everything but the type byte, which differs per message.
  const Bytes prefix = envelope_prefix(0);
  if (message.size() < kEnvelopeBytes ||
      !std::equal(message.begin(), message.begin() + kEnvelopeBytes - 1, prefix.begin())) {
    std::fprintf(stderr, "make_corpus: the envelope is not the one the harnesses assume\n");
    std::exit(1);
  }
  return {message.begin() + kEnvelopeBytes, message.end()};
}

Bytes sbuffer_bytes(const msgpack::sbuffer& buffer) {
  const auto* p = reinterpret_cast<const std::byte*>(buffer.data());
  return {p, p + buffer.size()};
}

modelcast::Manifest sample_manifest() {
  modelcast::Manifest m;
  m.model = "tiny";
  m.incarnation = 0x1234567890abcdefULL;
  m.version = 3;
  m.step = 1200;
  m.publish_time_ns = 1700000000000000000LL;
  m.metadata = {{"lr", "3e-4"}, {"run", "r1"}};
  std::vector<modelcast::TensorSpec> specs(3);
  specs[0].name = "embed.weight";
  specs[0].dtype = modelcast::DType::kBF16;
  specs[0].shape = {16, 8};
  specs[1].name = "layer0.bias";
  specs[1].dtype = modelcast::DType::kF32;
  specs[1].shape = {8};
  specs[2].name = "step";
  specs[2].dtype = modelcast::DType::kI64;
  m.tensors = modelcast::plan_layout(specs, &m.total_bytes);
  for (std::size_t i = 0; i < m.tensors.size(); ++i) m.tensors[i].digest = 0x9e3779b97f4a7c15ULL * (i + 1);
  return m;
}

Bytes sig(std::size_t n) {
  Bytes out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<std::byte>(i * 7 + 1);
  return out;
}

// Seeds are only useful when they reach past the decoder: check the valid ones decode.
void must_decode(const Bytes& message, const char* what, bool validate) {
  try {
    const mp::Message decoded = mp::decode(message);
    if (validate) {
      if (const auto* reply = std::get_if<mp::FetchReply>(&decoded)) modelcast::validate_manifest(reply->manifest);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_corpus: seed %s does not decode: %s\n", what, e.what());
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  g_root = argv[1];

  // --- fuzz_control_message: one valid message of each type, and the known crashes --------
  const modelcast::Manifest manifest = sample_manifest();
  // Only members that every protocol version so far has are set (fields added later keep
  // their defaults), so this builds against the tree as it is.
  mp::FetchReply reply;
  reply.ok = true;
  reply.fetch_id = 7;
  reply.chunk_bytes = 1 << 20;
  reply.manifest = manifest;
  mp::FetchReply refused;
  refused.error = "version 2 is gone";
  refused.fetch_id = 8;
  mp::FetchReply pending = reply;
  pending.digests_pending = true;
  for (auto& t : pending.manifest.tensors) t.digest = 0;

  mp::Announce announce;
  announce.incarnation = 42;
  announce.version = 3;
  announce.step = 1200;
  announce.publish_time_ns = 1700000000000000000LL;
  mp::JoinRequest join;
  join.model = "tiny";
  join.consumer_name = "consumer-a";
  modelcast::transport::Capabilities ucx_caps;
  ucx_caps.reach = modelcast::transport::Reach::kNetwork;
  ucx_caps.one_sided = true;
  join.offers = {{"ucx", ucx_caps, sig(40)}, {"loopback", {}, sig(16)}};
  join.host_id = "6f1c0b6e-boot-id";
  join.process = 0x1234abcd;
  mp::JoinReply joined;
  joined.ok = true;
  joined.incarnation = 42;
  joined.latest_version = 3;
  joined.transport = "ucx";
  joined.model_bytes = 1u << 20;
  mp::JoinReply full;
  full.error = "producer full";
  full.incarnation = 42;
  full.transport = "ucx";
  mp::FetchRequest fetch;
  fetch.incarnation = 42;
  fetch.fetch_id = 7;
  mp::Ack ack;
  ack.incarnation = 42;
  ack.version = 3;
  ack.fetch_id = 7;
  ack.ok = true;
  mp::Ping ping;
  ping.incarnation = 42;
  mp::Digests digests;
  digests.fetch_id = 7;
  digests.version = 3;
  digests.digests = {1, 2, 3};

  write("fuzz_control_message", "announce", mp::encode(announce));
  write("fuzz_control_message", "join_request", mp::encode(join));
  mp::JoinRequest wanting = join;
  wanting.wants = {modelcast::TensorWant::shard("*", 1, 0, 2), modelcast::TensorWant::nothing("emb"),
                   modelcast::TensorWant::of("w", {{{0, 8}, {4, 8}}, {{4, 0}, {4, 8}}})};
  write("fuzz_control_message", "join_request_wants", mp::encode(wanting));
  write("fuzz_control_message", "join_reply", mp::encode(joined));
  write("fuzz_control_message", "join_refused", mp::encode(full));
  write("fuzz_control_message", "fetch_request", mp::encode(fetch));
  mp::FetchRequest fetch_wanting = fetch;
  fetch_wanting.has_wants = true;
  fetch_wanting.wants = {modelcast::TensorWant::of("w", {{{0, 0}, {8, 4}}}), modelcast::TensorWant::nothing("*")};
  write("fuzz_control_message", "fetch_request_wants", mp::encode(fetch_wanting));
  mp::JoinReply ranked = joined;
  ranked.rank = 0;
  ranked.rank_endpoints = {"tcp://10.0.0.1:5555", "tcp://10.0.0.2:5555"};
  write("fuzz_control_message", "join_reply_ranks", mp::encode(ranked));
  write("fuzz_control_message", "fetch_reply", mp::encode(reply));
  write("fuzz_control_message", "fetch_refused", mp::encode(refused));
  write("fuzz_control_message", "ack", mp::encode(ack));
  write("fuzz_control_message", "ping", mp::encode(ping));
  write("fuzz_control_message", "digests", mp::encode(digests));
  // Relays: an order to send blocks, one to export a buffer (CUDA IPC), the offer, cancel, failure.
  mp::RelayOrder order{42, 5, 3, 7, 65536, {0, 2, 5}, sig(40), true, false};
  write("fuzz_control_message", "relay_order", mp::encode(order));
  mp::RelayOrder export_order{42, 6, 3, 8, 0, {}, {}, false, true};
  write("fuzz_control_message", "relay_order_export", mp::encode(export_order));
  write("fuzz_control_message", "relay_offer", mp::encode(mp::RelayOffer{42, 6, sig(96)}));
  write("fuzz_control_message", "relay_cancel", mp::encode(mp::RelayCancel{42, 6, true}));
  write("fuzz_control_message", "relay_failed", mp::encode(mp::RelayFailed{42, 5, "not held here"}));
  write("fuzz_control_message", "leave", mp::encode(mp::Leave{42}));
  // Known crashes (unbounded msgpack decoding): an array32 header claiming 2^32-1 elements, alone
  // and as the body of a FetchReply envelope.
  write("fuzz_control_message", "known-crash-array32-alone", raw({0xdd, 0xff, 0xff, 0xff, 0xff}));
  write("fuzz_control_message", "known-crash-array32-body",
        cat(envelope_prefix(5), raw({0xdd, 0xff, 0xff, 0xff, 0xff})));

  // --- fuzz_manifest: FetchReply bodies ---------------------------------------------------
  write("fuzz_manifest", "reply", body_of(mp::encode(reply)));
  write("fuzz_manifest", "reply_pending", body_of(mp::encode(pending)));
  write("fuzz_manifest", "reply_refused", body_of(mp::encode(refused)));
  {
    mp::FetchReply piece = reply;  // rank 1 of 2, its tensors pieces of whole ones
    piece.manifest.rank = 1;
    piece.manifest.rank_count = 2;
    for (auto& t : piece.manifest.tensors) {
      t.global_shape = t.spec.shape;
      t.global_offset.assign(t.spec.shape.size(), 0);
      if (!t.global_shape.empty()) t.global_shape[0] *= 2;
      if (!t.global_offset.empty()) t.global_offset[0] = t.spec.shape[0];
    }
    write("fuzz_manifest", "reply_rank_pieces", body_of(mp::encode(piece)));
  }
  {
    mp::FetchReply empty;
    empty.ok = true;
    empty.manifest.model = "empty";
    write("fuzz_manifest", "reply_empty_manifest", body_of(mp::encode(empty)));
  }
  write("fuzz_manifest", "known-crash-array32-alone", raw({0xdd, 0xff, 0xff, 0xff, 0xff}));
  {
    // A FetchReply body whose manifest's "tensors" claims 2^32-1 entries (and ends there: msgpack
    // meets the header before the body's field set matters).
    msgpack::sbuffer buffer;
    msgpack::packer<msgpack::sbuffer> pk(&buffer);
    pk.pack_map(8);
    pk.pack("ok"); pk.pack(true);
    pk.pack("why"); pk.pack(0);
    pk.pack("err"); pk.pack("");
    pk.pack("fetch"); pk.pack(1);
    pk.pack("chunk"); pk.pack(1 << 20);
    pk.pack("pending"); pk.pack(false);
    pk.pack("manifest");
    pk.pack_map(9);
    pk.pack("model"); pk.pack("m");
    pk.pack("inc"); pk.pack(1);
    pk.pack("ver"); pk.pack(1);
    pk.pack("step"); pk.pack(0);
    pk.pack("t_pub"); pk.pack(0);
    pk.pack("meta"); pk.pack_map(0);
    pk.pack("integrity"); pk.pack(true);
    pk.pack("total"); pk.pack(0);
    pk.pack("tensors");
    write("fuzz_manifest", "known-crash-tensors-array32", cat(sbuffer_bytes(buffer), raw({0xdd, 0xff, 0xff, 0xff, 0xff})));
  }

  // --- fuzz_ipc_descriptor: a cuda_ipc region descriptor as export_region writes it ---------
  {
    modelcast::cuda_ipc::IpcDescriptor d;
    d.exporter = 0x5eed5eed12345678ULL;
    d.source.slot = 2;
    d.source.device = 0;
    d.source.size = 1 << 26;
    for (std::size_t i = 0; i < d.source.handle.size(); ++i) d.source.handle[i] = static_cast<std::byte>(0xa0 + i);
    write("fuzz_ipc_descriptor", "slot_on_device_0", modelcast::cuda_ipc::encode_descriptor(d));
    d.source.slot = 0xffffffffu;
    d.source.device = 0x7fffffff;
    d.source.size = ~std::uint64_t{0};
    write("fuzz_ipc_descriptor", "fields_at_their_limits", modelcast::cuda_ipc::encode_descriptor(d));
  }

  // --- fuzz_curve_csv: first byte picks the reader (see fuzz_curve_csv.cpp) -----------------
  write("fuzz_curve_csv", "plain_header", text("0step,loss\n0,10.5\n100,4.25\n200,3.5\n300,3.125\n"));
  write("fuzz_curve_csv", "plain_time", text("0step,loss,time_s\n10,5.0,1.5\n20,4.0,3.0\n30,3.5,0.5\n40,3.25,2.0\n"));
  write("fuzz_curve_csv", "plain_headerless", text("0 1, 9.0\r\n2, 8.5\r\n\r\n3.0,8.0\r\n"));
  write("fuzz_curve_csv", "curves_run",
        text("1run,track,record,step,total_steps,val_loss,train_time_s\n"
             "r0,t,rec,0,1000,11.0,0.0\nr1,t,rec,0,1000,10.0,0.0\nr1,t,rec,250,1000,5.5,12.5\n"
             "r1,t,rec,500,1000,4.0,25.0\nr2,t,rec,0,1000,9.0,0.0\n"));
  write("fuzz_curve_csv", "collection",
        text("2run,track,record,step,total_steps,train_loss,train_time_s\n"
             "a,t,r,0,100,5.0,0.0\na,t,r,50,100,4.0,1.0\nb,t,r,0,100,6.0,0.0\nb,t,r,0,100,6.0,0.0\n"
             "c,t,r,10,100,3.0,2.0\n"));

  // --- fuzz_transport_address: sealed addresses in and out of the accepted format ----------
  {
    // A format-v1 worker address as UCX packs one: header with the uuid flag, the uuid, one
    // device (memory domain 0, last, 8-byte address) with one transport (checksum 0x1234,
    // attributes, last, 8-byte interface address): the layout the target's stand-in expects.
    std::vector<std::byte> body;
    auto put = [&](std::initializer_list<int> bytes) {
      for (int b : bytes) body.push_back(static_cast<std::byte>(b));
    };
    put({0x20, 1, 2, 3, 4, 5, 6, 7, 8, 0x00, 0x88, 1, 2, 3, 4, 5, 6, 7, 8, 0x34, 0x12});
    put({0, 0, 0, 0, 0, 0, 0x80, 0x4e, 0, 0, 0, 0, 0x10, 0, 0, 0});  // overhead 0, bandwidth 1e9, 0, flags
    put({0x88, 9, 9, 9, 9, 9, 9, 9, 9});
    write("fuzz_transport_address", "sealed_v1", modelcast::transport::seal_address(body.data(), body.size()));
    auto unknown = body;
    unknown[0] = std::byte{0x0e};
    write("fuzz_transport_address", "sealed_unknown_version", modelcast::transport::seal_address(unknown.data(), unknown.size()));
    write("fuzz_transport_address", "sealed_short", modelcast::transport::seal_address(body.data(), 3));
  }
  return 0;
}
