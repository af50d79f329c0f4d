// Reproducers for the UCX 1.13 defects modelcast works around, written against plain UCP so that
// they show UCX's behaviour and not ours. Built and run by scripts/ucx-defects/run.sh against
// Debian's UCX and against a newer one (LD_LIBRARY_PATH); never part of CI.
//
// Each check prints one line "check: observation" and exits 0; a UCX assertion aborts the
// process, which run.sh reports as such.
#include <signal.h>
#include <sys/wait.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

void check(ucs_status_t s, const char* what) {
  if (s != UCS_OK) {
    std::fprintf(stderr, "%s: %s\n", what, ucs_status_string(s));
    std::exit(2);
  }
}

struct Node {
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  std::vector<char> address;
  std::vector<ucp_mem_h> memhs;

  explicit Node(bool indirect_ids = false) {
    ucp_config_t* config = nullptr;
    check(ucp_config_read(nullptr, nullptr, &config), "ucp_config_read");
    if (indirect_ids) check(ucp_config_modify(config, "PROTO_INDIRECT_ID", "on"), "PROTO_INDIRECT_ID");
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_TAG;
    check(ucp_init(&params, config, &context), "ucp_init");
    ucp_config_release(config);
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    check(ucp_worker_create(context, &wp, &worker), "ucp_worker_create");
    ucp_address_t* a = nullptr;
    std::size_t n = 0;
    check(ucp_worker_get_address(worker, &a, &n), "ucp_worker_get_address");
    address.assign(reinterpret_cast<char*>(a), reinterpret_cast<char*>(a) + n);
    ucp_worker_release_address(worker, a);
  }

  // Registered up front and passed with every operation, as modelcast does (no registration cache).
  ucp_mem_h map(void* base, std::size_t length) {
    ucp_mem_map_params_t mp{};
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    mp.address = base;
    mp.length = length;
    ucp_mem_h memh = nullptr;
    check(ucp_mem_map(context, &mp, &memh), "ucp_mem_map");
    memhs.push_back(memh);
    return memh;
  }

  // Unmapped before the worker goes, as modelcast's regions are (they never outlive it).
  void destroy() {
    for (ucp_mem_h memh : memhs) ucp_mem_unmap(context, memh);
    memhs.clear();
    ucp_worker_destroy(worker);
    ucp_cleanup(context);
  }

  ucp_ep_h connect(const std::vector<char>& peer, bool peer_mode) {
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep.address = reinterpret_cast<const ucp_address_t*>(peer.data());
    ep.err_mode = peer_mode ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
    if (peer_mode) {
      ep.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
      ep.err_handler.cb = [](void*, ucp_ep_h, ucs_status_t) {};
    }
    ucp_ep_h handle = nullptr;
    check(ucp_ep_create(worker, &ep, &handle), "ucp_ep_create");
    return handle;
  }
};

// The transports UCX chose for an endpoint's lanes, from ucp_ep_print_info.
std::string lanes(ucp_ep_h ep) {
  char* text = nullptr;
  std::size_t size = 0;
  FILE* f = open_memstream(&text, &size);
  ucp_ep_print_info(ep, f);
  std::fclose(f);
  std::string found;
  for (const char* tl : {"posix", "sysv", "cma", "knem", "xpmem", "tcp", "self"}) {
    if (std::strstr(text, (std::string(tl) + "/").c_str()) == nullptr) continue;
    found += std::string(found.empty() ? "" : ",") + tl;
  }
  std::free(text);
  return found.empty() ? "none" : found;
}

struct Op {
  ucs_status_t status = UCS_INPROGRESS;
  bool done = false;
};

ucp_request_param_t param_for(Op* op, bool receive, ucp_mem_h memh) {
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_MEMH;
  p.user_data = op;
  p.memh = memh;
  if (receive) {
    p.cb.recv = [](void*, ucs_status_t s, const ucp_tag_recv_info_t*, void* u) {
      auto* o = static_cast<Op*>(u);
      o->status = s;
      o->done = true;
    };
  } else {
    p.cb.send = [](void*, ucs_status_t s, void* u) {
      auto* o = static_cast<Op*>(u);
      o->status = s;
      o->done = true;
    };
  }
  return p;
}

void settle(void* request, Op& op) {
  if (request == nullptr) {
    op.done = true;
    op.status = UCS_OK;
  } else if (UCS_PTR_IS_ERR(request)) {
    op.done = true;
    op.status = UCS_PTR_STATUS(request);
  }
}

std::string status_of(const Op& op) { return op.done ? ucs_status_string(op.status) : "not completed"; }

// (g) Which transports an endpoint gets in each error mode, between two workers of this process.
int peer_lanes() {
  Node a, b;
  ucp_ep_h none = a.connect(b.address, false);
  ucp_ep_h peer = a.connect(b.address, true);
  std::printf("peer-lanes: NONE mode: %s; PEER mode: %s\n", lanes(none).c_str(), lanes(peer).c_str());
  return 0;
}

