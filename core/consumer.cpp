// Consumer: see include/modelcast/consumer.h.
//
// Threads and what they own:
//  - reader threads call acquire()/wait_for_version(): they copy `current_` under `mutex_`.
//  - the service thread owns the ZeroMQ sockets (DEALER to the producer's ROUTER, SUB to its
//    PUB), the UCX transport (renewed when the producer is replaced), the receive-buffer pool
//    and the fetch in flight; it verifies and installs versions.
//  - the transport's progress thread writes received bytes into a buffer no view refers to,
//    and its completions only push events.
// A version becomes visible by replacing one shared_ptr under `mutex_`: readers see the old
// version or the new one, never a mix, and a view they hold keeps its buffer out of reuse.
#include "modelcast/consumer.h"

#include <sys/sysinfo.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <condition_variable>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <variant>

#include <zmq.hpp>

#include "core/digest.h"
#include "core/host_identity.h"
#include "core/installed_version.h"
#include "core/log.h"
#include "core/protocol.h"
#include "core/security/curve.h"
#include "core/security/manifest_signature.h"
#include "core/wakeup.h"
#include "core/zmq_util.h"
#include "transports/ucx/ucx_transport.h"

namespace modelcast {
namespace {

using Clock = std::chrono::steady_clock;

std::string default_consumer_name() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return std::string(host) + ":" + std::to_string(getpid());
}

std::uint64_t random_session() {
  std::random_device device;
  return (std::uint64_t{device()} << 32) ^ device();
}

// The largest model this consumer will allocate for: what it can hold at all (its caller
// buffers, or half the machine's memory), narrowed by the caller's own cap.
std::uint64_t model_size_cap(const ConsumerOptions& options) {
  std::uint64_t cap = 0;
  if (!options.caller_buffers.empty()) {
    for (auto buffer : options.caller_buffers) cap = std::max<std::uint64_t>(cap, buffer.size());
  } else {
    // Two versions must fit at once (one served while the next arrives).
    struct sysinfo info {};
    cap = sysinfo(&info) == 0 ? std::uint64_t{info.totalram} * info.mem_unit / 2 : std::uint64_t{1} << 40;
  }
  if (options.max_model_bytes != 0) cap = std::min<std::uint64_t>(cap, options.max_model_bytes);
  return cap;
}

// A chunk smaller than this makes the consumer post one receive (and keep its bookkeeping) per
// few bytes; the producer never picks one (its chunk option is validated likewise).
constexpr std::uint64_t kMinChunkBytes = 64u << 10;

// "tcp://0.0.0.0:PORT" (or * or [::]) is how a producer bound to every interface sees its
// announcement endpoint; the consumer reaches it on the host it reached the producer on.
std::string reachable_endpoint(const std::string& announced, const std::string& producer_endpoint) {
  for (const char* wildcard : {"tcp://0.0.0.0:", "tcp://*:", "tcp://[::]:"}) {
    std::string prefix(wildcard);
    if (announced.rfind(prefix, 0) != 0 || producer_endpoint.rfind("tcp://", 0) != 0) continue;
    auto colon = producer_endpoint.rfind(':');
    return producer_endpoint.substr(0, colon + 1) + announced.substr(prefix.size());
  }
  return announced;
}

std::int64_t realtime_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct ChunkDone {
  std::uint64_t fetch_id;
  std::size_t chunk;
  bool ok;
  std::string error;
};
struct Stop {};
using Event = std::variant<ChunkDone, Stop>;

struct FetchInFlight {
  std::uint64_t fetch_id = 0;
  Clock::time_point requested_at{};
  bool replied = false;  // the producer's FetchReply arrived
  Manifest manifest;
  std::shared_ptr<detail::ReceiveBuffer> buffer;
  std::vector<transport::TransferId> transfers;
  std::size_t pending = 0;
  std::string failure;
  Clock::time_point replied_at{};
  // Hashing overlaps the transfer: the contiguous prefix of completed chunks is hashed as it grows.
  std::uint64_t chunk_bytes = 0;
  std::vector<bool> chunk_done;
  std::size_t done_prefix = 0;  // chunks [0, done_prefix) complete
  std::optional<StreamingDigests> digests;
  bool digests_pending = false;  // the producer's digests have not arrived yet
  std::vector<std::byte> signature;  // the producer's, with the manifest or with its digests
};

}  // namespace

