// The attach protocol between modelcastd and its local clients: one msgpack map per
// SOCK_SEQPACKET message (the socket keeps message boundaries; an fd rides along with SCM_RIGHTS).
//
//   client -> daemon  {op:"acquire", model, min_version, timeout_ms}   answered by a Reply
//   client -> daemon  {op:"release", hold}                              not answered
//   daemon -> client  Reply: {code, error} or {code:0, hold:0} (no version in time), or
//                     {code:0, hold, manifest...} with the buffer's read-only fd attached, or,
//                     for a manifest too large for one socket message, {code:0, manifest_fd:true}
//                     with the buffer's fd and a sealed memfd holding the whole Reply.
//
// Requests are answered in order. Holds belong to the connection: closing it releases them.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "modelcast/types.h"

namespace modelcastd::attach {

inline constexpr std::size_t kMaxMessageBytes = 1u << 20;      // one socket message
inline constexpr std::size_t kInlineReplyBytes = 32u << 10;    // larger replies travel in a memfd
inline constexpr std::size_t kMaxManifestBytes = 64u << 20;    // the producer's own message limit
inline constexpr std::size_t kMaxScalesPerTensor = 1u << 17;   // any one array the decoder takes

// The longest wait one request asks of the daemon: the daemon's poll timeouts are ints of
// milliseconds. A client waiting longer sends the request again for the rest.
inline constexpr std::chrono::milliseconds kLongestWait = std::chrono::hours(24);

struct Request {
  enum class Op { kAcquire, kRelease } op = Op::kAcquire;
  std::string model;
  std::uint64_t min_version = 0;  // 0: whatever is newest now, without waiting
  std::uint64_t timeout_ms = 0;   // the daemon waits at most kLongestWait; a client asks again
  std::uint64_t hold = 0;         // kRelease
};

struct TensorEntry {
  std::string name;
  modelcast::DType dtype = modelcast::DType::kU8;
  std::vector<std::int64_t> shape;
  std::uint64_t offset = 0;  // within the buffer
  std::uint64_t bytes = 0;
  // A part of the tensor (the model's wants): where it starts in the whole tensor, and the
  // whole's shape; both empty for a whole tensor. An f8e4m3 conversion's scales (TensorView's
  // meaning). Sent as a sixth element, a map, only when one is set.
  std::vector<std::int64_t> box_offset;
  std::vector<std::int64_t> whole_shape;
  std::vector<float> scales;
  std::uint64_t scale_block = 0;
};

struct Manifest {
  std::uint64_t hold = 0;         // the client releases this id
  std::uint64_t buffer_id = 0;    // same id: same memfd (the client maps each once)
  std::uint64_t buffer_bytes = 0; // length to map
  std::uint64_t version = 0;
  std::int64_t step = 0;
  std::uint64_t incarnation = 0;
  std::string source;             // "producer" or "repository"
  std::map<std::string, std::string> metadata;
  std::vector<TensorEntry> tensors;
};

struct Reply {
  int code = 0;                   // a modelcast::ErrorCode, 0 for success
  std::string error;
  std::optional<Manifest> manifest;  // empty with code 0: no version (yet / in time)
  bool manifest_in_fd = false;    // the Reply with the manifest is in the second descriptor
};

std::vector<char> encode(const Request& request);
std::vector<char> encode(const Reply& reply);
// Both throw modelcast::Error(kProtocol) naming what is wrong; they bound every container.
Request decode_request(std::span<const char> bytes);
Reply decode_reply(std::span<const char> bytes);
// The hold a version reply carries, read as leniently as can be (nullopt: none, or not even a
// map): a reply decode_reply refuses (a dtype this client does not know) may still hold a
// version for the client, which must release it or the daemon keeps its buffer pinned.
std::optional<std::uint64_t> hold_in_reply(std::span<const char> bytes) noexcept;
// The short message that says the reply is in a memfd.
std::vector<char> encode_manifest_in_fd();

}  // namespace modelcastd::attach
