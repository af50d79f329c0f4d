#include "transports/ucx/ucx_worker.h"

#include <poll.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

#include <pthread.h>
#include <unistd.h>

#include "common/free_descriptors.h"
#include "common/library_thread.h"
#include "modelcast/error.h"
#include "transports/ucx/ucx_log.h"
#include "transports/ucx/ucx_setup_shortage.h"
#include "transports/ucx/ucx_tls.h"

namespace modelcast::transport {
namespace {

// How many fork()s made this process, counted in each child (pthread_atfork): post() asks on
// every send, where getpid() would be a system call each time.
std::atomic<unsigned> forks{0};

// The UCX contexts this process holds (one leaked on purpose, see destroy(), included), and
// whether it is a child forked while its parent held one. Such a child has UCX's process-wide
// state (its async thread's, its memory hooks') without the threads behind it: a Consumer made
// there joined and then never received a version, without a word. A view of a closed Consumer
// keeps its transport, and so its context: a pre-fork server that kept the weights it read and
// closed its Consumer had workers whose Consumers never received anything.
std::atomic<int> held_contexts{0};
std::atomic<bool> forked_while_held{false};
// Of held_contexts, those left on purpose (destroy()): the refusal says so, as the parent may
// have closed every Producer and Consumer it made.
std::atomic<int> leaked_contexts{0};

unsigned counted_forks() {
  static std::once_flag registered;
  std::call_once(registered, [] {
    pthread_atfork(nullptr, nullptr, [] {
      forks.fetch_add(1, std::memory_order_relaxed);
      if (held_contexts.load(std::memory_order_relaxed) > 0) forked_while_held.store(true, std::memory_order_relaxed);
    });
  });
  return forks.load(std::memory_order_relaxed);
}

}  // namespace

void throw_ucx(const std::string& what, ucs_status_t status) {
  throw Error(ErrorCode::kTransport, what + ": " + ucs_status_string(status));
}

namespace {

// A failed context or worker setup: with the resource it was short of, when one is (see
// ucx_setup_shortage.h), as Error(kResource).
[[noreturn]] void throw_ucx_setup(const std::string& what, ucs_status_t status) {
  if (auto shortage = ucx_setup_shortage()) {
    throw Error(ErrorCode::kResource, what + ": " + ucs_status_string(status) + " (" + *shortage + ")");
  }
  throw_ucx(what, status);
}

}  // namespace

UcxWorker::UcxWorker(std::uint64_t features, bool indirect_ids, const UcxQuirks& quirks)
    : leak_when_halted_(quirks.destroying_busy_worker_asserts), owner_pid_(getpid()),
      owner_forks_(counted_forks()) {
  if (forked_while_held.load(std::memory_order_relaxed)) {
    throw Error(ErrorCode::kState,
                "this process (" + std::to_string(getpid()) +
                    ") was forked while its parent held a transport (an open Producer or Consumer, or a view of a "
                    "closed Consumer, which keeps its transport): the transport library's threads stayed in the parent, "
                    "so no Producer or Consumer can work here. Fork before making any, or start processes another way "
                    "(multiprocessing's spawn or forkserver)" +
                    (leaked_contexts.load(std::memory_order_relaxed) > 0
                         ? std::string(". The parent still held one it had closed: a transport halted on a peer that "
                                       "never answered (see its log) is left open rather than destroyed, for the rest "
                                       "of that process")
                         : std::string()));
  }
  route_ucx_log();
  // UCX starts its asynchronous-events thread inside ucp_init (once per process) and asserts,
  // ending the process, when it cannot; the progress thread follows in start(). Asked first, a
  // process at its limit of threads or descriptors gets an error (each check says what it cannot
  // promise).
  check_threads_can_start(2, "UCX");
  // Also ucp_worker_create, when an interface cannot open a descriptor (seen: "failed to set
  // active message handler"). A consumer's worker over loopback and shared memory opened about 10
  // here, and each network device adds its TCP interface's: asked for with room, not so much that
  // a process UCX would fit in is refused.
  check_descriptors_free(32, "UCX");
  ucp_config_t* config = nullptr;
  if (auto s = ucp_config_read(nullptr, nullptr, &config); s != UCS_OK) throw_ucx("ucp_config_read", s);
  // UcxOptions::indirect_endpoint_ids says why; the user's environment wins.
  if (indirect_ids && std::getenv("UCX_PROTO_INDIRECT_ID") == nullptr) {
    if (auto s = ucp_config_modify(config, "PROTO_INDIRECT_ID", "on"); s != UCS_OK) {
      ucp_config_release(config);
      throw_ucx("ucp_config_modify(PROTO_INDIRECT_ID)", s);
    }
  }
  // A producer maps the shared-memory receive segment of every consumer on its host that it sent
  // a rendezvous message (every real model's chunks), and UCX (1.13 to 1.22 at least) keeps that
  // mapping until the worker is destroyed, whatever close the producer makes: the endpoint of a
  // peer that has answered a wireup request is only freed with the worker (ucp_ep_disconnected,
  // "TODO negotiate disconnect"). The segment grows 512 descriptors at a time by default, 4.1 MiB
  // of which about 2 MiB is touched: what each consumer that ever joined left in the producer.
  // 64 at a time leaves about 0.5 MiB mapped (0.3 MiB touched); more are added as they are
  // needed, and 256 MiB versions were no slower (bench/RESULTS.md, exchange). Set in every process, as a consumer's own
  // setting is what sizes the segment its producer maps. The user's environment wins. Not where
  // UCX_TLS leaves shared memory out: the setting then names no transport UCX loads, and UCX
  // warns "invalid configuration" at every start.
  if (std::getenv("UCX_MM_RX_BUFS_GROW") == nullptr && std::getenv("UCX_SYSV_RX_BUFS_GROW") == nullptr &&
      std::getenv("UCX_POSIX_RX_BUFS_GROW") == nullptr && ucx_mm_transports_allowed()) {
    if (auto s = ucp_config_modify(config, "MM_RX_BUFS_GROW", "64"); s != UCS_OK) {
      ucp_config_release(config);
      throw_ucx("ucp_config_modify(MM_RX_BUFS_GROW)", s);
    }
  }
  // UCX's TCP transport connects with a blocking connect() by default (Debian's 1.13, and later
  // versions), inside ucp_ep_create on the thread that makes the endpoint: a peer whose host drops
  // the SYNs (a firewall that lets the control port through and not UCX's) held the producer's
  // service thread, and with it publish() and every other consumer, until the kernel gave up
  // (about two minutes). Non-blocking, the endpoint is made at once and a connection that never
  // comes fails the endpoint, as a lost peer does. The user's environment wins.
  if (std::getenv("UCX_TCP_CONN_NB") == nullptr && ucx_tcp_allowed()) {
    if (auto s = ucp_config_modify(config, "CONN_NB", "y"); s != UCS_OK) {
      ucp_config_release(config);
      throw_ucx("ucp_config_modify(CONN_NB)", s);
    }
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
  params.features = features;
  params.name = "modelcast";
  auto s = ucp_init(&params, config, &context_);
  ucp_config_release(config);
  if (s != UCS_OK) throw_ucx_setup("ucp_init", s);

  ucp_worker_params_t wparams{};
  wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  // One thread at a time: this one until start(), the progress thread after it.
  wparams.thread_mode = quirks.single_thread_worker_bound_to_first_thread ? UCS_THREAD_MODE_SERIALIZED
                                                                          : UCS_THREAD_MODE_SINGLE;
  if (s = ucp_worker_create(context_, &wparams, &worker_); s != UCS_OK) {
    ucp_cleanup(context_);
    throw_ucx_setup("ucp_worker_create", s);
  }
  held_contexts.fetch_add(1, std::memory_order_relaxed);
}

UcxWorker::~UcxWorker() { destroy(); }

bool UcxWorker::in_forked_child() const { return forks.load(std::memory_order_relaxed) != owner_forks_; }

void UcxWorker::refuse_in_forked_child() const {
  if (!in_forked_child()) return;
  throw Error(ErrorCode::kState, "this UCX worker was made in process " + std::to_string(owner_pid_) +
                                     ", and this is a child it forked (" + std::to_string(getpid()) +
                                     "): its progress thread stayed in the parent");
}

void UcxWorker::destroy() {
  if (in_forked_child()) {
    // Joining a thread this process does not have would wait for ever, and UCX's state is the
    // parent's: both are left, as the child's exit leaves them anyway.
    // Not detach(): the child's own threads may have the pthread_t the parent's thread had.
    if (thread_.joinable()) new std::thread(std::move(thread_));  // NOLINT: left on purpose
    worker_ = nullptr;
    context_ = nullptr;
    return;
  }
  stop();
  if (halted_ && leak_when_halted_) {
    worker_ = nullptr;  // leaked on purpose: see destroy() in the header
    if (context_ != nullptr) leaked_contexts.fetch_add(1, std::memory_order_relaxed);
    context_ = nullptr;
    return;
  }
  if (worker_ != nullptr) ucp_worker_destroy(worker_);
  if (context_ != nullptr) {
    ucp_cleanup(context_);
    held_contexts.fetch_sub(1, std::memory_order_relaxed);
  }
  worker_ = nullptr;
  context_ = nullptr;
}

void UcxWorker::start(Hooks hooks, std::chrono::microseconds idle_spin) {
  hooks_ = std::move(hooks);
  thread_ = library_thread("UCX progress", [this, idle_spin] { progress_loop(IdleSpin(idle_spin)); });
}

void UcxWorker::stop() {
  if (!thread_.joinable() || in_forked_child()) return;
  stopping_ = true;
  post([] {});
  thread_.join();
}

void UcxWorker::post(std::function<void()> command) {
  if (in_forked_child()) return;
  {
    std::lock_guard lock(commands_mutex_);
    commands_.push_back(std::move(command));
  }
  commands_ready_.notify_one();
  ucp_worker_signal(worker_);
}

void UcxWorker::progress_loop(IdleSpin spin) {
  for (;;) {
    std::vector<std::function<void()>> commands;
    {
      std::lock_guard lock(commands_mutex_);
      commands.swap(commands_);
    }
    for (auto& command : commands) command();
    if (stopping_) break;
    if (halted_) {
      std::unique_lock lock(commands_mutex_);
      commands_ready_.wait(lock, [this] { return !commands_.empty() || stopping_; });
      continue;
    }
    unsigned progressed = ucp_worker_progress(worker_);
    if (hooks_.after_progress) hooks_.after_progress();
    const auto now = IdleSpin::Clock::now();
    if (progressed != 0 || !commands.empty()) {
      spin.progressed(now);
      continue;
    }
    if (spin.keep_polling(now)) continue;
    if (ucp_worker_arm(worker_) == UCS_ERR_BUSY) continue;
    {
      std::lock_guard lock(commands_mutex_);
      if (!commands_.empty()) continue;  // queued before arm consumed its signal
    }
    if (const auto wake_by = hooks_.wake_by ? hooks_.wake_by() : std::nullopt) {
      // As ucp_worker_wait does, on the worker's event descriptor, but only until the deadline.
      int fd = -1;
      if (ucp_worker_get_efd(worker_, &fd) == UCS_OK) {
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(*wake_by - std::chrono::steady_clock::now());
        pollfd ready{fd, POLLIN, 0};
        (void)::poll(&ready, 1, static_cast<int>(std::clamp<std::int64_t>(left.count(), 0, 60'000)));
        continue;
      }
    }
    ucp_worker_wait(worker_);
  }
  if (hooks_.at_shutdown) hooks_.at_shutdown();
}

}  // namespace modelcast::transport
