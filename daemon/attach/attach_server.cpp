#include "daemon/attach/attach_server.h"

#include <fcntl.h>
#include <linux/sockios.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <span>

#include <spdlog/spdlog.h>

#include "common/shown_text.h"
#include "daemon/attach/seqpacket.h"
#include "modelcast/error.h"

namespace modelcastd::attach {

using Clock = std::chrono::steady_clock;

// Sends to a client; on failure says why (at most once per 10 s: clients can fail at will), and
// the caller drops the client.
bool AttachServer::send_to(int fd, std::span<const char> message, std::span<const int> fds) {
  if (send_message(fd, message, fds)) return true;
  const bool full = errno == EAGAIN || errno == EWOULDBLOCK;
  const std::string why = full ? "it does not read its replies" : std::strerror(errno);
  if (auto note = drops_logged_.admit(Clock::now())) {
    spdlog::get("modelcastd")->warn("attach: client dropped, cannot send to it: {}{}", why, *note);
  }
  return false;
}

struct AttachServer::Client {
  int fd = -1;
  std::map<std::uint64_t, ServedPtr> holds;
  // A wait_for_version in progress (the client sends one request at a time).
  std::optional<Request> waiting;
  Clock::time_point deadline;
  // A reply of ours is still unread: the client's requests are not read until it is (see run()).
  // `recheck` grows while the client reads nothing, so a stuck client costs few wake-ups.
  bool paused = false;
  std::chrono::milliseconds recheck{0};
  Clock::time_point recheck_at;
  // Dropped, but kept open until the client has read (or discarded, by closing) what was sent.
  bool closing = false;
  // Descriptors a client sent and this end never read are released with the connection, and
  // their close may block: the closer takes them out first (see descriptor_closer.h).
  DescriptorCloser* closer = nullptr;
  ~Client() { closer->close_connection(fd); }
};

namespace {

// Whether the peer has yet to read something sent on `fd`. A Unix socket's SIOCOUTQ is the
// memory of the messages sent and not yet received, which the receiver frees as it reads.
bool has_unread_replies(int fd) {
  int queued = 0;
  return ioctl(fd, SIOCOUTQ, &queued) == 0 && queued > 0;
}

constexpr std::chrono::milliseconds kFirstRecheck{5}, kLongestRecheck{500};

// Rechecks fall on a shared 50 ms grid: thousands of clients that read nothing, each on a time of
// its own, woke the server thread (which polls every client) about once a millisecond.
Clock::time_point on_recheck_grid(Clock::time_point when) {
  constexpr auto kGrid = std::chrono::duration_cast<Clock::duration>(std::chrono::milliseconds(50));
  const auto ticks = (when.time_since_epoch() + kGrid - Clock::duration(1)) / kGrid;
  return Clock::time_point(ticks * kGrid);
}

// Which file `path` is (device, inode), if any.
std::optional<std::pair<dev_t, ino_t>> file_identity(const std::string& path) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return std::nullopt;
  return std::pair<dev_t, ino_t>{st.st_dev, st.st_ino};
}

std::size_t default_max_clients() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return 4096;
  return std::max<std::size_t>(16, static_cast<std::size_t>(limit.rlim_cur) / 2);
}

}  // namespace

AttachServer::AttachServer(const std::string& socket_path, Lookup lookup, std::size_t max_holds_per_client,
                           std::size_t max_clients)
    : path_(socket_path),
      lookup_(std::move(lookup)),
      max_holds_(max_holds_per_client),
      max_clients_(max_clients != 0 ? max_clients : default_max_clients()) {
  listen_fd_ = listen_at(path_);
  bound_file_ = file_identity(path_).value_or(std::pair<dev_t, ino_t>{});
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
}