// (e) A receive already matched to a rendezvous send is cancelled after its first bytes landed:
// does it end as cancelled, or go on landing to the last byte? With `destroy_matched`, the
// receiving worker is instead destroyed while the receive is matched and unfinished (what a
// halted modelcast worker would do were it not leaked).
int cancel_matched(bool destroy_matched) {
  constexpr std::size_t kSize = 256u << 20;
  Node sender, receiver;
  ucp_ep_h ep = sender.connect(receiver.address, false);
  std::vector<unsigned char> out(kSize, 0xab), in(kSize, 0);
  Op send_op, recv_op;
  auto rp = param_for(&recv_op, true, receiver.map(in.data(), kSize));
  void* recv_req = ucp_tag_recv_nbx(receiver.worker, in.data(), kSize, 7, ~ucp_tag_t{0}, &rp);
  settle(recv_req, recv_op);
  auto sp = param_for(&send_op, false, sender.map(out.data(), kSize));
  void* send_req = ucp_tag_send_nbx(ep, out.data(), kSize, 7, &sp);
  settle(send_req, send_op);
  auto landed = [&] {
    std::size_t n = 0;
    for (std::size_t i = 0; i < kSize; i += 4096) n += in[i] == 0xab;
    return n * 4096;
  };
  // Progress both until the first bytes have landed but not the last.
  auto deadline = Clock::now() + std::chrono::seconds(20);
  while (in[0] != 0xab && !recv_op.done && Clock::now() < deadline) {
    ucp_worker_progress(sender.worker);
    ucp_worker_progress(receiver.worker);
  }
  std::size_t before = landed();
  if (recv_op.done || in[kSize - 1] == 0xab) {
    std::printf("cancel-matched: inconclusive: the receive finished before it could be cancelled (%s)\n",
                status_of(recv_op).c_str());
    return 0;
  }
  if (destroy_matched) {
    std::printf("destroy-matched: destroying a worker with a matched receive (%zu of %zu bytes landed)\n", before,
                kSize);
    std::fflush(stdout);
    receiver.destroy();
    std::printf("destroy-matched: returned\n");
    return 0;
  }
  ucp_request_cancel(receiver.worker, recv_req);
  deadline = Clock::now() + std::chrono::seconds(20);
  while (!recv_op.done && Clock::now() < deadline) {
    ucp_worker_progress(sender.worker);
    ucp_worker_progress(receiver.worker);
  }
  std::size_t after = landed();
  std::printf("cancel-matched: cancelled with %zu MiB of %zu landed; the receive then ended %s with %zu MiB landed\n",
              before >> 20, kSize >> 20, status_of(recv_op).c_str(), after >> 20);
  return 0;
}

// (b), (f) A same-host peer dies with rendezvous sends to it outstanding (it never posted the
// receives): do the sends complete, can they be cancelled, and what does closing the endpoint by
// force do? `indirect` turns PROTO_INDIRECT_ID on for the sender.
int dead_peer(bool peer_mode, bool indirect) {
  int to_parent[2];
  if (pipe(to_parent) != 0) return 2;
  pid_t child = fork();
  if (child == 0) {
    Node peer;
    std::size_t n = peer.address.size();
    if (write(to_parent[1], &n, sizeof n) != sizeof n) _exit(2);
    if (write(to_parent[1], peer.address.data(), n) != static_cast<ssize_t>(n)) _exit(2);
    // Progresses (wire-up, rendezvous requests arrive unexpected) but never receives.
    for (;;) ucp_worker_progress(peer.worker);
  }
  std::size_t n = 0;
  if (read(to_parent[0], &n, sizeof n) != sizeof n) return 2;
  std::vector<char> address(n);
  if (read(to_parent[0], address.data(), n) != static_cast<ssize_t>(n)) return 2;

  Node self(indirect);
  ucp_ep_h ep = self.connect(address, peer_mode);
  constexpr int kSends = 4;
  constexpr std::size_t kSize = 8u << 20;
  std::vector<std::vector<char>> buffers(kSends, std::vector<char>(kSize, 1));
  std::vector<Op> ops(kSends);
  std::vector<void*> requests(kSends);
  for (int i = 0; i < kSends; ++i) {
    auto p = param_for(&ops[i], false, self.map(buffers[i].data(), kSize));
    requests[i] = ucp_tag_send_nbx(ep, buffers[i].data(), kSize, 1, &p);
    settle(requests[i], ops[i]);
  }
  auto progress_for = [&](std::chrono::milliseconds d) {
    for (auto end = Clock::now() + d; Clock::now() < end;) ucp_worker_progress(self.worker);
  };
  auto count_done = [&] {
    int c = 0;
    for (auto& o : ops) c += o.done;
    return c;
  };
  progress_for(std::chrono::milliseconds(300));
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  progress_for(std::chrono::seconds(3));
  int after_death = count_done();
  for (int i = 0; i < kSends; ++i) {
    if (!ops[i].done && requests[i] != nullptr && !UCS_PTR_IS_ERR(requests[i])) {
      ucp_request_cancel(self.worker, requests[i]);
    }
  }
  progress_for(std::chrono::seconds(1));
  int after_cancel = count_done();
  ucp_request_param_t cp{};
  cp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  cp.flags = UCP_EP_CLOSE_FLAG_FORCE;
  std::printf("dead-peer(%s,%s): lanes %s; of %d sends %d completed within 3 s of the death, %d after cancel; "
              "closing by force...\n",
              peer_mode ? "PEER" : "NONE", indirect ? "indirect ids" : "direct ids", lanes(ep).c_str(), kSends,
              after_death, after_cancel);
  std::fflush(stdout);
  void* close = ucp_ep_close_nbx(ep, &cp);
  bool closed = close == nullptr || UCS_PTR_IS_ERR(close);
  for (auto end = Clock::now() + std::chrono::seconds(3); !closed && Clock::now() < end;) {
    ucp_worker_progress(self.worker);
    closed = ucp_request_check_status(close) != UCS_INPROGRESS;
  }
  std::string statuses;
  for (auto& o : ops) statuses += (statuses.empty() ? "" : ", ") + status_of(o);
  std::printf("dead-peer(%s,%s): close %s; sends: %s; destroying the worker...\n", peer_mode ? "PEER" : "NONE",
              indirect ? "indirect ids" : "direct ids", closed ? "finished" : "not finished in 3 s", statuses.c_str());
  std::fflush(stdout);
  if (close != nullptr && !UCS_PTR_IS_ERR(close) && closed) ucp_request_free(close);
  self.destroy();
  std::printf("dead-peer(%s,%s): worker destroyed\n", peer_mode ? "PEER" : "NONE",
              indirect ? "indirect ids" : "direct ids");
  return 0;
}

