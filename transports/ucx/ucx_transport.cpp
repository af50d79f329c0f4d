#include "transports/ucx/ucx_transport.h"

#include "transports/ucx/address_seal.h"

#include <ucp/api/ucp.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <future>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/digest.h"
#include "common/log.h"
#include "modelcast/error.h"

namespace modelcast::transport {
namespace {

[[noreturn]] void throw_ucx(const std::string& what, ucs_status_t status) {
  throw Error(ErrorCode::kTransport, what + ": " + ucs_status_string(status));
}

class UcxTransport;

class UcxRegion final : public MemoryRegion {
 public:
  UcxRegion(UcxTransport* owner, ucp_mem_h memh, void* base, std::size_t length, MemoryKind kind)
      : owner_(owner), memh_(memh), base_(static_cast<std::byte*>(base)), length_(length), kind_(kind) {}
  ~UcxRegion() override;
  std::byte* base() const override { return base_; }
  std::size_t length() const override { return length_; }
  MemoryKind kind() const override { return kind_; }
  ucp_mem_h memh() const { return memh_; }

 private:
  UcxTransport* owner_;
  ucp_mem_h memh_;
  std::byte* base_;
  std::size_t length_;
  MemoryKind kind_;
};

// Threads: progress_thread_ alone touches worker_, peers_, in_flight_ and closing_. Every public
// method turns into a command queued for it (post() wakes it with ucp_worker_signal, the one
// UCP call documented as safe from any thread). context_ and worker_ are created and destroyed
// by the owning thread while the progress thread is not running.
class UcxTransport final : public Transport {
 public:
  UcxTransport() : log_(log::get("ucx")) {
    ucp_config_t* config = nullptr;
    if (auto s = ucp_config_read(nullptr, nullptr, &config); s != UCS_OK) throw_ucx("ucp_config_read", s);
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
    params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
    params.name = "modelcast";
    auto s = ucp_init(&params, config, &context_);
    ucp_config_release(config);
    if (s != UCS_OK) throw_ucx("ucp_init", s);

    ucp_worker_params_t wparams{};
    wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
    if (s = ucp_worker_create(context_, &wparams, &worker_); s != UCS_OK) {
      ucp_cleanup(context_);
      throw_ucx("ucp_worker_create", s);
    }
    ucp_address_t* address = nullptr;
    std::size_t length = 0;
    if (s = ucp_worker_get_address(worker_, &address, &length); s != UCS_OK) {
      ucp_worker_destroy(worker_);
      ucp_cleanup(context_);
      throw_ucx("ucp_worker_get_address", s);
    }
    address_ = seal_address(reinterpret_cast<const std::byte*>(address), length);
    ucp_worker_release_address(worker_, address);
    progress_thread_ = std::thread([this] { progress_loop(); });
  }

  ~UcxTransport() override {
    stopping_ = true;
    post([] {});
    progress_thread_.join();
    ucp_worker_destroy(worker_);
    ucp_cleanup(context_);
  }

  std::string name() const override { return "ucx"; }

