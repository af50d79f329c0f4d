// A producer scripted message by message, speaking the protocol directly: for consumer tests
// that need malformed, hostile or tampered traffic no real Producer would send.
#pragma once

#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <stdexcept>

#include <zmq.hpp>

#include "common/digest.h"
#include "common/host_buffer.h"
#include "core/model/manifest.h"
#include "core/wire/protocol.h"
#include "core/security/curve.h"
#include "core/security/manifest_signature.h"
#include "test_model.h"
#include "transports/ucx/ucx_transport.h"

namespace testing_support {

using namespace std::chrono_literals;
namespace protocol = modelcast::protocol;

class ScriptedProducer {
 public:
  // With a signer, its socket is a CurveZMQ server under that key and every manifest is signed.
  explicit ScriptedProducer(const modelcast::security::ManifestSigner* signer = nullptr)
      : signer_(signer),
        // It sends each version's chunks whether or not the consumer took the version, so a
        // refused one leaves sends that never end: released after 1 s, not the default 5.
        transport_(modelcast::transport::make_ucx_transport({.release_timeout = std::chrono::milliseconds(1000)})),
        router_(context_, zmq::socket_type::router),
        model_(testmodel::make(256)) {
    router_.set(zmq::sockopt::linger, 0);
    if (signer_) modelcast::security::make_curve_server(router_, signer_->secret());
    router_.bind("tcp://127.0.0.1:*");
    std::vector<modelcast::TensorSpec> specs;
    for (auto& t : model_) specs.push_back(t.spec);
    layout_.model = "test";
    layout_.incarnation = kIncarnation;
    layout_.tensors = modelcast::plan_layout(specs, &layout_.total_bytes);
    layout_.block_bytes = kBlockBytes;  // a host version is checked block by block, as the producer's
    slot_ = modelcast::HostBuffer(layout_.total_bytes);
    region_ = transport_->register_memory(slot_.data(), slot_.size(), modelcast::transport::MemoryLocation::host());
  }
  ~ScriptedProducer() {
    region_.reset();
    transport_.reset();
  }

  // Signs what it serves from now on with another key (its sockets keep theirs).
  void sign_with(const modelcast::security::ManifestSigner* signer) { signer_ = signer; }

  std::string endpoint() { return router_.get(zmq::sockopt::last_endpoint); }
  void* router_handle() { return router_.handle(); }  // to poll for requests
  static constexpr std::uint64_t kIncarnation = 77;
  static constexpr std::uint64_t kBlockBytes = 1u << 20;  // = the chunks it sends

  // XXH3 of each block of the slot as it is now, the producer's digest thread's answer.
  std::vector<std::uint64_t> block_digests_of_slot() const {
    std::vector<std::uint64_t> digests;
    for (std::uint64_t at = 0; at < layout_.total_bytes; at += kBlockBytes) {
      digests.push_back(modelcast::digest_bytes(slot_.data() + at, std::min(kBlockBytes, layout_.total_bytes - at)));
    }
    return digests;
  }

  // Next request from the consumer, decoded (routing id kept for replies).
  protocol::Message next_request() {
    zmq::pollitem_t item{router_.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, 30s) == 0) throw std::runtime_error("no request from the consumer in 30 s");
    zmq::message_t id, body;
    (void)router_.recv(id);
    (void)router_.recv(body);
    routing_id_ = id.to_string();
    last_request_fd_ = zmq_msg_get(body.handle(), ZMQ_SRCFD);
    return protocol::decode({static_cast<const std::byte*>(body.data()), body.size()});
  }

  // Closes the connection the last request came over, as a producer capping its connections
  // does (ZeroMQ has no call for it: the descriptor is shut down under it).
  void close_connection_of_last_request() { ::shutdown(last_request_fd_, SHUT_RDWR); }

  void reply(const protocol::Message& message) {
    auto bytes = protocol::encode(message);
    reply_raw(bytes);
  }
  void reply_raw(std::span<const std::byte> bytes) {
    router_.send(zmq::buffer(routing_id_), zmq::send_flags::sndmore);
    router_.send(zmq::buffer(bytes.data(), bytes.size()));
  }
  // To the consumer that sent the last request, as the producer announces to joined consumers.
  void announce_raw(std::span<const std::byte> bytes) { reply_raw(bytes); }
  void announce(std::uint64_t version) { announce_raw(protocol::encode(protocol::Announce{kIncarnation, version, 0, 1, std::nullopt})); }

  void accept_join() { answer_join(next_join()); }
  // The next join request, unanswered (other requests before it are dropped).
  protocol::JoinRequest next_join() {
    for (;;) {  // a consumer whose join went unanswered asks again: take the newest
      auto request = next_request();
      if (auto* join = std::get_if<protocol::JoinRequest>(&request)) return *join;
    }
  }
  // Accepts `join`, the last request read. A consumer that joins again from a new UCX worker
  // (it does after losing its producer) is connected anew.
  void answer_join(const protocol::JoinRequest& join) {
    connect(join);
    reply(protocol::JoinReply{true, protocol::Refusal::kNone, "", kIncarnation, 0, "ucx"});
  }
  // Connects to the UCX worker `join` offers, for a test that then replies its own way.
  void connect(const protocol::JoinRequest& join) {
    auto offer = std::find_if(join.offers.begin(), join.offers.end(), [](const auto& o) { return o.name == "ucx"; });
    if (offer == join.offers.end()) throw std::runtime_error("the consumer offered no UCX transport");
    if (peer_ == 0 || offer->address != peer_address_) {
      peer_ = transport_->connect(offer->address, false, nullptr);
      peer_address_ = offer->address;
    }
  }