class Consumer::Impl {
 public:
  explicit Impl(ConsumerOptions options)
      : options_(std::move(options)),
        log_(log::get("consumer")),
        transport_(transport::make_ucx_transport()) {
    if (options_.producer_endpoint.empty()) throw Error(ErrorCode::kInvalidArgument, "producer_endpoint is empty");
    if (options_.model_name.empty()) throw Error(ErrorCode::kInvalidArgument, "model_name is empty");
    if (options_.consumer_name.empty()) options_.consumer_name = default_consumer_name();
    if (options_.caller_buffers.empty() && options_.buffers < 2) {
      throw Error(ErrorCode::kInvalidArgument, "buffers must be >= 2, got " + std::to_string(options_.buffers));
    }
    if (!options_.caller_buffers.empty() && options_.caller_buffers.size() < 2) {
      throw Error(ErrorCode::kInvalidArgument, "caller_buffers needs >= 2 buffers, got " +
                                                   std::to_string(options_.caller_buffers.size()));
    }
    for (const auto& spec : options_.expected_layout) {
      if (spec.name.empty()) throw Error(ErrorCode::kInvalidArgument, "expected_layout has a tensor with an empty name");
    }
    if (options_.transfer_timeout.count() <= 0) {
      throw Error(ErrorCode::kInvalidArgument, "transfer_timeout must be positive");
    }
    check_endpoint(options_.producer_endpoint);
    set_up_security();
    limits_.max_total_bytes = model_size_cap(options_);
    service_ = std::thread([this] { service_loop(); });
  }

  ~Impl() {
    events_->push(Stop{});
    service_.join();
  }

  ModelView acquire() const {
    std::lock_guard lock(mutex_);
    return ModelView(current_);
  }

  ModelView wait_for_version(std::uint64_t version, std::chrono::milliseconds timeout) const {
    std::unique_lock lock(mutex_);
    bool reached = installed_cv_.wait_for(lock, timeout, [&] {
      return current_ && current_->manifest.version >= version;
    });
    return reached ? ModelView(current_) : ModelView();
  }

  ConsumerStats stats() const {
    std::lock_guard lock(mutex_);
    return stats_;
  }

 private:
  void set_up_security() {
    if (!options_.key_file.empty()) {
      if (!options_.key.empty()) throw Error(ErrorCode::kInvalidArgument, "give key or key_file, not both");
      options_.key = load_key_pair(options_.key_file);
    }
    if (options_.producer_public_key.empty()) {
      if (!zmq_util::is_local_endpoint(options_.producer_endpoint) && !options_.allow_plaintext_remote) {
        throw Error(ErrorCode::kInvalidArgument,
                    "producer endpoint '" + options_.producer_endpoint +
                        "' is on another host: pin the producer's public key (producer_public_key) or set "
                        "allow_plaintext_remote");
      }
      return;
    }
    pinned_key_ = security::decode_public_key(options_.producer_public_key, "producer_public_key");
    if (options_.key.empty()) options_.key = generate_key_pair();
    own_secret_ = security::decode_secret_key(options_.key, "consumer key");
    security::curve_public(*pinned_key_);  // refuses a key that is no Ed25519 point, here and not later
  }

  // ZeroMQ parses an endpoint only when connecting, and throws there: on the service thread
  // that would end the process, so a bad one is refused here, in the caller's thread.
  void check_endpoint(const std::string& endpoint) {
    if (endpoint.rfind("tcp://", 0) != 0 && endpoint.rfind("ipc://", 0) != 0) {
      throw Error(ErrorCode::kInvalidArgument, "producer_endpoint '" + endpoint + "' must start with tcp:// or ipc://");
    }
    try {
      zmq::socket_t probe(zmq_context_, zmq::socket_type::dealer);
      probe.set(zmq::sockopt::linger, 0);
      probe.connect(endpoint);
    } catch (const zmq::error_t& e) {
      throw Error(ErrorCode::kInvalidArgument, "producer_endpoint '" + endpoint + "' is not usable: " + e.what());
    }
  }

  // ---- service thread ------------------------------------------------------------------

  void service_loop() {
    start_join();
    for (;;) {
      zmq::pollitem_t items[4] = {{dealer_->handle(), 0, ZMQ_POLLIN, 0},
                                  {nullptr, events_->fd(), ZMQ_POLLIN, 0},
                                  {monitor_ ? monitor_->handle() : nullptr, 0, ZMQ_POLLIN, 0},
                                  {subscriber_ ? subscriber_->handle() : nullptr, 0, ZMQ_POLLIN, 0}};
      zmq::poll(items, subscriber_ ? 4 : monitor_ ? 3 : 2, tick());
      if (monitor_ && (items[2].revents & ZMQ_POLLIN)) guarded([&] { on_monitor_event(); });
      if (items[1].revents & ZMQ_POLLIN) {
        for (auto& event : events_->drain()) {
          if (std::holds_alternative<Stop>(event)) {
            abort_fetch("consumer shutting down", false);
            return;
          }
          on_chunk(std::get<ChunkDone>(event));
        }
      }
      if (items[0].revents & ZMQ_POLLIN) {
        while (auto parts = zmq_util::receive(*dealer_)) guarded([&] { on_reply(*parts); });
      }
      if (subscriber_ && (items[3].revents & ZMQ_POLLIN)) {
        while (auto parts = zmq_util::receive(*subscriber_)) guarded([&] { on_announce(*parts); });
      }
      guarded([&] {
        check_producer_alive();
        check_transfer_deadline();
        maybe_fetch();
      });
    }
  }