void AttachServer::check_socket_path(Clock::time_point now) {
  if (now < path_check_at_) return;
  path_check_at_ = now + std::chrono::seconds(1);
  auto log = spdlog::get("modelcastd");
  const auto identity = file_identity(path_);
  if (identity == bound_file_) return;
  if (identity) {
    if (!foreign_file_said_) {
      log->error("attach: '{}' is no longer this daemon's socket (another file took its place): new clients "
                 "cannot reach it until it is removed or the daemon restarts", path_);
      foreign_file_said_ = true;
    }
    return;
  }
  try {
    const int fd = listen_at(path_);
    close(listen_fd_);
    listen_fd_ = fd;
    bound_file_ = file_identity(path_).value_or(std::pair<dev_t, ino_t>{});
    foreign_file_said_ = remake_failure_said_ = false;
    log->warn("attach: the socket '{}' was removed; listening there again (connected clients were not affected)",
              path_);
  } catch (const modelcast::Error& e) {
    if (!remake_failure_said_) log->error("attach: the socket '{}' was removed and cannot be made again: {}", path_, e.what());
    remake_failure_said_ = true;
  }
}

void AttachServer::start() {
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
}

AttachServer::~AttachServer() {
  stop_ = true;
  notify();
  if (thread_.joinable()) thread_.join();
  clients_.clear();
  const bool ours = file_identity(path_) == bound_file_;  // not a file that took its place; before
  close(listen_fd_);                                       // the close, which frees the inode
  close(wake_fd_);
  if (ours) unlink(path_.c_str());
}

void AttachServer::notify() {
  std::uint64_t one = 1;
  [[maybe_unused]] auto n = write(wake_fd_, &one, sizeof one);
}

AttachStats AttachServer::stats() const {
  std::lock_guard lock(holds_mutex_);
  return {clients_count_.load(), holds_count_.load(), attaches_.load(), holds_by_model_};
}

void AttachServer::count_hold(const ServedPtr& version, int delta) {
  std::lock_guard lock(holds_mutex_);
  auto& n = holds_by_model_[version->model];
  n = static_cast<std::size_t>(static_cast<long long>(n) + delta);
  if (n == 0) holds_by_model_.erase(version->model);
  holds_count_ = static_cast<std::size_t>(static_cast<long long>(holds_count_.load()) + delta);
}

void AttachServer::drop_client(int fd) {
  auto it = clients_.find(fd);
  if (it == clients_.end()) return;
  Client& client = *it->second;
  for (const auto& [id, version] : client.holds) count_hold(version, -1);
  client.holds.clear();  // releases every hold of that client
  client.waiting.reset();
  // The descriptors in a reply the client has not read are charged to this daemon's user until
  // they are read, even once this end is closed: a client dropped and reconnecting again and
  // again could pile them up past the open-file limit, after which every reply's descriptor
  // fails (ETOOMANYREFS). So a connection is closed only when nothing sent on it is unread, and
  // until then it counts towards max_clients.
  if (has_unread_replies(fd)) {
    client.closing = true;
    client.recheck = kFirstRecheck;
    client.recheck_at = on_recheck_grid(Clock::now() + client.recheck);
    return;
  }
  clients_.erase(it);
  clients_count_ = clients_.size();
}

