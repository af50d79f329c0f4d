#include "ucx_ceiling.h"

#include <poll.h>
#include <unistd.h>

#include <ucp/api/ucp.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <functional>
#include <stdexcept>
#include <sstream>
#include <string>

#include "common.h"
#include "transports/ucx/ucx_worker.h"

namespace bench {
namespace {

[[noreturn]] void fail(const std::string& what, ucs_status_t status) {
  throw std::runtime_error(what + ": " + ucs_status_string(status));
}

// The very context and worker modelcast's UCX transport uses (UcxWorker, same features, thread
// mode for the running UCX and, for a receiver, indirect endpoint ids), progressed by this program's own thread
// instead of UcxWorker's (never started).
class Ucp {
 public:
  explicit Ucp(bool receiver)
      : worker_(UCP_FEATURE_TAG | UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP, receiver,
                modelcast::transport::running_ucx_quirks()) {}
  ~Ucp() {
    for (auto* memh : maps_) ucp_mem_unmap(worker_.context(), memh);
  }
  Ucp(const Ucp&) = delete;
  Ucp& operator=(const Ucp&) = delete;

  ucp_worker_h worker() const { return worker_.worker(); }

  ucp_mem_h map(void* base, std::size_t length) {
    ucp_mem_map_params_t mp{};
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                    UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
    mp.address = base;
    mp.length = length;
    mp.memory_type = UCS_MEMORY_TYPE_HOST;
    ucp_mem_h memh = nullptr;
    if (auto s = ucp_mem_map(worker_.context(), &mp, &memh); s != UCS_OK) fail("ucp_mem_map", s);
    maps_.push_back(memh);
    return memh;
  }

  std::string address_hex() {
    ucp_address_t* address = nullptr;
    std::size_t length = 0;
    if (auto s = ucp_worker_get_address(worker_.worker(), &address, &length); s != UCS_OK) fail("ucp_worker_get_address", s);
    static const char* digits = "0123456789abcdef";
    std::string hex;
    const auto* bytes = reinterpret_cast<const unsigned char*>(address);
    for (std::size_t i = 0; i < length; ++i) {
      hex.push_back(digits[bytes[i] >> 4]);
      hex.push_back(digits[bytes[i] & 15]);
    }
    ucp_worker_release_address(worker_.worker(), address);
    return hex;
  }

  // Progresses until done() holds (checked when a round made no progress). Like modelcast's
  // progress thread: spins while there is work, sleeps on the worker's wake-up fd (and `fds`)
  // after `idle_spins` idle rounds.
  void progress_until(const std::function<bool()>& done, const std::vector<int>& fds, long timeout_ms,
                      int idle_spins = 2000) {
    auto deadline = steady_ns() + timeout_ms * 1000000;
    int idle = 0;
    for (;;) {
      if (ucp_worker_progress(worker_.worker()) != 0) {
        idle = 0;
        continue;
      }
      if (done()) break;
      if (++idle < idle_spins) continue;
      idle = 0;
      if (steady_ns() > deadline) throw std::runtime_error("UCX ceiling: timed out waiting for transfers");
      if (efd_ < 0) {
        if (auto s = ucp_worker_get_efd(worker_.worker(), &efd_); s != UCS_OK) fail("ucp_worker_get_efd", s);
      }
      if (ucp_worker_arm(worker_.worker()) == UCS_ERR_BUSY) continue;
      std::vector<pollfd> watch{{efd_, POLLIN, 0}};
      for (int fd : fds) watch.push_back({fd, POLLIN, 0});
      poll(watch.data(), watch.size(), 100);
    }
  }