  // Nothing a peer sends may end the inference process: a failure while handling it is
  // reported (on_error, stats) and the last good version stays served.
  template <typename Step>
  void guarded(Step&& step) {
    try {
      step();
    } catch (const Error& e) {
      report(e);
    } catch (const zmq::error_t& e) {
      report(Error(ErrorCode::kTransport, std::string("control plane: ") + e.what()));
    } catch (const std::bad_alloc&) {
      abort_fetch("out of memory", true);
      report(Error(ErrorCode::kResource, "out of memory while handling a message from the producer"));
    } catch (const std::exception& e) {
      report(Error(ErrorCode::kProtocol, std::string("while handling a message from the producer: ") + e.what()));
    }
  }

  // A transfer the producer answered but never finishes (its lease lapsed, a sender hung) is
  // given up, so the consumer asks for the newest version again instead of waiting for ever.
  void check_transfer_deadline() {
    if (!fetch_ || !fetch_->replied || Clock::now() - fetch_->replied_at <= options_.transfer_timeout) return;
    auto manifest = fetch_->manifest;
    auto fetch_id = fetch_->fetch_id;
    abort_fetch("no transfer progress within " + std::to_string(options_.transfer_timeout.count()) + " ms", true);
    send_ack(manifest, fetch_id, false, "transfer timed out");
  }

  std::chrono::milliseconds tick() const {
    return std::clamp(options_.producer_timeout / 8, std::chrono::milliseconds(10), ping_interval() / 2);
  }

  // The producer drops consumers silent for 5 s or more: ping well inside that.
  static constexpr std::chrono::milliseconds ping_interval() { return std::chrono::milliseconds(1000); }

  // After the producer died or restarted: a fresh UCX worker. On one host endpoints run without
  // peer-failure handling (UCX offers shared memory only so), and a peer that dies there leaves
  // the worker in an undefined state (seen: a UCX assertion when the next producer's data came
  // in). Buffers that views or unfinished receives still hold keep the old transport alive.
  void renew_transport() {
    for (auto& buffer : pool_) retired_.push_back(buffer);
    pool_.clear();
    std::erase_if(retired_, [](const auto& weak) { return weak.expired(); });
    transport_ = transport::make_ucx_transport();
  }

  // (Re)creates the DEALER so nothing queued for a dead producer is replayed, then asks to join.
  void start_join() {
    monitor_.reset();
    dealer_ = std::make_unique<zmq::socket_t>(zmq_context_, zmq::socket_type::dealer);
    dealer_->set(zmq::sockopt::linger, 0);
    dealer_->set(zmq::sockopt::maxmsgsize, static_cast<std::int64_t>(protocol::DecodeLimits{}.max_message_bytes));
    if (pinned_key_) {
      security::make_curve_client(*dealer_, *pinned_key_, own_secret_);
      watch_handshakes();
    }
    dealer_->connect(options_.producer_endpoint);
    protocol::JoinRequest join{options_.model_name, options_.consumer_name, transport_->address(), host_id(),
                               session_};
    zmq_util::send(*dealer_, join);
    joined_ = false;
    join_refused_ = false;
    join_sent_ = Clock::now();
  }

  // A CurveZMQ handshake that fails (the wrong producer on the endpoint, or this consumer's key
  // not admitted) is otherwise silent: ZeroMQ just retries. The monitor makes it an error.
  void watch_handshakes() {
    static std::atomic<std::uint64_t> next_monitor{0};
    std::string address = "inproc://modelcast-handshakes-" + std::to_string(next_monitor++);
    int events = ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                 ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;
    if (zmq_socket_monitor(dealer_->handle(), address.c_str(), events) != 0) return;
    monitor_ = std::make_unique<zmq::socket_t>(zmq_context_, zmq::socket_type::pair);
    monitor_->set(zmq::sockopt::linger, 0);
    monitor_->connect(address);
  }

