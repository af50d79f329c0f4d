#include "transports/ucx/ucx_transport.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/log.h"
#include "modelcast/error.h"
#include "transports/ucx/address_layout.h"
#include "transports/ucx/address_seal.h"
#include "transports/ucx/ucx_memory.h"
#include "transports/ucx/ucx_quirks.h"
#include "transports/ucx/ucx_tls.h"
#include "transports/ucx/ucx_worker.h"

namespace modelcast::transport {
namespace {

// Threads: the worker's progress thread alone touches peers_, deferred_, in_flight_ and closing_; every
// public method becomes a command queued for it (UcxWorker::post/run).
class UcxTransport final : public Transport {
 public:
  explicit UcxTransport(UcxOptions options)
      : log_(log::get("ucx")),
        options_(options),
        quirks_(running_ucx_quirks()),
        worker_(UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP | (options.one_sided ? UCP_FEATURE_RMA : 0),
                options.indirect_endpoint_ids, quirks_) {
    ucp_address_t* address = nullptr;
    std::size_t length = 0;
    if (auto s = ucp_worker_get_address(worker_.worker(), &address, &length); s != UCS_OK) {
      throw_ucx("ucp_worker_get_address", s);
    }
    address_ = seal_address(reinterpret_cast<const std::byte*>(address), length);
    ucp_worker_release_address(worker_.worker(), address);
    // Peers' addresses are checked against ours (address_layout.h). An own address we cannot
    // read (UCX_UNIFIED_MODE, or a format newer than we know) leaves us unable to check theirs:
    // connect() then refuses, saying so, rather than hand UCX an unchecked address.
    try {
      own_layout_ = read_address_layout(std::span<const std::byte>(address_).subspan(kAddressHeader));
    } catch (const Error& e) {
      own_layout_error_ = e.what();
    }
    worker_.start({[this] {
                     close_deferred();
                     reap_closing();
                   },
                   [this] { shutdown_in_progress_thread(); },
                   [this] { return next_deferred_deadline(); }},
                  options_.idle_spin);
  }

  ~UcxTransport() override { worker_.destroy(); }

  std::string name() const override { return "ucx"; }