void AttachServer::run() {
  auto log = spdlog::get("modelcastd");
  std::vector<pollfd> fds;
  while (!stop_) {
    fds.clear();
    auto now = Clock::now();
    check_socket_path(now);  // before listen_fd_ is polled: it may be replaced
    const bool accepting = now >= accept_paused_until_;
    fds.push_back({accepting ? listen_fd_ : -1, POLLIN, 0});  // a negative fd is skipped by poll
    fds.push_back({wake_fd_, POLLIN, 0});
    int timeout_ms =
        accepting ? -1 : static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(accept_paused_until_ - now).count());
    auto wake_by = [&](Clock::time_point when) {
      auto left = std::max<long long>(std::chrono::ceil<std::chrono::milliseconds>(when - now).count(), 0);
      timeout_ms = timeout_ms < 0 ? static_cast<int>(left) : std::min(timeout_ms, static_cast<int>(left));
    };
    wake_by(path_check_at_);
    for (auto it = clients_.begin(); it != clients_.end();) {
      Client& client = *it->second;
      if ((client.paused || client.closing) && now >= client.recheck_at) {
        client.paused = has_unread_replies(client.fd);
        if (!client.paused && client.closing) {
          it = clients_.erase(it);
          clients_count_ = clients_.size();
          continue;
        }
        client.recheck = std::min(client.recheck * 2, kLongestRecheck);
        client.recheck_at = on_recheck_grid(now + client.recheck);
      }
      // A paused or closing client is not polled: a hang-up is no sign that its replies were
      // read (a client that shut its socket down keeps their descriptors queued, and in flight),
      // and would be reported on every turn. Only an empty queue, seen on its recheck, ends it.
      if (client.paused || client.closing) {
        wake_by(client.recheck_at);
      } else {
        fds.push_back({client.fd, POLLIN, 0});
      }
      if (client.waiting) wake_by(client.deadline);
      ++it;
    }
    if (poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) {
      log->error("attach server: poll failed: {}", std::strerror(errno));
      return;
    }
    if (fds[1].revents != 0) {
      std::uint64_t count;
      [[maybe_unused]] auto n = read(wake_fd_, &count, sizeof count);
    }
    if (fds[0].revents != 0) accept_clients();
    now = Clock::now();
    for (std::size_t i = 2; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      auto it = clients_.find(fds[i].fd);
      if (it == clients_.end()) continue;
      Client& client = *it->second;
      // One reply unread at most per connection (see drop_client for why): a client that sends
      // again before reading is not read from until it has. A client waits for each answer, so
      // only one that does not read its replies ever waits here.
      if ((fds[i].revents & POLLIN) != 0 && has_unread_replies(client.fd)) {
        client.paused = true;
        client.recheck = kFirstRecheck;
        client.recheck_at = on_recheck_grid(now + client.recheck);
        continue;
      }
      if (!serve(client)) drop_client(fds[i].fd);
    }
    check_waiters();
  }
}

void AttachServer::accept_clients() {
  for (;;) {
    // Non-blocking: should a client's socket ever be full (its replies are kept to one unread),
    // the client is dropped (send fails with EAGAIN) instead of blocking this one thread, which
    // serves every client.
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE) {
        accept_paused_until_ = Clock::now() + std::chrono::milliseconds(100);
        if (auto note = refusals_logged_.admit(Clock::now())) {
          spdlog::get("modelcastd")->warn("attach: cannot accept a client: {} ({} clients); new ones wait{}",
                                          std::strerror(errno), clients_.size(), *note);
        }
      }
      return;
    }
    if (clients_.size() >= max_clients_) {
      Reply reply;
      reply.code = static_cast<int>(modelcast::ErrorCode::kResource);
      reply.error = "modelcastd serves at most " + std::to_string(max_clients_) +
                    " attach clients at once (half its open-file limit); try again once others have closed";
      send_message(fd, encode(reply));  // best effort: the client may be gone already
      closer_.close_connection(fd);
      if (auto note = refusals_logged_.admit(Clock::now())) {
        spdlog::get("modelcastd")->warn("attach: client refused: {} clients already{}", clients_.size(), *note);
      }
      continue;
    }
    auto client = std::make_unique<Client>();
    client->fd = fd;
    client->closer = &closer_;
    clients_[fd] = std::move(client);
    clients_count_ = clients_.size();
  }
}