  void on_monitor_event() {
    while (auto parts = zmq_util::receive(*monitor_)) {
      if (parts->empty() || (*parts)[0].size() < 6) continue;
      std::uint16_t event = 0;
      std::uint32_t value = 0;
      std::memcpy(&event, (*parts)[0].data(), 2);
      std::memcpy(&value, static_cast<const char*>((*parts)[0].data()) + 2, 4);
      {
        std::lock_guard lock(mutex_);
        stats_.failed_handshakes++;
      }
      if (handshake_reported_) continue;
      handshake_reported_ = true;
      std::string why = event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH
                            ? "the producer did not admit this consumer's key (status " + std::to_string(value) + ")"
                            : "the peer is not the producer whose key is pinned, or speaks no CurveZMQ";
      report(Error(ErrorCode::kAuthentication, "handshake with " + options_.producer_endpoint + " failed: " + why));
    }
  }

  void check_producer_alive() {
    auto now = Clock::now();
    if (!joined_) {
      // Unanswered: the producer may not be up yet. Refused: ask again a little later.
      auto wait = join_refused_ ? std::min<Clock::duration>(options_.producer_timeout / 2, ping_interval())
                                : Clock::duration(options_.producer_timeout / 2);
      if (now - join_sent_ > wait) start_join();
      return;
    }
    if (now - last_ping_ > ping_interval()) {
      zmq_util::send(*dealer_, protocol::Ping{incarnation_});
      last_ping_ = now;
    }
    if (now - last_heard_ > options_.producer_timeout && subscriber_) {
      // This thread may just have been busy (allocating a large buffer takes a while): read
      // what the producer said meanwhile before judging it silent.
      while (auto parts = zmq_util::receive(*subscriber_)) on_announce(*parts);
    }
    if (joined_ && now - last_heard_ > options_.producer_timeout) {
      log_->warn("no word from the producer for {} ms; reconnecting", options_.producer_timeout.count());
      abort_fetch("producer lost", true);
      {
        std::lock_guard lock(mutex_);
        stats_.reconnects++;
      }
      renew_transport();
      start_join();
    }
  }

  void bad_message(const std::string& what) {
    log_->warn("dropped a bad control message: {}", what);
    std::lock_guard lock(mutex_);
    stats_.bad_messages++;
  }

  // Announcements are a few dozen bytes; the request channel carries manifests.
  static protocol::DecodeLimits announce_limits() {
    protocol::DecodeLimits limits;
    limits.max_message_bytes = 4096;
    return limits;
  }

  std::optional<protocol::Message> decode(const zmq::message_t& frame, const protocol::DecodeLimits& limits) {
    try {
      return protocol::decode({static_cast<const std::byte*>(frame.data()), frame.size()}, limits);
    } catch (const Error& e) {
      bad_message(e.what());
      return std::nullopt;
    }
  }

  void on_announce(std::vector<zmq::message_t>& parts) {
    if (parts.size() != 2) return bad_message("announcement with " + std::to_string(parts.size()) + " frames");
    auto message = decode(parts[1], announce_limits());
    if (!message) return;
    auto* announce = std::get_if<protocol::Announce>(&*message);
    if (!announce) return bad_message("unexpected message type on the announcement channel");
    if (announce->incarnation != incarnation_) {
      // A restarted producer: its old connection state is gone, so join it afresh.
      log_->info("producer restarted (incarnation {:016x}); joining again", announce->incarnation);
      abort_fetch("producer restarted", true);
      renew_transport();
      start_join();
      return;
    }
    last_heard_ = Clock::now();
    if (announce->version > newest_announced_) {
      newest_announced_ = announce->version;
      std::lock_guard lock(mutex_);
      stats_.last_notify_latency = std::chrono::nanoseconds(realtime_ns() - announce->publish_time_ns);
    }
  }

  void on_reply(std::vector<zmq::message_t>& parts) {
    if (parts.size() != 1) return bad_message("reply with " + std::to_string(parts.size()) + " frames");
    auto message = decode(parts[0], {});
    if (!message) return;
    if (auto* join = std::get_if<protocol::JoinReply>(&*message)) return on_join_reply(*join);
    if (auto* fetch = std::get_if<protocol::FetchReply>(&*message)) return on_fetch_reply(*fetch);
    if (auto* digests = std::get_if<protocol::Digests>(&*message)) return on_digests(*digests);
    bad_message("unexpected message type on the request channel");
  }