  Capabilities capabilities() const override {
    ucp_context_attr_t attr{};
    attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
    ucp_context_query(worker_.context(), &attr);
    Capabilities caps;
    caps.pairs = {{MemoryKind::kHost, MemoryKind::kHost}};
    if ((attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0) {
      caps.pairs.push_back({MemoryKind::kHost, MemoryKind::kCuda});
      caps.pairs.push_back({MemoryKind::kCuda, MemoryKind::kHost});
      caps.pairs.push_back({MemoryKind::kCuda, MemoryKind::kCuda});
    }
    caps.reach = Reach::kNetwork;
    caps.two_sided = true;
    caps.one_sided = options_.one_sided;
    return caps;
  }

  std::unique_ptr<MemoryRegion> register_memory(void* base, std::size_t length, MemoryLocation location) override {
    if (!capabilities().handles(location.kind)) {
      throw Error(ErrorCode::kTransport, "this UCX build cannot register " +
                                             std::string(memory_kind_name(location.kind)) + " memory");
    }
    return map_region(worker_, base, length, location, [this](ucp_mem_h memh) { quiesce(memh); });
  }

  std::vector<std::byte> address() const override { return address_; }

  // Any peer on this machine, this process included: UCX reaches it by shared memory whenever
  // UCX_TLS allows, and (UcxQuirks::peer_mode_lacks_shared_memory) only to an endpoint without
  // peer-failure handling.
  bool detects_failure_at(Reach distance) const override {
    return distance == Reach::kNetwork || !quirks_.peer_mode_lacks_shared_memory || !ucx_shared_memory_allowed();
  }

  PeerId connect(std::span<const std::byte> peer_address, bool detect_failure, PeerFailure on_failure) override {
    PeerId id = next_id_++;
    auto body = unseal_address(peer_address);
    if (!own_layout_) {
      throw Error(ErrorCode::kTransport, "cannot check peers' UCX addresses: this UCX's own address is not in a "
                                         "format modelcast reads (UCX_UNIFIED_MODE is not supported): " +
                                             own_layout_error_);
    }
    check_peer_address(body, *own_layout_, quirks_);
    std::vector<std::byte> copy(body.begin(), body.end());
    worker_.run([&] {
      auto context = std::make_unique<ErrorContext>(ErrorContext{this, id});
      ucp_ep_params_t ep{};
      ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
      ep.address = reinterpret_cast<const ucp_address_t*>(copy.data());
      // Callers ask detects_failure_at() first: PEER mode may cost a near peer its shared memory.
      ep.err_mode = detect_failure ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
      ep.err_handler.cb = &UcxTransport::on_peer_error;
      ep.err_handler.arg = context.get();
      ucp_ep_h handle = nullptr;
      if (auto s = ucp_ep_create(worker_.worker(), &ep, &handle); s != UCS_OK) throw_ucx("connecting to peer", s);
      if (log_->should_log(spdlog::level::debug)) log_debug_endpoint(handle);
      peers_.emplace(id, Peer{handle, detect_failure, std::move(on_failure), std::move(context)});
    });
    return id;
  }

  // A peer that is to take no more from us (a consumer cut off, or leaving). Where UcxQuirks says
  // forcing a busy TCP endpoint may crash, one with sends under way (and peer-failure handling:
  // UCX closes no other by force, see close_peer) is closed once they have
  // ended, or by force after UcxOptions::busy_close_grace: a slow consumer over TCP cut off mid-chunk had its
  // endpoint closed by force at once, and the producer died in UCX's TCP progress a few cut-offs
  // later (3 runs in 4 at 10 Mbit/s), while the consumer's receive of that chunk never ended (a
  // halted UCX worker each time). A peer that takes nothing (it posted no receive) is closed by
  // force after the grace, as before at once.
  void disconnect(PeerId peer) override {
    worker_.post([this, peer] {
      auto it = peers_.find(peer);
      if (it == peers_.end()) return;
      if (quirks_.forced_close_of_busy_tcp_endpoint_may_assert && it->second.detects_failure && sending_to(peer)) {
        log_->debug("peer {} disconnected with sends under way: closed once they end, by force in {} ms", peer,
                    options_.busy_close_grace.count());
        deferred_.emplace(peer, Deferred{std::move(it->second), std::chrono::steady_clock::now() + options_.busy_close_grace});
        peers_.erase(it);
        return;
      }
      close_peer(peer);
    });
  }

  TransferId post_send(PeerId peer, const MemoryRegion& region, std::size_t offset, std::size_t length,
                       std::uint64_t tag, Completion done) override {
    check_range("send", offset, length, region.length());
    TransferId id = next_id_++;
    auto memh = static_cast<const UcxRegion&>(region).memh();
    std::byte* buffer = region.base() + offset;
    worker_.post([=, this, done = std::move(done)]() mutable {
      if (worker_.halted()) return done({false, kHalted});
      auto it = peers_.find(peer);
      if (it == peers_.end()) return done({false, "peer " + std::to_string(peer) + " is not connected"});
      auto param = make_param(id, memh);
      param.cb.send = &UcxTransport::on_send_done;
      track(id, peer, std::move(done), ucp_tag_send_nbx(it->second.ep, buffer, length, tag, &param),
            param.user_data, memh, false);
    });
    return id;
  }

  TransferId post_recv(const MemoryRegion& region, std::size_t offset, std::size_t length,
                       std::uint64_t tag, Completion done) override {
    check_range("receive", offset, length, region.length());
    TransferId id = next_id_++;
    auto memh = static_cast<const UcxRegion&>(region).memh();
    std::byte* buffer = region.base() + offset;
    worker_.post([=, this, done = std::move(done)]() mutable {
      if (worker_.halted()) return done({false, kHalted});
      receive(id, memh, buffer, length, tag, std::move(done), length);
    });
    return id;
  }

  // A receive of nothing: a rendezvous send it matches ends (UCX answers its sender, then ends
  // the receive as truncated), an eager one is dropped. Over shared memory a rendezvous send
  // that no receive matches never ends, not even once its endpoint is closed by force (its
  // sender waits for the receiver's answer); a receiver that refuses a transfer it was sent
  // takes it this way. Tracked like any receive, so that shutdown cancels one nothing matched.
  void discard(std::uint64_t tag) override {
    TransferId id = next_id_++;
    worker_.post([=, this] {
      if (worker_.halted()) return;
      auto param = make_param(id, nullptr);
      param.op_attr_mask &= ~UCP_OP_ATTR_FIELD_MEMH;  // no memory: nothing lands
      param.cb.recv = &UcxTransport::on_recv_done;
      // Its end is no news to anyone: truncated when it took a message, cancelled at shutdown.
      // Known defect, left: a message that arrived already ends inside the call, before track()
      // files the request, which then stays filed until shutdown (a request per refused chunk).
      // Filing it first (as receive() does) made shutdown's progress loop end sooner, and the
      // chunks a stopping consumer takes there arrived too late to be taken: the producer's
      // publish() then gave up on their sends (a stop in eight under load). The fix needs the
      // shutdown to take late chunks on purpose.
      track(id, 0, [](const TransferResult&) {},
            ucp_tag_recv_nbx(worker_.worker(), nullptr, 0, tag, ~ucp_tag_t{0}, &param), param.user_data, nullptr,
            true);
    });
  }

  std::vector<std::byte> export_region(const MemoryRegion& region) override {
    require_one_sided();
    return worker_.run([&] { return pack_region(worker_.context(), static_cast<const UcxRegion&>(region)); });
  }

  std::unique_ptr<RemoteRegion> import_region(PeerId peer, std::span<const std::byte> descriptor) override {
    require_one_sided();
    auto exported = unpack_region(descriptor);
    ucp_rkey_h rkey = worker_.run([&] {
      auto it = peers_.find(peer);
      if (it == peers_.end()) throw Error(ErrorCode::kTransport, "peer " + std::to_string(peer) + " is not connected");
      ucp_rkey_h handle = nullptr;
      if (auto s = ucp_ep_rkey_unpack(it->second.ep, exported.packed_key.data(), &handle); s != UCS_OK) {
        throw_ucx("unpacking a peer's remote key", s);
      }
      return handle;
    });
    return std::make_unique<UcxRemoteRegion>(worker_, peer, rkey, exported.address, exported.length);
  }

  TransferId post_read(const RemoteRegion& source, std::size_t source_offset, const MemoryRegion& destination,
                       std::size_t destination_offset, std::size_t length, Completion done) override {
    check_range("read source", source_offset, length, source.length());
    check_range("read destination", destination_offset, length, destination.length());
    TransferId id = next_id_++;
    const auto& remote = static_cast<const UcxRemoteRegion&>(source);
    auto memh = static_cast<const UcxRegion&>(destination).memh();
    std::byte* buffer = destination.base() + destination_offset;
    PeerId peer = remote.peer();
    ucp_rkey_h rkey = remote.rkey();
    std::uint64_t address = remote.address() + source_offset;
    worker_.post([=, this, done = std::move(done)]() mutable {
      if (worker_.halted()) return done({false, kHalted});
      auto it = peers_.find(peer);
      if (it == peers_.end()) return done({false, "peer " + std::to_string(peer) + " is not connected"});
      auto param = make_param(id, memh);
      param.cb.send = &UcxTransport::on_send_done;
      track(id, peer, std::move(done), ucp_get_nbx(it->second.ep, buffer, length, address, rkey, &param),
            param.user_data, memh, true);
    });
    return id;
  }

  void cancel(TransferId transfer) override {
    worker_.post([this, transfer] {
      if (auto it = in_flight_.find(transfer); it != in_flight_.end()) {
        ucp_request_cancel(worker_.worker(), it->second.request);
      }
    });
  }

 private:
  static constexpr const char* kHalted = "UCX transport halted: a transfer could not be stopped before its memory went";

  struct ErrorContext {
    UcxTransport* self;
    PeerId peer;
  };
  struct Peer {
    ucp_ep_h ep = nullptr;
    bool detects_failure = false;  // UCP_ERR_HANDLING_MODE_PEER: the only mode UCX closes by force
    PeerFailure on_failure;
    std::unique_ptr<ErrorContext> error_context;
  };
  struct CallbackContext {
    UcxTransport* self;
    TransferId id;
  };
  struct InFlight {
    void* request;
    PeerId peer;
    Completion done;
    std::unique_ptr<CallbackContext> context;
    ucp_mem_h memh;  // the region the operation reads (a send) or writes (a receive, a read)
    bool writes;
    // When its endpoint was closed (close_peer), if it was: from then on a send ends in moments
    // (a forced close), when its peer takes it (a flush close, for a peer on this host), or
    // never (UcxQuirks::sends_to_dead_near_peer_never_end).
    std::optional<std::chrono::steady_clock::time_point> endpoint_closed_at;
    std::optional<std::size_t> expected;  // a receive into memory: the length its message must have
  };
  // How long after its endpoint's close a send still in flight is taken for one that never ends.
  // A forced close ends a live peer's sends locally, within a few progress rounds (the loop turns
  // again after a close: close_deferred); a flush close
  // (a peer on this host, whose consumer drops what it has not taken when it leaves) ends them as
  // the peer drops them. A second is far beyond either, and short enough that a producer whose
  // consumer died on its host exits at once rather than after release_timeout.
  static constexpr std::chrono::seconds kClosedSendGrace{1};

  // UCX prints an endpoint's lanes only to a FILE: written to memory and logged, so that it goes
  // where the rest of the log does (a C or Fortran caller's handler), not to stderr regardless.
  void log_debug_endpoint(ucp_ep_h handle) {
    char* text = nullptr;
    std::size_t length = 0;
    FILE* memory = open_memstream(&text, &length);
    if (memory == nullptr) return;
    ucp_ep_print_info(handle, memory);
    std::fclose(memory);
    std::string info(text, length);
    std::free(text);
    while (!info.empty() && info.back() == '\n') info.pop_back();
    log_->debug("endpoint to a new peer:\n{}", info);
  }

  void require_one_sided() const {
    if (!options_.one_sided) {
      throw Error(ErrorCode::kTransport, "this UCX transport was made without one-sided access (UcxOptions::one_sided)");
    }
  }

  ucp_request_param_t make_param(TransferId id, ucp_mem_h memh) {
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_MEMH;
    param.user_data = new CallbackContext{this, id};
    param.memh = memh;
    return param;
  }

  // Progress thread: posts a tagged receive of `length` bytes into `buffer` (registered as `memh`)
  // and tracks it; `expected`, the length its message must have.
  // UCX ends a receive matched by a shorter message as a success: the length that arrived is
  // checked in complete() (a longer one UCX itself fails as truncated). Only the callback says it
  // on UCX 1.13 (an immediate completion leaves recv_info unset), so it always runs, maybe within
  // ucp_tag_recv_nbx (an arrived message; a rendezvous one truncated): the entry is made first.
  void receive(TransferId id, ucp_mem_h memh, std::byte* buffer, std::size_t length, std::uint64_t tag,
               Completion done, std::optional<std::size_t> expected) {
    auto param = make_param(id, memh);
    param.cb.recv = &UcxTransport::on_recv_done;
    param.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    in_flight_.emplace(id, InFlight{nullptr, 0, std::move(done),
                                    std::unique_ptr<CallbackContext>(static_cast<CallbackContext*>(param.user_data)),
                                    memh, true, std::nullopt, expected});
    auto request = ucp_tag_recv_nbx(worker_.worker(), buffer, length, tag, ~ucp_tag_t{0}, &param);
    auto it = in_flight_.find(id);
    if (it == in_flight_.end()) return;  // ended already, in the callback (which freed the request)
    if (UCS_PTR_IS_ERR(request)) {
      Completion failed = std::move(it->second.done);
      in_flight_.erase(it);
      return failed({false, ucs_status_string(UCS_PTR_STATUS(request))});
    }
    it->second.request = request;
  }

  void track(TransferId id, PeerId peer, Completion done, ucs_status_ptr_t request, void* user_data, ucp_mem_h memh,
             bool writes) {
    std::unique_ptr<CallbackContext> context(static_cast<CallbackContext*>(user_data));
    if (request == nullptr) {
      done({true, {}});
    } else if (UCS_PTR_IS_ERR(request)) {
      done({false, ucs_status_string(UCS_PTR_STATUS(request))});
    } else {
      in_flight_.emplace(id,
                         InFlight{request, peer, std::move(done), std::move(context), memh, writes, std::nullopt, {}});
    }
  }

  static std::string short_message(std::size_t arrived, std::size_t expected) {
    return "a message of " + std::to_string(arrived) + " bytes arrived for a receive of " + std::to_string(expected);
  }

  // `arrived`: the length of a receive's message, where UCX said it.
  void complete(TransferId id, void* request, ucs_status_t status, std::optional<std::size_t> arrived = std::nullopt) {
    auto it = in_flight_.find(id);
    if (it == in_flight_.end()) return;
    Completion done = std::move(it->second.done);
    const auto expected = it->second.expected;
    in_flight_.erase(it);
    ucp_request_free(request);
    if (status == UCS_OK && expected && arrived && *arrived != *expected) {
      return done({false, short_message(*arrived, *expected)});
    }
    done(status == UCS_OK ? TransferResult{true, {}} : TransferResult{false, ucs_status_string(status)});
  }

  // Sends and reads share this callback type (ucp_send_nbx_callback_t).
  static void on_send_done(void* request, ucs_status_t status, void* user_data) {
    auto* context = static_cast<CallbackContext*>(user_data);
    context->self->complete(context->id, request, status);
  }

  static void on_recv_done(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user_data) {
    auto* context = static_cast<CallbackContext*>(user_data);
    context->self->complete(context->id, request, status,
                            info != nullptr ? std::optional<std::size_t>(info->length) : std::nullopt);
  }

  static void on_peer_error(void* arg, ucp_ep_h, ucs_status_t status) {
    auto* context = static_cast<ErrorContext*>(arg);
    auto* self = context->self;
    PeerId peer = context->peer;
    // Debug: the peer's owner (a producer's consumer, a consumer's producer) says it at its level,
    // naming the peer as the user knows it; UCX's number means nothing to anyone reading the log.
    self->log_->debug("peer {} failed: {}", peer, ucs_status_string(status));
    // UCX forbids closing the endpoint inside its own error callback: do it on the next round.
    std::string error = ucs_status_string(status);
    self->worker_.post([self, peer, error] {
      if (self->deferred_.count(peer)) return self->close_peer(peer);  // no one to tell: it was disconnected
      auto it = self->peers_.find(peer);
      if (it == self->peers_.end()) return;
      PeerFailure on_failure = it->second.on_failure;
      self->close_peer(peer);
      if (on_failure) on_failure(peer, error);
    });
  }

  // Progress thread. Force-closes the endpoint: sends in flight to it complete with an error.
  // UCX force-closes only an endpoint with peer-failure handling; one without (a peer on this
  // host, detects_failure_at) is closed with a flush instead, which ends once its sends have (the
  // forced close was refused and its error dropped, leaving every such endpoint open). Even so,
  // UCX destroys a flushed endpoint whose peer connected back (any rendezvous exchange) only with
  // the worker ("TODO negotiate disconnect" in ucp_ep_disconnected): the peer's shared-memory
  // segments stay mapped here until then (README, "Consumers on the producer's host").
  // A peer disconnect() set aside (deferred_) is closed here too.
  void close_peer(PeerId peer) {
    Peer closed;
    if (auto it = peers_.find(peer); it != peers_.end()) {
      closed = std::move(it->second);
      peers_.erase(it);
    } else if (auto set_aside = deferred_.find(peer); set_aside != deferred_.end()) {
      closed = std::move(set_aside->second.peer);
      deferred_.erase(set_aside);
    } else {
      return;
    }
    const auto now = std::chrono::steady_clock::now();
    for (auto& [id, transfer] : in_flight_) {
      if (transfer.peer == peer && !transfer.endpoint_closed_at) transfer.endpoint_closed_at = now;
    }
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    void* request = ucp_ep_close_nbx(closed.ep, &param);
    if (UCS_PTR_IS_ERR(request) && UCS_PTR_STATUS(request) == UCS_ERR_INVALID_PARAM) {
      param.flags = 0;
      request = ucp_ep_close_nbx(closed.ep, &param);
    }
    if (UCS_PTR_IS_ERR(request)) {
      log_->warn("closing the connection to peer {} failed: {}; its resources stay until this transport closes", peer,
                 ucs_status_string(UCS_PTR_STATUS(request)));
    } else if (request != nullptr) {
      closing_.push_back(request);
    }
    // The error context must outlive the endpoint's last callback: keep it until shutdown.
    retired_contexts_.push_back(std::move(closed.error_context));
  }

  bool sending_to(PeerId peer) const {
    return std::any_of(in_flight_.begin(), in_flight_.end(),
                       [&](const auto& t) { return t.second.peer == peer && !t.second.writes; });
  }

  std::optional<std::chrono::steady_clock::time_point> next_deferred_deadline() const {
    std::optional<std::chrono::steady_clock::time_point> next;
    for (const auto& [peer, set_aside] : deferred_) {
      if (!next || set_aside.deadline < *next) next = set_aside.deadline;
    }
    return next;
  }

  // Progress thread, each turn: closes the set-aside peers whose sends have ended, and those whose
  // grace is over (by force: see disconnect()).
  void close_deferred() {
    if (deferred_.empty()) return;
    const auto now = std::chrono::steady_clock::now();
    std::vector<PeerId> due;
    for (const auto& [peer, set_aside] : deferred_) {
      const bool sending = sending_to(peer);
      if (sending && now < set_aside.deadline) continue;
      if (sending) {
        log_->warn("peer {} did not take its sends within {} ms of its disconnection: its connection is closed by force",
                   peer, options_.busy_close_grace.count());
      }
      due.push_back(peer);
    }
    for (PeerId peer : due) close_peer(peer);
    // A close made here is no progress to the loop, which would go to sleep with the forced
    // close's completions of the sends still to come (at the next keepalive round, 20 s on): a
    // command makes it turn again.
    if (!due.empty()) worker_.post([] {});
  }

  void reap_closing() {
    std::erase_if(closing_, [](void* request) {
      if (ucp_request_check_status(request) == UCS_INPROGRESS) return false;
      ucp_request_free(request);
      return true;
    });
  }

  bool in_use(ucp_mem_h memh) const {
    return std::any_of(in_flight_.begin(), in_flight_.end(), [&](const auto& t) { return t.second.memh == memh; });
  }

  // Whether every operation still using the region is a send that outlived its endpoint's
  // forced close by kClosedSendGrace, counted from `since` at the earliest (the release's start:
  // the progress thread may not have progressed the close before it).
  bool only_sends_that_never_end(ucp_mem_h memh, std::chrono::steady_clock::time_point since,
                                 std::chrono::steady_clock::time_point now) const {
    return std::all_of(in_flight_.begin(), in_flight_.end(), [&](const auto& t) {
      const InFlight& transfer = t.second;
      if (transfer.memh != memh) return true;
      return !transfer.writes && transfer.endpoint_closed_at &&
             now - std::max(*transfer.endpoint_closed_at, since) >= kClosedSendGrace;
    });
  }

  // Progress thread, from ~UcxRegion before ucp_mem_unmap; never from a UCX callback. When it
  // returns, UCX neither reads nor writes the region: its owner may free the memory. Cancel the
  // receives, give the sends half of release_timeout to complete (a live peer takes them in
  // moments), then close by force the endpoints with sends still from the region, and progress
  // until nothing uses it. Closing first is quicker, but where a forced close of a busy TCP
  // endpoint may assert (UcxQuirks) the sends get that head start. Where a matched rendezvous
  // receive ignores the cancel (it keeps landing until its last byte or until its UCX-internal
  // endpoint fails) or a send to a dead near peer never ends (UcxQuirks), that may be never:
  // past release_timeout the worker is halted, never progressed again, so nothing moves; and as
  // soon as all that is left are sends kClosedSendGrace past their endpoint's close, since
  // waiting longer would only delay the same halt (a producer's exit after its consumer died).
  void quiesce(ucp_mem_h memh) {
    // Collected first: a cancel may complete synchronously and erase from in_flight_.
    std::vector<void*> receives;
    for (const auto& [id, transfer] : in_flight_) {
      if (transfer.memh == memh && transfer.writes) receives.push_back(transfer.request);
    }
    if (!in_use(memh)) return;
    for (void* request : receives) ucp_request_cancel(worker_.worker(), request);
    if (worker_.halted()) return;
    const bool may_never_end = quirks_.matched_receive_ignores_cancel || quirks_.sends_to_dead_near_peer_never_end;
    const auto start = std::chrono::steady_clock::now();
    const auto close_at =
        quirks_.forced_close_of_busy_tcp_endpoint_may_assert ? start + options_.release_timeout / 2 : start;
    const auto deadline = start + options_.release_timeout;
    bool closed = false;
    while (in_use(memh)) {
      const auto now = std::chrono::steady_clock::now();
      if (!closed && now >= close_at) {
        std::set<PeerId> receivers;
        for (const auto& [id, transfer] : in_flight_) {
          if (transfer.memh == memh && !transfer.writes) receivers.insert(transfer.peer);
        }
        for (PeerId peer : receivers) close_peer(peer);
        closed = true;
        continue;
      }
      if (may_never_end && now >= deadline) {
        log_->error("transfers still using a region being released after {} ms: halting this UCX worker",
                    options_.release_timeout.count());
        worker_.halt();
        return;
      }
      // Sends to a peer on this host that died, or that closed its worker with them under way (a
      // relay's receiver that left mid-transfer): waiting out release_timeout would change nothing.
      if (quirks_.sends_to_dead_near_peer_never_end && only_sends_that_never_end(memh, start, now)) {
        log_->warn("sends still reading a region being released {} s after their endpoint was closed (a peer on "
                   "this host that died or left mid-transfer): halting this UCX worker",
                   kClosedSendGrace.count());
        worker_.halt();
        return;
      }
      ucp_worker_progress(worker_.worker());
      reap_closing();
    }
  }

  void shutdown_in_progress_thread() {
    // Regions do not outlive their transport, so each has been quiesced by now.
    if (worker_.halted()) return;  // never progressed again; destroy() leaks it
    take_unmatched_messages();
    // Collect first: a cancel may complete synchronously and erase from in_flight_.
    std::vector<void*> requests;
    for (auto& [id, transfer] : in_flight_) requests.push_back(transfer.request);
    for (void* request : requests) ucp_request_cancel(worker_.worker(), request);
    std::vector<PeerId> peers;
    for (auto& [id, peer] : peers_) peers.push_back(id);
    for (auto& [id, set_aside] : deferred_) peers.push_back(id);
    for (auto id : peers) close_peer(id);
    // Bounded: a forced close ends its endpoint's sends locally, without the peer.
    for (int i = 0; i < 100000 && (!in_flight_.empty() || !closing_.empty()); ++i) {
      ucp_worker_progress(worker_.worker());
      reap_closing();
    }
    if (!in_flight_.empty() || !closing_.empty()) {
      log_->warn("{} transfers and {} closes still pending at shutdown", in_flight_.size(), closing_.size());
    }
    // A close still under way (a flush close to a peer on this host that died never ends) is
    // handed back to UCX, which frees it if it ever ends: kept ours, destroying the worker failed
    // UCX's check that every request of an endpoint was released, and the process aborted.
    for (void* request : closing_) ucp_request_free(request);
    closing_.clear();
    flush_before_destroy();
  }

  // Takes and drops, before the endpoints close, every message peers sent here that no receive
  // matched: over shared memory a rendezvous send ends only when a receiver takes it, not when
  // either side closes the connection, so each would hold its sender's memory until the sender
  // gave up on it (a producer's publish() stalled a second whenever a consumer stopped while its
  // fetch's chunks were arriving: receives cancelled, or not yet posted). Taking one answers its
  // sender at once; the receive itself may never end here (UCX 1.13 leaves a truncated
  // rendezvous receive, and one whose sender stopped sending, in progress for good), so it is
  // released rather than waited for. Only what has arrived is taken: a send still on its way is
  // its sender's to give up on.
  void take_unmatched_messages() {
    ucp_worker_progress(worker_.worker());
    std::size_t taken = 0;
    for (; taken < kTakenAtShutdown; ++taken) {
      ucp_tag_recv_info_t info{};
      ucp_tag_message_h message = ucp_tag_probe_nb(worker_.worker(), 0, 0, 1, &info);
      if (message == nullptr) break;
      ucp_request_param_t param{};  // no callback: its end is no news to anyone
      ucs_status_ptr_t request = ucp_tag_msg_recv_nbx(worker_.worker(), nullptr, 0, message, &param);
      if (UCS_PTR_IS_PTR(request)) ucp_request_free(request);
    }
    if (taken > 0) log_->debug("took and dropped {} unmatched messages at shutdown", taken);
  }
  // Bounded: peers may go on sending while this runs, and a shutdown must end.
  static constexpr std::size_t kTakenAtShutdown = 1 << 16;

  // UCX 1.13 asserts in ucp_worker_destroy ("got REP message") when an endpoint UCX made itself
  // for a peer's wireup, which is none of ours to close, still holds its wireup reply: a consumer
  // over TCP stopped while it joined again after the producer closed its connection aborted its
  // process. Flushing the worker sends what is pending; one that does not end within
  // kShutdownFlush (the peer unreachable) leaves the worker halted, which destroy() leaks rather
  // than abort.
  void flush_before_destroy() {
    ucp_request_param_t param{};
    void* request = ucp_worker_flush_nbx(worker_.worker(), &param);
    if (request == nullptr) return;
    if (UCS_PTR_IS_ERR(request)) {
      log_->warn("flushing the UCX worker at shutdown: {}", ucs_status_string(UCS_PTR_STATUS(request)));
      return;
    }
    const auto deadline = std::chrono::steady_clock::now() + kShutdownFlush;
    while (ucp_request_check_status(request) == UCS_INPROGRESS && std::chrono::steady_clock::now() < deadline) {
      ucp_worker_progress(worker_.worker());
    }
    const bool ended = ucp_request_check_status(request) != UCS_INPROGRESS;
    ucp_request_free(request);
    if (!ended && quirks_.destroying_busy_worker_asserts) {
      log_->warn("the UCX worker still had messages pending {} ms into shutdown: leaving it rather than destroy it",
                 std::chrono::duration_cast<std::chrono::milliseconds>(kShutdownFlush).count());
      worker_.halt();
    }
  }
  static constexpr std::chrono::milliseconds kShutdownFlush{1000};

  std::shared_ptr<spdlog::logger> log_;
  const UcxOptions options_;
  const UcxQuirks quirks_;  // before worker_, which is made from it
  UcxWorker worker_;
  std::vector<std::byte> address_;
  std::optional<UcxAddressLayout> own_layout_;  // set once in the constructor
  std::string own_layout_error_;
  std::atomic<std::uint64_t> next_id_{1};
  // Progress thread only:
  std::unordered_map<PeerId, Peer> peers_;
  // Disconnected peers whose sends were still under way: closed once those end (close_deferred).
  struct Deferred {
    Peer peer;
    std::chrono::steady_clock::time_point deadline;  // then closed by force
  };
  std::unordered_map<PeerId, Deferred> deferred_;
  std::unordered_map<TransferId, InFlight> in_flight_;
  std::vector<void*> closing_;
  std::vector<std::unique_ptr<ErrorContext>> retired_contexts_;
};

}  // namespace

std::unique_ptr<Transport> make_ucx_transport(UcxOptions options) {
  return std::make_unique<UcxTransport>(options);
}

}  // namespace modelcast::transport
