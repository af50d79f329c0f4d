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

namespace bench {
namespace {

[[noreturn]] void fail(const std::string& what, ucs_status_t status) {
  throw std::runtime_error(what + ": " + ucs_status_string(status));
}

// Same context and worker settings as modelcast's UCX transport.
class Ucp {
 public:
  Ucp() {
    ucp_config_t* config = nullptr;
    if (auto s = ucp_config_read(nullptr, nullptr, &config); s != UCS_OK) fail("ucp_config_read", s);
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
    params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
    params.name = "modelcast-bench";
    auto s = ucp_init(&params, config, &context_);
    ucp_config_release(config);
    if (s != UCS_OK) fail("ucp_init", s);
    ucp_worker_params_t wparams{};
    wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
    if (s = ucp_worker_create(context_, &wparams, &worker_); s != UCS_OK) fail("ucp_worker_create", s);
  }
  ~Ucp() {
    for (auto* memh : maps_) ucp_mem_unmap(context_, memh);
    ucp_worker_destroy(worker_);
    ucp_cleanup(context_);
  }
  Ucp(const Ucp&) = delete;
  Ucp& operator=(const Ucp&) = delete;

  ucp_worker_h worker() const { return worker_; }

  ucp_mem_h map(void* base, std::size_t length) {
    ucp_mem_map_params_t mp{};
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                    UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
    mp.address = base;
    mp.length = length;
    mp.memory_type = UCS_MEMORY_TYPE_HOST;
    ucp_mem_h memh = nullptr;
    if (auto s = ucp_mem_map(context_, &mp, &memh); s != UCS_OK) fail("ucp_mem_map", s);
    maps_.push_back(memh);
    return memh;
  }

  std::string address_hex() const {
    ucp_address_t* address = nullptr;
    std::size_t length = 0;
    if (auto s = ucp_worker_get_address(worker_, &address, &length); s != UCS_OK) fail("ucp_worker_get_address", s);
    static const char* digits = "0123456789abcdef";
    std::string hex;
    const auto* bytes = reinterpret_cast<const unsigned char*>(address);
    for (std::size_t i = 0; i < length; ++i) {
      hex.push_back(digits[bytes[i] >> 4]);
      hex.push_back(digits[bytes[i] & 15]);
    }
    ucp_worker_release_address(worker_, address);
    return hex;
  }

  // Progresses until done() holds. Like modelcast's progress thread: spins while there is work,
  // sleeps on the worker's wake-up fd (and `fds`) after 2000 idle rounds.
  void progress_until(const std::function<bool()>& done, const std::vector<int>& fds, long timeout_ms) {
    constexpr int kIdleSpins = 2000;
    auto deadline = steady_ns() + timeout_ms * 1000000;
    int idle = 0;
    while (!done()) {
      if (ucp_worker_progress(worker_) != 0) {
        idle = 0;
        continue;
      }
      if (++idle < kIdleSpins) continue;
      idle = 0;
      if (steady_ns() > deadline) throw std::runtime_error("UCX ceiling: timed out waiting for transfers");
      if (done()) break;
      if (efd_ < 0) {
        if (auto s = ucp_worker_get_efd(worker_, &efd_); s != UCS_OK) fail("ucp_worker_get_efd", s);
      }
      if (ucp_worker_arm(worker_) == UCS_ERR_BUSY) continue;
      std::vector<pollfd> watch{{efd_, POLLIN, 0}};
      for (int fd : fds) watch.push_back({fd, POLLIN, 0});
      poll(watch.data(), watch.size(), 100);
    }
  }