  void on_join_reply(const protocol::JoinReply& reply) {
    if (!reply.ok) {
      report(Error(ErrorCode::kState, "producer refused to join: " + reply.error));
      join_refused_ = true;
      return;  // retried by check_producer_alive
    }
    if (reply.transport != transport_->name()) {
      report(Error(ErrorCode::kTransport, "producer speaks transport '" + reply.transport + "', this consumer '" +
                                              transport_->name() + "'"));
      join_refused_ = true;
      return;
    }
    auto endpoint = reachable_endpoint(reply.announce_endpoint, options_.producer_endpoint);
    if (endpoint.rfind("tcp://", 0) != 0 && endpoint.rfind("ipc://", 0) != 0) {
      report(Error(ErrorCode::kProtocol, "producer named an unusable announcement endpoint '" + endpoint + "'"));
      join_refused_ = true;
      return;  // joined_ stays false: the join is tried again
    }
    auto subscriber = std::make_unique<zmq::socket_t>(zmq_context_, zmq::socket_type::sub);
    subscriber->set(zmq::sockopt::linger, 0);
    subscriber->set(zmq::sockopt::maxmsgsize, std::int64_t{4096});
    subscriber->set(zmq::sockopt::subscribe, options_.model_name);
    if (pinned_key_) security::make_curve_client(*subscriber, *pinned_key_, own_secret_);
    try {
      subscriber->connect(endpoint);
    } catch (const zmq::error_t& e) {
      report(Error(ErrorCode::kProtocol, "producer named an unusable announcement endpoint '" + endpoint + "': " +
                                             e.what()));
      join_refused_ = true;
      return;
    }
    subscriber_ = std::move(subscriber);
    if (reply.incarnation != incarnation_) rejected_.clear();  // version numbers restart with a new producer
    incarnation_ = reply.incarnation;
    joined_ = true;
    handshake_reported_ = false;
    last_heard_ = Clock::now();
    newest_announced_ = reply.latest_version;
    log_->info("joined model '{}' at {} (latest version {})", options_.model_name, options_.producer_endpoint,
               reply.latest_version);
  }

  // What we hold: a newer announced version of this incarnation, or any version of a new one.
  bool wants(std::uint64_t version) const {
    if (version == 0) return false;
    if (rejected_.count(version)) return false;
    std::lock_guard lock(mutex_);
    if (!current_ || current_->manifest.incarnation != incarnation_) return true;
    return version > current_->manifest.version;
  }

  std::shared_ptr<detail::ReceiveBuffer> make_buffer(std::span<std::byte> memory, HostBuffer owned) {
    auto buffer = std::make_shared<detail::ReceiveBuffer>();
    buffer->transport = transport_;
    buffer->owned = std::move(owned);
    buffer->memory = buffer->owned.data() ? buffer->owned.span() : memory;
    buffer->region = transport_->register_memory(buffer->memory.data(), buffer->memory.size(), MemoryKind::kHost);
    pool_.push_back(buffer);
    return buffer;
  }

  // Caller memory is registered with one transport at a time: memory still referenced under a
  // retired transport (a view, an unfinished receive) is not handed out again until released.
  bool caller_memory_free(std::span<std::byte> memory) const {
    for (const auto& buffer : pool_) {
      if (buffer->memory.data() == memory.data()) return buffer.use_count() == 1;
    }
    return std::none_of(retired_.begin(), retired_.end(), [&](const auto& weak) {
      auto buffer = weak.lock();
      return buffer && buffer->memory.data() == memory.data();
    });
  }

  // Only this thread hands out references to pool buffers, so a use count of 1 cannot rise.
  std::shared_ptr<detail::ReceiveBuffer> free_buffer(std::size_t bytes) {
    if (!options_.caller_buffers.empty()) {
      for (auto memory : options_.caller_buffers) {
        if (memory.size() < bytes || !caller_memory_free(memory)) continue;
        for (auto& buffer : pool_) {
          if (buffer->memory.data() == memory.data()) return buffer;
        }
        return make_buffer(memory, {});
      }
      return nullptr;
    }
    for (auto& buffer : pool_) {
      if (buffer.use_count() == 1 && buffer->memory.size() >= bytes) return buffer;
    }
    // Drop free buffers too small for this model, then allocate up to the configured count.
    std::erase_if(pool_, [&](const auto& b) { return b.use_count() == 1 && b->memory.size() < bytes; });
    if (pool_.size() >= options_.buffers) return nullptr;
    return make_buffer({}, HostBuffer(std::max<std::size_t>(bytes, 1)));
  }

  // A buffer can take the next version: one no view holds, or room to allocate one.
  bool receive_buffer_available() const {
    if (!options_.caller_buffers.empty()) {
      return std::any_of(options_.caller_buffers.begin(), options_.caller_buffers.end(),
                         [&](auto memory) { return caller_memory_free(memory); });
    }
    if (pool_.size() < options_.buffers) return true;
    return std::any_of(pool_.begin(), pool_.end(), [](const auto& b) { return b.use_count() == 1; });
  }