// A same-host sender dies while its rendezvous send is landing in our receive: does the receive
// end, and does the receiving process survive it? `indirect` turns PROTO_INDIRECT_ID on for the
// receiver.
int dead_sender(bool indirect) {
  constexpr std::size_t kSize = 256u << 20;
  int to_child[2];
  if (pipe(to_child) != 0) return 2;
  pid_t child = fork();
  if (child == 0) {
    std::size_t n = 0;
    if (read(to_child[0], &n, sizeof n) != sizeof n) _exit(2);
    std::vector<char> address(n);
    if (read(to_child[0], address.data(), n) != static_cast<ssize_t>(n)) _exit(2);
    Node sender;
    ucp_ep_h ep = sender.connect(address, false);
    std::vector<unsigned char> out(kSize, 0xab);
    Op op;
    auto p = param_for(&op, false, sender.map(out.data(), kSize));
    settle(ucp_tag_send_nbx(ep, out.data(), kSize, 3, &p), op);
    for (;;) ucp_worker_progress(sender.worker);
  }
  Node self(indirect);
  std::size_t n = self.address.size();
  if (write(to_child[1], &n, sizeof n) != sizeof n) return 2;
  if (write(to_child[1], self.address.data(), n) != static_cast<ssize_t>(n)) return 2;
  std::vector<unsigned char> in(kSize, 0);
  Op op;
  auto p = param_for(&op, true, self.map(in.data(), kSize));
  settle(ucp_tag_recv_nbx(self.worker, in.data(), kSize, 3, ~ucp_tag_t{0}, &p), op);
  auto deadline = Clock::now() + std::chrono::seconds(20);
  while (in[0] != 0xab && !op.done && Clock::now() < deadline) ucp_worker_progress(self.worker);
  bool mid = in[0] == 0xab && in[kSize - 1] != 0xab && !op.done;
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  std::printf("dead-sender(%s): sender killed %s; progressing...\n", indirect ? "indirect ids" : "direct ids",
              mid ? "mid-transfer" : "NOT mid-transfer (inconclusive)");
  std::fflush(stdout);
  for (auto end = Clock::now() + std::chrono::seconds(3); !op.done && Clock::now() < end;) {
    ucp_worker_progress(self.worker);
  }
  std::printf("dead-sender(%s): the receive %s\n", indirect ? "indirect ids" : "direct ids",
              op.done ? ("ended: " + status_of(op)).c_str() : "did not end within 3 s");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  unsigned major = 0, minor = 0, release = 0;
  ucp_get_version(&major, &minor, &release);
  std::string what = argc > 1 ? argv[1] : "";
  if (what == "version") {
    std::printf("version: %u.%u.%u (%s)\n", major, minor, release, ucp_get_version_string());
    return 0;
  }
  if (what == "peer-lanes") return peer_lanes();
  if (what == "cancel-matched") return cancel_matched(false);
  if (what == "destroy-matched") return cancel_matched(true);
  if (what == "dead-sender") return dead_sender(argc > 2 && std::string(argv[2]) == "indirect");
  if (what == "dead-peer") {
    bool peer_mode = argc > 2 && std::string(argv[2]) == "peer";
    bool indirect = argc > 3 && std::string(argv[3]) == "indirect";
    return dead_peer(peer_mode, indirect);
  }
  std::fprintf(stderr,
               "usage: ucx_defects version|peer-lanes|cancel-matched|destroy-matched|dead-sender [direct|indirect]|"
               "dead-peer [none|peer] [direct|indirect]\n");
  return 2;
}