 private:
  modelcast::transport::UcxWorker worker_;
  int efd_ = -1;
  std::vector<ucp_mem_h> maps_;
};

struct Outstanding {
  std::size_t count = 0;
  bool error = false;
  std::string what;
};

void on_send(void* request, ucs_status_t status, void* user_data) {
  auto* o = static_cast<Outstanding*>(user_data);
  if (status != UCS_OK) {
    o->error = true;
    o->what = ucs_status_string(status);
  }
  o->count--;
  ucp_request_free(request);
}

void on_recv(void* request, ucs_status_t status, const ucp_tag_recv_info_t*, void* user_data) {
  on_send(request, status, user_data);
}

void track(Outstanding& o, ucs_status_ptr_t request) {
  if (request == nullptr) return;  // completed in place
  if (UCS_PTR_IS_ERR(request)) {
    o.error = true;
    o.what = ucs_status_string(UCS_PTR_STATUS(request));
    return;
  }
  o.count++;
}

std::uint64_t tag_of(int repetition, std::size_t chunk) {
  return (static_cast<std::uint64_t>(repetition) << 32) | chunk;
}

// The rule of modelcast's transports/ucx/ucx_tls.cpp (same host here): UCX_TLS unset, empty, an
// exclusion list, or naming a shared-memory transport.
bool shared_memory_allowed() {
  const char* tls = std::getenv("UCX_TLS");
  if (tls == nullptr || *tls == '\0' || *tls == '^') return true;
  std::stringstream list(tls);
  for (std::string item; std::getline(list, item, ',');) {
    for (const char* shm : {"all", "sm", "shm", "posix", "sysv", "cma", "knem", "xpmem"}) {
      if (item == shm) return true;
    }
  }
  return false;
}

void peer_error(void*, ucp_ep_h, ucs_status_t status) {
  std::fprintf(stderr, "UCX ceiling: peer failed: %s\n", ucs_status_string(status));
}

}  // namespace

// ---- sender ---------------------------------------------------------------------------------

struct UcpSender::Impl {
  Ucp ucp{/*receiver=*/false};
  std::byte* source;
  std::size_t size;
  std::size_t chunk;
  ucp_mem_h memh = nullptr;
  std::vector<ucp_ep_h> eps;
};

UcpSender::UcpSender(std::byte* source, std::size_t size, std::size_t chunk)
    : impl_(std::make_unique<Impl>()) {
  impl_->source = source;
  impl_->size = size;
  impl_->chunk = chunk;
  impl_->memh = impl_->ucp.map(source, size);
}

UcpSender::~UcpSender() {
  for (auto ep : impl_->eps) {
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    void* request = ucp_ep_close_nbx(ep, &param);
    if (request && !UCS_PTR_IS_ERR(request)) {
      for (int i = 0; i < 100000 && ucp_request_check_status(request) == UCS_INPROGRESS; ++i) {
        ucp_worker_progress(impl_->ucp.worker());
      }
      ucp_request_free(request);
    }
  }
}

void UcpSender::connect(const std::string& hex) {
  std::vector<unsigned char> address(hex.size() / 2);
  for (std::size_t i = 0; i < address.size(); ++i) {
    address[i] = static_cast<unsigned char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  }
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                  UCP_EP_PARAM_FIELD_ERR_HANDLER;
  ep.address = reinterpret_cast<const ucp_address_t*>(address.data());
  // As modelcast's producer: peer-failure detection only where shared memory is not allowed.
  ep.err_mode = shared_memory_allowed() ? UCP_ERR_HANDLING_MODE_NONE : UCP_ERR_HANDLING_MODE_PEER;
  ep.err_handler.cb = &peer_error;
  ep.err_handler.arg = nullptr;
  ucp_ep_h handle = nullptr;
  if (auto s = ucp_ep_create(impl_->ucp.worker(), &ep, &handle); s != UCS_OK) fail("ucp_ep_create", s);
  impl_->eps.push_back(handle);
  if (std::getenv("BENCH_UCX_VERBOSE") && impl_->eps.size() == 1) ucp_ep_print_info(handle, stderr);
}

double UcpSender::transfer(int repetition, std::vector<Child>& receivers) {
  if (receivers.size() != impl_->eps.size()) throw std::runtime_error("UCX ceiling: receivers and endpoints differ");
  for (auto& child : receivers) write_line(child.to_child, "ceiling " + std::to_string(repetition));
  for (auto& child : receivers) {
    auto line = read_line(child.from_child, child.pending, 120000);
    if (!line || *line != "ready") throw std::runtime_error("UCX ceiling: a receiver is not ready");
  }
  std::size_t chunks = (impl_->size + impl_->chunk - 1) / impl_->chunk;
  Outstanding sends;
  std::vector<bool> done(receivers.size(), false);
  std::size_t done_count = 0;
  auto t0 = steady_ns();
  std::int64_t t1 = 0;
  for (auto ep : impl_->eps) {  // consumer by consumer, every chunk at once: as modelcast's producer
    for (std::size_t i = 0; i < chunks; ++i) {
      std::size_t offset = i * impl_->chunk;
      std::size_t length = std::min(impl_->chunk, impl_->size - offset);
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_MEMH;
      param.cb.send = &on_send;
      param.user_data = &sends;
      param.memh = impl_->memh;
      track(sends, ucp_tag_send_nbx(ep, impl_->source + offset, length, tag_of(repetition, i), &param));
    }
  }
  auto all_done = [&] {
    for (std::size_t c = 0; c < receivers.size(); ++c) {
      if (done[c]) continue;
      if (auto line = try_read_line(receivers[c].from_child, receivers[c].pending)) {
        if (*line != "done") throw std::runtime_error("UCX ceiling: receiver says '" + *line + "'");
        done[c] = true;
        if (++done_count == receivers.size()) t1 = steady_ns();
      }
    }
    if (sends.error) throw std::runtime_error("UCX ceiling: send failed: " + sends.what);
    return done_count == receivers.size() && sends.count == 0;
  };
  std::vector<int> pipes;
  for (auto& child : receivers) pipes.push_back(child.from_child);
  impl_->ucp.progress_until(all_done, pipes, 300000);
  return static_cast<double>(t1 - t0) / 1e6;
}

// ---- receiver -------------------------------------------------------------------------------

struct UcpReceiver::Impl {
  Ucp ucp{/*receiver=*/true};
  std::size_t chunk;
  std::vector<std::pair<std::byte*, ucp_mem_h>> maps;
};

UcpReceiver::UcpReceiver(std::size_t chunk) : impl_(std::make_unique<Impl>()) { impl_->chunk = chunk; }
UcpReceiver::~UcpReceiver() = default;

void UcpReceiver::map(std::byte* base, std::size_t length) { impl_->maps.emplace_back(base, impl_->ucp.map(base, length)); }

std::string UcpReceiver::address() const { return impl_->ucp.address_hex(); }

void UcpReceiver::wait_for_command(int fd, std::string& pending, std::optional<std::string>& line) {
  // Keeps the worker progressing (wire-up, keepalive) while waiting, but sleeps at once when
  // idle: a spinning receiver between two versions would take CPU from the producer's copy.
  impl_->ucp.progress_until([&] { return (line = try_read_line(fd, pending)).has_value(); }, {fd}, 600L * 1000, 1);
}

void UcpReceiver::receive(int repetition, std::byte* target, std::size_t size, int reply_fd) {
  ucp_mem_h memh = nullptr;
  for (auto& [base, handle] : impl_->maps) {
    if (base == target) memh = handle;
  }
  if (!memh) throw std::runtime_error("UCX ceiling: receive target is not mapped");
  std::size_t chunks = (size + impl_->chunk - 1) / impl_->chunk;
  Outstanding recvs;
  for (std::size_t i = 0; i < chunks; ++i) {
    std::size_t offset = i * impl_->chunk;
    std::size_t length = std::min(impl_->chunk, size - offset);
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_MEMH;
    param.cb.recv = &on_recv;
    param.user_data = &recvs;
    param.memh = memh;
    track(recvs, ucp_tag_recv_nbx(impl_->ucp.worker(), target + offset, length, tag_of(repetition, i), ~ucp_tag_t{0},
                                  &param));
  }
  write_line(reply_fd, "ready");
  impl_->ucp.progress_until([&] { return recvs.count == 0; }, {}, 300000);
  if (recvs.error) {
    write_line(reply_fd, "error " + recvs.what);
    throw std::runtime_error("UCX ceiling: receive failed: " + recvs.what);
  }
  write_line(reply_fd, "done");
}

}  // namespace bench