  void maybe_fetch() {
    auto now = Clock::now();
    if (fetch_ && !fetch_->replied && now - fetch_->requested_at > options_.producer_timeout) {
      log_->warn("no answer to fetch {} in {} ms; asking again", fetch_->fetch_id, options_.producer_timeout.count());
      fetch_.reset();
    }
    if (!joined_ || fetch_ || !wants(newest_announced_)) return;
    // Readers holding every buffer, or a refusal just now: wait for the next tick rather than
    // asking the producer again and again.
    if (now < retry_fetch_after_ || !receive_buffer_available()) return;
    fetch_.emplace();
    fetch_->fetch_id = next_fetch_id_++;
    fetch_->requested_at = now;
    zmq_util::send(*dealer_, protocol::FetchRequest{incarnation_, newest_announced_, fetch_->fetch_id});
  }

  void on_fetch_reply(const protocol::FetchReply& reply) {
    if (!fetch_ || fetch_->replied || reply.fetch_id != fetch_->fetch_id) return;  // a stale reply
    if (!reply.ok) {
      log_->debug("fetch refused: {}", reply.error);
      fetch_.reset();
      retry_fetch_after_ = Clock::now() + tick();
      if (reply.refusal == protocol::Refusal::kNotJoined || reply.refusal == protocol::Refusal::kStaleIncarnation) {
        start_join();
      }
      return;
    }
    const Manifest& manifest = reply.manifest;
    try {
      validate_manifest(manifest, limits_);
      if (manifest.model != options_.model_name) {
        throw Error(ErrorCode::kProtocol, "manifest is for model '" + manifest.model + "'");
      }
      check_chunking(reply.chunk_bytes, manifest.total_bytes);
      check_expected_layout(options_.expected_layout, manifest);
      if (pinned_key_ && !manifest.integrity) {
        throw Error(ErrorCode::kAuthentication, "version " + std::to_string(manifest.version) +
                                                    " carries no digests, so its signature cannot cover its bytes");
      }
      if (pinned_key_ && !reply.digests_pending) check_signature(manifest, reply.signature);
    } catch (const Error& e) {
      reject(manifest, reply.fetch_id, e);
      return;
    }
    std::shared_ptr<detail::ReceiveBuffer> buffer;
    try {
      buffer = free_buffer(manifest.total_bytes);
    } catch (const std::bad_alloc&) {
      reject(manifest, reply.fetch_id, Error(ErrorCode::kResource, "cannot allocate " +
                                                std::to_string(manifest.total_bytes) + " bytes for version " +
                                                std::to_string(manifest.version)));
      return;
    } catch (const Error& e) {
      reject(manifest, reply.fetch_id, e);
      return;
    }
    if (!buffer) {
      std::string why = options_.caller_buffers.empty()
                            ? "every receive buffer is held by a reader; will fetch the newest when one frees"
                            : "no caller buffer of " + std::to_string(manifest.total_bytes) + " bytes is free";
      log_->debug("{}", why);
      send_ack(manifest, reply.fetch_id, false, why);
      fetch_.reset();
      retry_fetch_after_ = Clock::now() + tick();
      return;
    }
    fetch_->replied = true;
    fetch_->replied_at = Clock::now();
    fetch_->manifest = manifest;
    fetch_->buffer = buffer;
    std::size_t chunks = (manifest.total_bytes + reply.chunk_bytes - 1) / reply.chunk_bytes;
    fetch_->pending = chunks;
    fetch_->chunk_bytes = reply.chunk_bytes;
    fetch_->chunk_done.assign(chunks, false);
    fetch_->digests_pending = manifest.integrity && reply.digests_pending;
    fetch_->signature = reply.signature;
    if (manifest.integrity) fetch_->digests.emplace(fetch_->manifest.tensors);
    for (std::size_t i = 0; i < chunks; ++i) {
      std::size_t offset = i * reply.chunk_bytes;
      std::size_t length = std::min<std::size_t>(reply.chunk_bytes, manifest.total_bytes - offset);
      std::uint64_t id = fetch_->fetch_id;
      fetch_->transfers.push_back(buffer->transport->post_recv(
          *buffer->region, offset, length, protocol::chunk_tag(id, i),
          [events = events_, id, i](const transport::TransferResult& r) {
            events->push(ChunkDone{id, i, r.ok, r.error});
          }));
    }
    if (chunks == 0) maybe_finish();
  }

  // Each chunk is one posted receive and one tag: a chunk size that makes many of them costs
  // the consumer memory per declared byte, and more than the tag has room for would collide.
  static void check_chunking(std::uint64_t chunk_bytes, std::uint64_t total_bytes) {
    if (chunk_bytes == 0) throw Error(ErrorCode::kProtocol, "fetch reply with a zero chunk size");
    if (chunk_bytes < std::min(total_bytes, kMinChunkBytes)) {
      throw Error(ErrorCode::kProtocol, "fetch reply with " + std::to_string(chunk_bytes) +
                                            "-byte chunks; at least " + std::to_string(kMinChunkBytes) + " expected");
    }
    if ((total_bytes + chunk_bytes - 1) / chunk_bytes > (std::uint64_t{1} << protocol::kChunkBits)) {
      throw Error(ErrorCode::kProtocol, "fetch reply splits the model into more chunks than a tag can number");
    }
  }