 private:
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
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
  auto* o = static_cast<Outstanding*>(user_data);
  if (status != UCS_OK) {
    o->error = true;
    o->what = ucs_status_string(status);
  }
  o->count--;
  ucp_request_free(request);
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

// The rule of modelcast's core/host_identity.cpp (same host here): UCX_TLS unset, empty, an
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

std::vector<double> measure_ucx_ceiling(std::size_t size, int receivers, std::size_t chunk, int repetitions) {
  Ucp ucp;
  TouchedBuffer source(size);
  ucp_mem_h memh = ucp.map(source.data(), size);
  std::vector<Child> children;
  std::vector<ucp_ep_h> eps;
  auto cleanup = [&] {
    for (auto ep : eps) {
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      param.flags = UCP_EP_CLOSE_FLAG_FORCE;
      void* request = ucp_ep_close_nbx(ep, &param);
      if (request && !UCS_PTR_IS_ERR(request)) {
        for (int i = 0; i < 100000 && ucp_request_check_status(request) == UCS_INPROGRESS; ++i) {
          ucp_worker_progress(ucp.worker());
        }
        ucp_request_free(request);
      }
    }
    eps.clear();
    for (auto& child : children) {
      if (child.to_child >= 0) {
        try {
          write_line(child.to_child, "quit");
        } catch (...) {
        }
      }
      reap(child);
    }
    children.clear();
  };
  std::vector<double> samples;
  try {
    std::string self = self_exe();
    for (int r = 0; r < receivers; ++r) {
      children.push_back(spawn_child({self, "ucx-recv", "--size", std::to_string(size), "--chunk", std::to_string(chunk)}));
    }
    for (auto& child : children) {
      auto line = read_line(child.from_child, child.pending, 60000);
      if (!line || line->rfind("addr ", 0) != 0) throw std::runtime_error("UCX ceiling: a receiver did not start");
      std::string hex = line->substr(5);
      std::vector<unsigned char> address(hex.size() / 2);
      for (std::size_t i = 0; i < address.size(); ++i) address[i] = static_cast<unsigned char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
      ucp_ep_params_t ep{};
      ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
      ep.address = reinterpret_cast<const ucp_address_t*>(address.data());
      // As modelcast's producer: peer-failure detection only where shared memory is not allowed.
      ep.err_mode = shared_memory_allowed() ? UCP_ERR_HANDLING_MODE_NONE : UCP_ERR_HANDLING_MODE_PEER;
      ep.err_handler.cb = &peer_error;
      ep.err_handler.arg = nullptr;
      ucp_ep_h handle = nullptr;
      if (auto s = ucp_ep_create(ucp.worker(), &ep, &handle); s != UCS_OK) fail("ucp_ep_create", s);
      eps.push_back(handle);
      if (std::getenv("BENCH_UCX_VERBOSE") && eps.size() == 1) ucp_ep_print_info(handle, stderr);
    }
    std::size_t chunks = (size + chunk - 1) / chunk;
    for (int rep = 0; rep < repetitions; ++rep) {
      for (auto& child : children) write_line(child.to_child, "go " + std::to_string(rep));
      for (auto& child : children) {
        auto line = read_line(child.from_child, child.pending, 60000);
        if (!line || *line != "ready") throw std::runtime_error("UCX ceiling: a receiver is not ready");
      }
      Outstanding sends;
      std::vector<bool> done(children.size(), false);
      std::size_t done_count = 0;
      auto t0 = steady_ns();
      std::int64_t t1 = 0;
      for (auto ep : eps) {
        for (std::size_t i = 0; i < chunks; ++i) {
          std::size_t offset = i * chunk;
          std::size_t length = std::min(chunk, size - offset);
          ucp_request_param_t param{};
          param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_MEMH;
          param.cb.send = &on_send;
          param.user_data = &sends;
          param.memh = memh;
          track(sends, ucp_tag_send_nbx(ep, source.data() + offset, length, tag_of(rep, i), &param));
        }
      }
      // Wake-ups come from the worker or a receiver's pipe.
      auto all_done = [&] {
        for (std::size_t c = 0; c < children.size(); ++c) {
          if (done[c]) continue;
          if (auto line = try_read_line(children[c].from_child, children[c].pending)) {
            if (*line != "done") throw std::runtime_error("UCX ceiling: receiver says '" + *line + "'");
            done[c] = true;
            if (++done_count == children.size()) t1 = steady_ns();
          }
        }
        if (sends.error) throw std::runtime_error("UCX ceiling: send failed: " + sends.what);
        return done_count == children.size() && sends.count == 0;
      };
      std::vector<int> pipes;
      for (auto& child : children) pipes.push_back(child.from_child);
      ucp.progress_until(all_done, pipes, 300000);
      samples.push_back(static_cast<double>(t1 - t0) / 1e6);
    }
  } catch (...) {
    cleanup();
    throw;
  }
  cleanup();
  return samples;
}

int run_ucx_receiver(std::size_t size, std::size_t chunk) {
  bool verbose = std::getenv("BENCH_UCX_VERBOSE") != nullptr;
  auto t0 = steady_ns();
  Ucp ucp;
  std::string address = ucp.address_hex();
  auto t1 = steady_ns();
  TouchedBuffer target(size);
  auto t2 = steady_ns();
  ucp_mem_h memh = ucp.map(target.data(), size);
  auto t3 = steady_ns();
  if (verbose) {
    std::fprintf(stderr, "ucx-recv: UCP init %.1f ms, touching %zu bytes %.1f ms, ucp_mem_map %.1f ms\n",
                 static_cast<double>(t1 - t0) / 1e6, size, static_cast<double>(t2 - t1) / 1e6,
                 static_cast<double>(t3 - t2) / 1e6);
  }
  write_line(kParentWriteFd, "addr " + address);
  std::string pending;
  std::size_t chunks = (size + chunk - 1) / chunk;
  for (;;) {
    // Keep the worker progressing (wire-up, keepalive) while waiting for the next command.
    std::optional<std::string> line;
    ucp.progress_until([&] { return (line = try_read_line(kParentReadFd, pending)).has_value(); }, {kParentReadFd},
                       900000);
    if (*line == "quit") break;
    if (line->rfind("go ", 0) != 0) return 2;
    int rep = std::stoi(line->substr(3));
    Outstanding recvs;
    for (std::size_t i = 0; i < chunks; ++i) {
      std::size_t offset = i * chunk;
      std::size_t length = std::min(chunk, size - offset);
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_MEMH;
      param.cb.recv = &on_recv;
      param.user_data = &recvs;
      param.memh = memh;
      track(recvs, ucp_tag_recv_nbx(ucp.worker(), target.data() + offset, length, tag_of(rep, i), ~ucp_tag_t{0}, &param));
    }
    write_line(kParentWriteFd, "ready");
    ucp.progress_until([&] { return recvs.count == 0; }, {}, 300000);
    if (recvs.error) {
      write_line(kParentWriteFd, "error " + recvs.what);
      return 1;
    }
    write_line(kParentWriteFd, "done");
  }
  return 0;
}

}  // namespace bench