  // Announces `version` until the consumer asks for it, then answers with the layout as
  // `tweak` leaves it and `chunk_bytes`, sends no data and returns the consumer's ack: for
  // manifests the consumer must refuse before it allocates or posts anything.
  protocol::Ack answer_with_manifest(std::uint64_t version, std::uint64_t chunk_bytes,
                                     const std::function<void(modelcast::Manifest&)>& tweak) {
    auto fetch = await_fetch(version);
    auto manifest = layout_;
    manifest.version = version;
    manifest.block_digests = block_digests_of_slot();
    tweak(manifest);
    reply(protocol::FetchReply{true, protocol::Refusal::kNone, "", fetch.fetch_id, chunk_bytes, false, 0, manifest,
                               signer_ ? signer_->sign(manifest) : std::vector<std::byte>{}, {}, {}});
    for (;;) {
      auto request = next_request();
      if (auto* ack = std::get_if<protocol::Ack>(&request)) return *ack;
    }
  }

  // Announces `version` until the consumer asks for it; a fetch of an older version (asked
  // before the announcement arrived) is refused as the real producer refuses it: not held.
  protocol::FetchRequest await_fetch(std::uint64_t version) {
    for (;;) {
      auto fetch = next_fetch_announcing(version);
      if (fetch.version == version) return fetch;
      reply(protocol::FetchReply{false, protocol::Refusal::kNotHeld, "superseded", fetch.fetch_id, 0, false, 0, {}, {}, {}, {}});
    }
  }

  // Announces `version` until the consumer sends a fetch, of whatever version, and returns it.
  protocol::FetchRequest next_fetch_announcing(std::uint64_t version) {
    for (;;) {
      announce(version);
      zmq::pollitem_t item{router_.handle(), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, 20ms) == 0) continue;
      auto request = next_request();
      if (auto* f = std::get_if<protocol::FetchRequest>(&request)) return *f;
    }
  }

  // Announces `version` until the consumer asks for it, then serves it; `corrupt` flips one byte after the digests are taken.
  // With `digests_later`, the manifest goes out without digests and they follow the data in a
  // Digests message, as the real producer does when a fetch beats its digest thread.
  protocol::Ack serve(std::uint64_t version, bool corrupt, bool digests_later = false,
                     std::function<void(modelcast::Manifest&)> tweak = nullptr,
                     std::function<void(modelcast::Manifest&, std::byte* slot)> tamper = nullptr) {
    protocol::FetchRequest fetch = await_fetch(version);
    testmodel::fill(model_, 1, version);
    auto manifest = layout_;
    manifest.version = version;
    for (std::size_t i = 0; i < model_.size(); ++i) {
      auto& entry = manifest.tensors[i];
      std::memcpy(slot_.data() + entry.offset, model_[i].words.data(), entry.size);
    }
    manifest.block_digests = block_digests_of_slot();
    if (corrupt) slot_.data()[manifest.tensors[5].offset + 3] ^= std::byte{0x10};
    if (tweak) tweak(manifest);
    std::vector<std::byte> signature;
    if (signer_) signature = signer_->sign(manifest);
    // What a relay on the way would do: change the manifest (and the bytes) after signing.
    if (tamper) tamper(manifest, slot_.data());
    auto sent = manifest;
    if (digests_later) sent.block_digests.clear();
    reply(protocol::FetchReply{true, protocol::Refusal::kNone, "", fetch.fetch_id, 1u << 20, digests_later, 0, sent,
                               digests_later ? std::vector<std::byte>{} : signature, {}, {}});
    std::size_t chunks = (manifest.total_bytes + (1u << 20) - 1) / (1u << 20);
    for (std::size_t i = 0; i < chunks; ++i) {
      std::size_t offset = i << 20;
      transport_->post_send(peer_, *region_, offset, std::min<std::size_t>(1u << 20, manifest.total_bytes - offset),
                            protocol::chunk_tag(fetch.fetch_id, i), [](const auto&) {});
    }
    if (digests_later) {
      reply(protocol::Digests{fetch.fetch_id, version, {}, manifest.block_digests, signature});
    }
    for (;;) {
      auto request = next_request();
      if (auto* ack = std::get_if<protocol::Ack>(&request)) return *ack;
    }
  }

 private:
  const modelcast::security::ManifestSigner* signer_;
  std::unique_ptr<modelcast::transport::Transport> transport_;
  zmq::context_t context_;
  zmq::socket_t router_;
  std::vector<testmodel::Tensor> model_;
  modelcast::Manifest layout_;
  modelcast::HostBuffer slot_;
  std::unique_ptr<modelcast::transport::MemoryRegion> region_;
  modelcast::transport::PeerId peer_ = 0;
  std::vector<std::byte> peer_address_;
  std::string routing_id_;
  int last_request_fd_ = -1;  // ZMQ_SRCFD of the last request
};

}  // namespace testing_support