  void on_digests(const protocol::Digests& message) {
    if (!fetch_ || !fetch_->replied || message.fetch_id != fetch_->fetch_id || !fetch_->digests_pending) return;
    if (message.digests.size() != fetch_->manifest.tensors.size()) {
      bad_message("digests for " + std::to_string(message.digests.size()) + " tensors, the manifest has " +
                  std::to_string(fetch_->manifest.tensors.size()));
      return;
    }
    for (std::size_t i = 0; i < message.digests.size(); ++i) fetch_->manifest.tensors[i].digest = message.digests[i];
    fetch_->digests_pending = false;
    fetch_->signature = message.signature;
    maybe_finish();
  }

  // Finishes once every chunk is in and, with integrity on, the producer's digests are known.
  void maybe_finish() {
    if (fetch_->pending > 0) return;
    if (fetch_->failure.empty() && fetch_->digests_pending) return;
    finish_fetch();
  }

  void on_chunk(const ChunkDone& done) {
    if (auto it = draining_.find(done.fetch_id); it != draining_.end()) {
      if (--it->second.pending == 0) draining_.erase(it);  // its buffer may be reused now
      return;
    }
    if (!fetch_ || done.fetch_id != fetch_->fetch_id) return;
    if (!done.ok && fetch_->failure.empty()) fetch_->failure = done.error;
    if (done.ok && fetch_->digests) {
      fetch_->chunk_done[done.chunk] = true;
      while (fetch_->done_prefix < fetch_->chunk_done.size() && fetch_->chunk_done[fetch_->done_prefix]) {
        fetch_->done_prefix++;
      }
      auto prefix = std::min<std::uint64_t>(fetch_->done_prefix * fetch_->chunk_bytes, fetch_->manifest.total_bytes);
      fetch_->digests->advance(fetch_->buffer->memory.data(), prefix);
    }
    --fetch_->pending;
    maybe_finish();
  }

  // Throws Error(kAuthentication) unless the pinned producer signed exactly this manifest.
  void check_signature(const Manifest& manifest, std::span<const std::byte> signature) const {
    if (signature.empty()) {
      throw Error(ErrorCode::kAuthentication, "version " + std::to_string(manifest.version) + " is not signed");
    }
    if (!security::verify_manifest(manifest, signature, *pinned_key_)) {
      throw Error(ErrorCode::kAuthentication, "version " + std::to_string(manifest.version) +
                                                  " does not carry the pinned producer's signature "
                                                  "(tampered in transit, or another producer)");
    }
  }

  // A signed version of an earlier producer run, replayed, must not roll the model back.
  void check_not_a_replay(const Manifest& manifest) const {
    std::lock_guard lock(mutex_);
    if (current_ && current_->manifest.incarnation != manifest.incarnation &&
        manifest.publish_time_ns < current_->manifest.publish_time_ns) {
      throw Error(ErrorCode::kAuthentication, "version " + std::to_string(manifest.version) +
                                                  " was published before the version installed: a replay");
    }
  }

  void finish_fetch() {
    FetchInFlight fetch = std::move(*fetch_);
    fetch_.reset();
    if (!fetch.failure.empty()) {
      log_->warn("transfer of version {} failed: {}", fetch.manifest.version, fetch.failure);
      send_ack(fetch.manifest, fetch.fetch_id, false, fetch.failure);
      std::lock_guard lock(mutex_);
      stats_.transfers_aborted++;
      return;
    }
    if (fetch.manifest.integrity) {
      fetch.digests->advance(fetch.buffer->memory.data(), fetch.manifest.total_bytes);
      const auto& received = fetch.digests->digests();
      for (std::size_t i = 0; i < fetch.manifest.tensors.size(); ++i) {
        const auto& t = fetch.manifest.tensors[i];
        if (received[i] != t.digest) {
          reject(fetch.manifest, fetch.fetch_id,
                 Error(ErrorCode::kIntegrity, "tensor '" + t.spec.name + "' of version " +
                                                  std::to_string(fetch.manifest.version) + " failed its digest check"));
          return;
        }
      }
    }
    if (pinned_key_) {
      try {
        check_signature(fetch.manifest, fetch.signature);
        check_not_a_replay(fetch.manifest);
      } catch (const Error& e) {
        reject(fetch.manifest, fetch.fetch_id, e);
        return;
      }
    }
    auto installed = std::make_shared<detail::InstalledVersion>();
    installed->update_latency = std::chrono::nanoseconds(realtime_ns() - fetch.manifest.publish_time_ns);
    installed->manifest = std::move(fetch.manifest);
    installed->buffer = std::move(fetch.buffer);
    const Manifest& m = installed->manifest;
    {
      std::lock_guard lock(mutex_);
      current_ = installed;
      stats_.current_version = m.version;
      stats_.versions_installed++;
      stats_.bytes_received += m.total_bytes;
      stats_.last_update_latency = installed->update_latency;
    }
    installed_cv_.notify_all();
    send_ack(m, fetch.fetch_id, true, {});
    log_->debug("installed version {} (step {})", m.version, m.step);
    if (options_.on_update) options_.on_update(ModelView(installed));
  }