  Capabilities capabilities() const override {
    ucp_context_attr_t attr{};
    attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
    ucp_context_query(context_, &attr);
    Capabilities caps;
    caps.host_memory = true;
    caps.cuda_memory = (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
    caps.remote = true;
    return caps;
  }

  std::unique_ptr<MemoryRegion> register_memory(void* base, std::size_t length, MemoryKind kind) override {
    if (kind == MemoryKind::kCuda && !capabilities().cuda_memory) {
      throw Error(ErrorCode::kTransport, "this UCX build cannot register CUDA memory");
    }
    ucp_mem_h memh = run([&] {
      ucp_mem_map_params_t mp{};
      mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                      UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
      mp.address = base;
      mp.length = length;
      mp.memory_type = kind == MemoryKind::kCuda ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST;
      ucp_mem_h handle = nullptr;
      if (auto s = ucp_mem_map(context_, &mp, &handle); s != UCS_OK) {
        throw_ucx("registering " + std::to_string(length) + " bytes", s);
      }
      return handle;
    });
    return std::make_unique<UcxRegion>(this, memh, base, length, kind);
  }

  void unmap(ucp_mem_h memh) {
    run([&] { ucp_mem_unmap(context_, memh); });
  }

  std::vector<std::byte> address() const override { return address_; }

  PeerId connect(std::span<const std::byte> peer_address, bool detect_failure, PeerFailure on_failure) override {
    PeerId id = next_id_++;
    auto body = unseal_address(peer_address);
    check_address_format(body, std::span<const std::byte>(address_).subspan(kAddressHeader));
    std::vector<std::byte> copy(body.begin(), body.end());
    run([&] {
      auto context = std::make_unique<ErrorContext>(ErrorContext{this, id});
      ucp_ep_params_t ep{};
      ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
      ep.address = reinterpret_cast<const ucp_address_t*>(copy.data());
      // UCX 1.13 offers no shared-memory transport in PEER mode; callers on one host pass false.
      ep.err_mode = detect_failure ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
      ep.err_handler.cb = &UcxTransport::on_peer_error;
      ep.err_handler.arg = context.get();
      ucp_ep_h handle = nullptr;
      if (auto s = ucp_ep_create(worker_, &ep, &handle); s != UCS_OK) throw_ucx("connecting to peer", s);
      if (log_->should_log(spdlog::level::debug)) ucp_ep_print_info(handle, stderr);
      peers_.emplace(id, Peer{handle, std::move(on_failure), std::move(context)});
    });
    return id;
  }

  void disconnect(PeerId peer) override {
    post([this, peer] { close_peer(peer); });
  }

  TransferId post_send(PeerId peer, const MemoryRegion& region, std::size_t offset, std::size_t length,
                       std::uint64_t tag, Completion done) override {
    TransferId id = next_id_++;
    auto memh = static_cast<const UcxRegion&>(region).memh();
    std::byte* buffer = region.base() + offset;
    post([=, this, done = std::move(done)]() mutable {
      auto it = peers_.find(peer);
      if (it == peers_.end()) {
        done({false, "peer " + std::to_string(peer) + " is not connected"});
        return;
      }
      auto param = make_param(id, memh);
      param.cb.send = &UcxTransport::on_send_done;
      track(id, peer, std::move(done),
            ucp_tag_send_nbx(it->second.ep, buffer, length, tag, &param), param.user_data);
    });
    return id;
  }

  TransferId post_recv(const MemoryRegion& region, std::size_t offset, std::size_t length,
                       std::uint64_t tag, Completion done) override {
    TransferId id = next_id_++;
    auto memh = static_cast<const UcxRegion&>(region).memh();
    std::byte* buffer = region.base() + offset;
    post([=, this, done = std::move(done)]() mutable {
      auto param = make_param(id, memh);
      param.cb.recv = &UcxTransport::on_recv_done;
      track(id, 0, std::move(done),
            ucp_tag_recv_nbx(worker_, buffer, length, tag, ~ucp_tag_t{0}, &param), param.user_data);
    });
    return id;
  }

  void cancel(TransferId transfer) override {
    post([this, transfer] {
      if (auto it = in_flight_.find(transfer); it != in_flight_.end()) {
        ucp_request_cancel(worker_, it->second.request);
      }
    });
  }

 private:
  struct ErrorContext {
    UcxTransport* self;
    PeerId peer;
  };
  struct Peer {
    ucp_ep_h ep;
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
  };

  ucp_request_param_t make_param(TransferId id, ucp_mem_h memh) {
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_MEMH;
    param.user_data = new CallbackContext{this, id};
    param.memh = memh;
    return param;
  }

  void track(TransferId id, PeerId peer, Completion done, ucs_status_ptr_t request, void* user_data) {
    std::unique_ptr<CallbackContext> context(static_cast<CallbackContext*>(user_data));
    if (request == nullptr) {
      done({true, {}});
    } else if (UCS_PTR_IS_ERR(request)) {
      done({false, ucs_status_string(UCS_PTR_STATUS(request))});
    } else {
      in_flight_.emplace(id, InFlight{request, peer, std::move(done), std::move(context)});
    }
  }

  void complete(TransferId id, void* request, ucs_status_t status) {
    auto it = in_flight_.find(id);
    if (it == in_flight_.end()) return;
    Completion done = std::move(it->second.done);
    in_flight_.erase(it);
    ucp_request_free(request);
    done(status == UCS_OK ? TransferResult{true, {}} : TransferResult{false, ucs_status_string(status)});
  }

  static void on_send_done(void* request, ucs_status_t status, void* user_data) {
    auto* context = static_cast<CallbackContext*>(user_data);
    context->self->complete(context->id, request, status);
  }

  static void on_recv_done(void* request, ucs_status_t status, const ucp_tag_recv_info_t*, void* user_data) {
    auto* context = static_cast<CallbackContext*>(user_data);
    context->self->complete(context->id, request, status);
  }

  static void on_peer_error(void* arg, ucp_ep_h, ucs_status_t status) {
    auto* context = static_cast<ErrorContext*>(arg);
    auto* self = context->self;
    PeerId peer = context->peer;
    self->log_->warn("peer {} failed: {}", peer, ucs_status_string(status));
    // UCX forbids closing the endpoint inside its own error callback: do it on the next round.
    std::string error = ucs_status_string(status);
    self->post([self, peer, error] {
      auto it = self->peers_.find(peer);
      if (it == self->peers_.end()) return;
      PeerFailure on_failure = it->second.on_failure;
      self->close_peer(peer);
      if (on_failure) on_failure(peer, error);
    });
  }

  // Progress thread. Force-closes the endpoint: sends in flight to it complete with an error.
  void close_peer(PeerId peer) {
    auto it = peers_.find(peer);
    if (it == peers_.end()) return;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    void* request = ucp_ep_close_nbx(it->second.ep, &param);
    if (request != nullptr && !UCS_PTR_IS_ERR(request)) closing_.push_back(request);
    // The error context must outlive the endpoint's last callback: keep it until shutdown.
    retired_contexts_.push_back(std::move(it->second.error_context));
    peers_.erase(it);
  }

  void post(std::function<void()> command) {
    {
      std::lock_guard lock(commands_mutex_);
      commands_.push_back(std::move(command));
    }
    ucp_worker_signal(worker_);
  }

  // Runs `f` on the progress thread and waits for its result (or exception).
  template <typename F>
  auto run(F&& f) -> decltype(f()) {
    if (std::this_thread::get_id() == progress_thread_.get_id()) return f();
    using R = decltype(f());
    std::packaged_task<R()> task(std::forward<F>(f));
    auto result = task.get_future();
    post([&task] { task(); });
    return result.get();
  }

  void reap_closing() {
    std::erase_if(closing_, [](void* request) {
      if (ucp_request_check_status(request) == UCS_INPROGRESS) return false;
      ucp_request_free(request);
      return true;
    });
  }

  void progress_loop() {
    // Spin this many idle rounds before sleeping: keeps notification latency in microseconds
    // while a transfer is active without burning a core when nothing happens.
    constexpr int kIdleSpins = 2000;
    int idle = 0;
    for (;;) {
      std::vector<std::function<void()>> commands;
      {
        std::lock_guard lock(commands_mutex_);
        commands.swap(commands_);
      }
      for (auto& command : commands) command();
      if (stopping_) break;
      unsigned progressed = ucp_worker_progress(worker_);
      reap_closing();
      if (progressed != 0 || !commands.empty()) {
        idle = 0;
        continue;
      }
      if (++idle < kIdleSpins) continue;
      idle = 0;
      if (ucp_worker_arm(worker_) == UCS_ERR_BUSY) continue;
      {
        std::lock_guard lock(commands_mutex_);
        if (!commands_.empty()) continue;  // queued before arm consumed its signal
      }
      ucp_worker_wait(worker_);
    }
    shutdown_in_progress_thread();
  }

  void shutdown_in_progress_thread() {
    // Collect first: a cancel may complete synchronously and erase from in_flight_.
    std::vector<void*> requests;
    for (auto& [id, transfer] : in_flight_) requests.push_back(transfer.request);
    for (void* request : requests) ucp_request_cancel(worker_, request);
    std::vector<PeerId> peers;
    for (auto& [id, peer] : peers_) peers.push_back(id);
    for (auto id : peers) close_peer(id);
    // Bounded: cancellation and forced close complete locally, without the peer.
    for (int i = 0; i < 100000 && (!in_flight_.empty() || !closing_.empty()); ++i) {
      ucp_worker_progress(worker_);
      reap_closing();
    }
    if (!in_flight_.empty() || !closing_.empty()) {
      log_->warn("{} transfers and {} closes still pending at shutdown", in_flight_.size(), closing_.size());
    }
  }

  std::shared_ptr<spdlog::logger> log_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  std::vector<std::byte> address_;
  std::atomic<bool> stopping_{false};
  std::atomic<std::uint64_t> next_id_{1};
  std::mutex commands_mutex_;
  std::vector<std::function<void()>> commands_;
  std::thread progress_thread_;
  // Progress thread only:
  std::unordered_map<PeerId, Peer> peers_;
  std::unordered_map<TransferId, InFlight> in_flight_;
  std::vector<void*> closing_;
  std::vector<std::unique_ptr<ErrorContext>> retired_contexts_;
};

UcxRegion::~UcxRegion() { owner_->unmap(memh_); }

}  // namespace

std::unique_ptr<Transport> make_ucx_transport() { return std::make_unique<UcxTransport>(); }

}  // namespace modelcast::transport