bool AttachServer::serve(Client& client) {
  std::vector<char> message;
  std::vector<int> stray_fds;
  const bool received = receive_request(client.fd, message, stray_fds);
  for (int fd : stray_fds) closer_.close_later(fd);  // clients send no descriptors
  if (!received) return false;
  Request request;
  try {
    request = decode_request(message);
  } catch (const modelcast::Error& e) {
    if (auto note = malformed_logged_.admit(Clock::now())) {
      spdlog::get("modelcastd")->warn("attach client dropped: {}{}", modelcast::printable_text(e.what(), 400), *note);
    }
    // Told why before the close (best effort), rather than left to guess from an end of file.
    Reply reply;
    reply.code = static_cast<int>(modelcast::ErrorCode::kProtocol);
    reply.error = "malformed request, connection closed: " + modelcast::printable_text(e.what(), 400);
    send_message(client.fd, encode(reply));
    return false;
  }
  if (request.op == Request::Op::kRelease) {
    auto hold = client.holds.find(request.hold);
    if (hold != client.holds.end()) {
      count_hold(hold->second, -1);
      client.holds.erase(hold);
    }
    return true;
  }
  auto refuse = [&](modelcast::ErrorCode code, const std::string& why) {
    Reply reply;
    reply.code = static_cast<int>(code);
    reply.error = why;
    return send_to(client.fd, encode(reply));
  };
  if (client.waiting) return refuse(modelcast::ErrorCode::kState, "a request is already waiting on this connection");
  bool exists = false;
  ServedPtr version = lookup_(request.model, exists);
  if (!exists) return refuse(modelcast::ErrorCode::kInvalidArgument, "no model " + modelcast::shown_text(request.model) + " is configured");
  if (version && version->manifest.version >= request.min_version) return answer(client, version);
  if (request.timeout_ms == 0) return answer(client, nullptr);
  client.waiting = request;
  const auto longest = static_cast<std::uint64_t>(attach::kLongestWait.count());
  client.deadline = Clock::now() + std::chrono::milliseconds(std::min(request.timeout_ms, longest));
  return true;
}

bool AttachServer::answer(Client& client, ServedPtr version) {
  Reply reply;
  if (!version) return send_to(client.fd, encode(reply));
  if (client.holds.size() >= max_holds_) {
    reply.code = static_cast<int>(modelcast::ErrorCode::kResource);
    reply.error = "this connection holds " + std::to_string(max_holds_) + " versions already; release some";
    return send_to(client.fd, encode(reply));
  }
  std::uint64_t hold = next_hold_++;
  reply.manifest = version->manifest;
  reply.manifest->hold = hold;
  auto encoded = encode(reply);
  // ModelService refuses such versions; were one served, a client could not read it, nor name
  // the hold to release it.
  if (encoded.size() > kMaxManifestBytes) {
    Reply refused;
    refused.code = static_cast<int>(modelcast::ErrorCode::kResource);
    refused.error = "version " + std::to_string(version->manifest.version) + "'s manifest is " +
                    std::to_string(encoded.size()) + " bytes, more than a client reads";
    return send_to(client.fd, encode(refused));
  }
  // The hold is recorded before the reply leaves: once the client can read, the bytes are pinned.
  client.holds[hold] = version;
  count_hold(version, +1);
  ++attaches_;
  int buffer_fd = version->buffer->read_only_fd();
  if (encoded.size() <= kInlineReplyBytes) {
    return send_to(client.fd, encoded, std::span<const int>(&buffer_fd, 1));
  }
  // Too large for one socket message (the kernel caps those at a few hundred KiB): the reply
  // goes in a sealed memfd beside the buffer's descriptor.
  int manifest_fd = memfd_create("modelcastd:manifest", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  bool ok = manifest_fd >= 0 && write(manifest_fd, encoded.data(), encoded.size()) == static_cast<ssize_t>(encoded.size()) &&
            fcntl(manifest_fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0;
  if (ok) {
    int fds[2] = {buffer_fd, manifest_fd};
    ok = send_to(client.fd, encode_manifest_in_fd(), fds);
  } else {
    spdlog::get("modelcastd")->error("attach: cannot pass a manifest of {} bytes: {}", encoded.size(), std::strerror(errno));
  }
  if (manifest_fd >= 0) close(manifest_fd);
  return ok;
}

void AttachServer::check_waiters() {
  auto now = Clock::now();
  std::vector<int> dead;
  for (auto& [fd, client] : clients_) {
    if (!client->waiting) continue;
    bool exists = false;
    ServedPtr version = lookup_(client->waiting->model, exists);
    bool ready = version && version->manifest.version >= client->waiting->min_version;
    if (!ready && exists && now < client->deadline) continue;
    client->waiting.reset();
    Reply removed;
    removed.code = static_cast<int>(modelcast::ErrorCode::kInvalidArgument);
    removed.error = "the model was removed from the configuration";
    bool ok = exists ? answer(*client, ready ? version : nullptr) : send_to(fd, encode(removed));
    if (!ok) dead.push_back(fd);
  }
  for (int fd : dead) drop_client(fd);
}

}  // namespace modelcastd::attach