  void abort_fetch(const std::string& why, bool count) {
    if (!fetch_) return;
    for (auto id : fetch_->transfers) fetch_->buffer->transport->cancel(id);
    log_->warn("discarding the transfer of version {}: {}", fetch_->manifest.version, why);
    // UCX cannot always cancel a receive already matched to a sender, so keep the buffer
    // pinned until every receive has completed; only then may it take another version.
    if (fetch_->pending > 0 && fetch_->replied) draining_.emplace(fetch_->fetch_id, std::move(*fetch_));
    fetch_.reset();
    if (count) {
      std::lock_guard lock(mutex_);
      stats_.transfers_aborted++;
    }
  }

  // Counted and reported before the ack: the ack is what the outside world sees first.
  void reject(const Manifest& manifest, std::uint64_t fetch_id, const Error& error) {
    rejected_.insert(manifest.version);
    fetch_.reset();
    {
      std::lock_guard lock(mutex_);
      stats_.versions_rejected++;
    }
    report(error);
    send_ack(manifest, fetch_id, false, error.what());
  }

  void report(const Error& error) {
    log_->error("{}", error.what());
    {
      std::lock_guard lock(mutex_);
      stats_.last_error = error.what();
    }
    if (options_.on_error) options_.on_error(error);
  }

  void send_ack(const Manifest& manifest, std::uint64_t fetch_id, bool ok, const std::string& error) {
    zmq_util::send(*dealer_, protocol::Ack{incarnation_, manifest.version, fetch_id, ok, error});
  }

  ConsumerOptions options_;
  std::shared_ptr<spdlog::logger> log_;
  std::shared_ptr<transport::Transport> transport_;
  // Shared with transfer completions: views keep the transport (and so late completions of
  // cancelled receives) alive after this Consumer is gone.
  std::shared_ptr<EventQueue<Event>> events_ = std::make_shared<EventQueue<Event>>();

  mutable std::mutex mutex_;
  mutable std::condition_variable installed_cv_;
  std::shared_ptr<const detail::InstalledVersion> current_;  // guarded by mutex_
  ConsumerStats stats_;                                      // guarded by mutex_

  // Service thread only:
  zmq::context_t zmq_context_;
  std::unique_ptr<zmq::socket_t> dealer_;
  std::unique_ptr<zmq::socket_t> subscriber_;
  std::unique_ptr<zmq::socket_t> monitor_;  // handshake failures of dealer_, when CurveZMQ
  bool handshake_reported_ = false;         // once per failing streak, not per retry
  std::optional<security::PublicKey> pinned_key_;  // immutable after construction
  security::SecretKey own_secret_{};               // immutable after construction
  bool joined_ = false;
  bool join_refused_ = false;  // the last join was answered with a refusal or was unusable
  std::uint64_t incarnation_ = 0;
  Clock::time_point join_sent_{};
  Clock::time_point last_heard_{};
  Clock::time_point last_ping_{};
  Clock::time_point retry_fetch_after_{};
  std::uint64_t newest_announced_ = 0;
  std::uint64_t next_fetch_id_ = 1;
  std::set<std::uint64_t> rejected_;
  const std::uint64_t session_ = random_session();
  ManifestLimits limits_;
  std::optional<FetchInFlight> fetch_;
  std::map<std::uint64_t, FetchInFlight> draining_;  // aborted fetches whose receives are still live
  std::vector<std::shared_ptr<detail::ReceiveBuffer>> pool_;    // registered with transport_
  std::vector<std::weak_ptr<detail::ReceiveBuffer>> retired_;  // registered with an older one
  std::thread service_;
};

Consumer::Consumer(ConsumerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
Consumer::~Consumer() = default;
ModelView Consumer::acquire() const { return impl_->acquire(); }
ModelView Consumer::wait_for_version(std::uint64_t version, std::chrono::milliseconds timeout) const {
  return impl_->wait_for_version(version, timeout);
}
ConsumerStats Consumer::stats() const { return impl_->stats(); }

}  // namespace modelcast
