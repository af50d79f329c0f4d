// The sidecar client: requests on SOCK_SEQPACKET connections, one read-only mapping per daemon
// buffer and connection (cached, so attaching costs a message round trip whatever the model's
// size). The daemon answers a connection's requests in order, so each request in flight has a
// connection of its own: one taken from the idle ones, or a new one when all are busy (a thread's
// long wait_for_version would otherwise hold every other thread's call). A connection the daemon
// closed (it restarted) is given up with the idle ones, which went to the same daemon; the mapping
// cache belongs to a connection, since a new daemon numbers its buffers afresh.
//
// Threads: any thread may call acquire/wait_for_version; Impl::idle_mutex_ guards the idle
// connections, Impl::connect_mutex_ serialises making new ones, each Connection's mutexes its
// socket and cache; views release their holds from whatever thread drops them.
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fcntl.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <thread>

#include "common/clock.h"
#include "common/shown_text.h"
#include "daemon/attach/seqpacket.h"
#include "daemon/client/attached_version.h"
#include "modelcast/error.h"

namespace modelcast::sidecar {
namespace detail {

// The whole of a (sealed) manifest memfd, which carries a manifest too large for a message,
// bounded by the protocol's manifest limit.
std::vector<char> read_all(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0 || st.st_size <= 0 ||
      static_cast<std::uint64_t>(st.st_size) > modelcastd::attach::kMaxManifestBytes) {
    throw Error(ErrorCode::kProtocol, "modelcastd: the manifest memfd is empty or too large");
  }
  std::vector<char> bytes(static_cast<std::size_t>(st.st_size));
  if (const auto n = pread(fd, bytes.data(), bytes.size(), 0); n != static_cast<ssize_t>(bytes.size())) {
    if (n < 0) {
      throw Error(ErrorCode::kResource,
                  std::string("modelcastd: the manifest memfd cannot be read: ") + std::strerror(errno));
    }
    throw Error(ErrorCode::kProtocol, "modelcastd: the manifest memfd ends before its size");
  }
  return bytes;
}

Connection::~Connection() {
  if (fd >= 0) close(fd);
}

void Connection::release(std::uint64_t hold) noexcept {
  if (inherited()) return;  // the parent's hold, released by the parent
  try {
    std::lock_guard lock(send_mutex);
    unsent_releases.push_back(hold);
    flush_releases();  // never waits: left for the next request if the socket is full
  } catch (...) {
    // Out of memory: the hold is released when the connection closes.
  }
}

void Connection::retire() {
  std::lock_guard lock(cache_mutex);
  mappings.clear();
}

bool Connection::flush_releases() {
  if (inherited()) return true;  // nothing of the parent's is sent or read from a child
  if (answer_outstanding) read_late_answer();
  while (!unsent_releases.empty()) {
    modelcastd::attach::Request request;
    request.op = modelcastd::attach::Request::Op::kRelease;
    request.hold = unsent_releases.front();
    if (!modelcastd::attach::send_message(fd, modelcastd::attach::encode(request), {}, /*wait=*/false)) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
      // A daemon that is gone has released every hold of this connection already.
      unsent_releases.clear();
      return true;
    }
    unsent_releases.erase(unsent_releases.begin());
  }
  return true;
}

void Connection::read_late_answer() {
  pollfd ready{fd, POLLIN, 0};
  if (poll(&ready, 1, 0) != 1) return;
  std::vector<char> answer;
  std::vector<int> fds;
  // The daemon closed the connection, or sent what the client does not take: nothing to read
  // again, and the holds go when the connection closes.
  answer_outstanding = false;
  if (!modelcastd::attach::receive_message(fd, answer, fds)) return;
  std::optional<std::uint64_t> hold;
  try {
    hold = modelcastd::attach::hold_in_reply(fds.size() == 2 ? std::span<const char>(read_all(fds[1])) : answer);
  } catch (...) {
    // An unreadable manifest memfd: as above.
  }
  for (int received : fds) close(received);
  if (hold) unsent_releases.push_back(*hold);
}

}  // namespace detail

using detail::AttachedVersion;
using detail::Connection;
using detail::Mapping;

class Client::Impl {
 public:
  std::string model;
  std::string socket_path;
  std::chrono::milliseconds reconnect_timeout{0};

  // The socket's path as messages show it: escaped, so that a newline in it cannot forge a log line.
  std::string shown_path() const { return shown_text(socket_path, 4096); }

  // Connects for the first time, retrying until `timeout` (the daemon may still be starting).
  void connect_first(std::chrono::milliseconds timeout) {
    auto connection = connect(timeout, queue_full_grace(timeout), "cannot connect to modelcastd at " + shown_path());
    std::lock_guard lock(idle_mutex_);
    idle_.push_back(std::move(connection));
  }

  // Asks for a version >= min_version, waiting up to `timeout`. A connection the daemon closed
  // (it restarted) is replaced and the request sent again, within reconnect_timeout; views of
  // the old connection keep their mappings and holds (a dead daemon's holds are gone anyway).
  View request(std::uint64_t min_version, std::chrono::milliseconds timeout) {
    read_late_answers();
    auto wait_until = modelcast::deadline_after(timeout);
    std::optional<std::chrono::steady_clock::time_point> first_loss;
    auto pause = std::chrono::milliseconds(10);  // before reconnecting: 10 ms doubling to 500 ms
    for (;;) {
      auto connection = take(first_loss);
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(wait_until - std::chrono::steady_clock::now());
      left = std::max(left, std::chrono::milliseconds(0));
      try {
        struct GiveBack {  // a connection that failed half-way (broken) is not used again
          Impl& impl;
          std::shared_ptr<Connection>& connection;
          ~GiveBack() { impl.give_back(std::move(connection)); }
        };
        View view;
        {
          GiveBack give_back_after{*this, connection};
          view = exchange(connection, min_version, std::min(left, modelcastd::attach::kLongestWait));
        }
        // The daemon ends a wait at kLongestWait: a longer one is asked again for the rest.
        if (view || left <= modelcastd::attach::kLongestWait) return view;
      } catch (const Lost& lost) {
        forget_idle(lost.why);
        // A daemon that accepts and then drops every connection would otherwise keep us here.
        auto now = std::chrono::steady_clock::now();
        if (!first_loss) first_loss = now;
        if (now - *first_loss > reconnect_timeout) gone(lost.why + ", again after reconnecting for " +
                                                        std::to_string(reconnect_timeout.count()) + " ms");
        // A daemon that accepts and closes at once was connected to some 50,000 times a second.
        std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(pause, *first_loss + reconnect_timeout - now));
        pause = std::min(pause * 2, std::chrono::milliseconds(500));
      }
    }
  }

 private:
  // The daemon closed the connection or it failed half-way: worth a new connection.
  struct Lost {
    std::string why;
  };

  // An idle connection, or a new one when every one is busy or the last was lost. Throws
  // Error(kTransport) once reconnect_timeout passes without the daemon accepting (a second at
  // least where its queue of connections stays full), counted from this call, or from
  // `first_loss`, the request's first lost connection: a daemon that came back and dropped the
  // connection again gave every take() a whole reconnect_timeout more, twice the bound said.
  std::shared_ptr<Connection> take(std::optional<std::chrono::steady_clock::time_point> first_loss = std::nullopt) {
    std::string failure;
    {
      std::lock_guard lock(idle_mutex_);
      // A forked child makes connections of its own (Connection::owner).
      std::erase_if(idle_, [](const auto& connection) { return connection->inherited(); });
      if (!idle_.empty()) {
        auto connection = std::move(idle_.back());  // the most recently used: its mappings are warm
        idle_.pop_back();
        return connection;
      }
      failure = lost_why_.empty() ? "cannot open another connection to modelcastd at " + shown_path() + " within " +
                                        std::to_string(reconnect_timeout.count()) + " ms"
                                  : "modelcastd at " + shown_path() + " went away (" + lost_why_ +
                                        ") and did not come back within " + std::to_string(reconnect_timeout.count()) +
                                        " ms";
    }
    // One thread at a time waits for a daemon that is not there; the others wait on it, and
    // their reconnect_timeout runs from when they asked, not from when their turn came: each
    // trying for a whole one in turn, the last of N threads waiting when the daemon died
    // returned after N times that.
    const auto deadline = first_loss ? *first_loss + reconnect_timeout : modelcast::deadline_after(reconnect_timeout);
    const auto grace = std::max(deadline, modelcast::deadline_after(kFullQueueGrace));  // from the call too
    std::lock_guard lock(connect_mutex_);
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    auto connection = connect(std::max(left, std::chrono::milliseconds(0)), grace, failure);
    std::lock_guard idle(idle_mutex_);
    lost_why_.clear();
    return connection;
  }

  // Kept for the next request unless it failed half-way; a few idle ones at most, since each
  // keeps its own mappings (views keep their connection alive as long as they need it).
  void give_back(std::shared_ptr<Connection> connection) {
    if (connection->broken) {
      connection->retire();
      bool outstanding;
      {
        std::lock_guard lock(connection->send_mutex);
        outstanding = connection->answer_outstanding;
      }
      std::lock_guard lock(idle_mutex_);
      if (outstanding) answering_.push_back(connection);
      return;
    }
    {
      std::lock_guard lock(idle_mutex_);
      if (idle_.size() < kMostIdleConnections) {
        idle_.push_back(std::move(connection));
        return;
      }
    }
    connection->retire();
  }

  // Reads the late answers that have come on connections given up while waiting for them, and
  // sends the releases they and the views' last releases leave (Connection::answer_outstanding).
  // A connection whose views are all gone is closed here, as its last reference goes.
  void read_late_answers() {
    std::vector<std::shared_ptr<Connection>> answering;
    {
      std::lock_guard lock(idle_mutex_);
      for (auto& weak : answering_) {
        if (auto connection = weak.lock()) answering.push_back(std::move(connection));
      }
      answering_.clear();
    }
    for (auto& connection : answering) {
      bool outstanding = false;
      try {
        std::lock_guard lock(connection->send_mutex);
        connection->flush_releases();
        outstanding = connection->answer_outstanding;
      } catch (...) {
        // Out of memory: the holds go when the connection closes.
      }
      if (outstanding) {
        std::lock_guard lock(idle_mutex_);
        answering_.push_back(connection);
      }
    }
  }

  // The daemon closed a connection: the idle ones went to the same daemon, so they go too
  // (each tried in turn would cost the caller a lost request and a pause).
  void forget_idle(const std::string& why) {
    std::vector<std::shared_ptr<Connection>> forgotten;
    {
      std::lock_guard lock(idle_mutex_);
      forgotten.swap(idle_);
      lost_why_ = why;
    }
    for (auto& connection : forgotten) connection->retire();  // views may keep one alive
  }

  // Why connecting failed: a path that is there but is no socket is named as what it is (it said
  // "Connection refused", as for a daemon that is not running).
  std::string why_not_connected(int error) const {
    struct stat st {};
    if (stat(socket_path.c_str(), &st) == 0 && !S_ISSOCK(st.st_mode)) {
      return std::string(S_ISDIR(st.st_mode) ? "it is a directory" : "it is a file") +
             ", not a socket (modelcastd's [daemon] socket names the path)";
    }
    if (error == EAGAIN) return "its queue of connections to accept stays full (a daemon stopped or hung)";
    return std::strerror(error);
  }

  // Tries until `timeout` with a backoff of 10 ms doubling to 500 ms: a restarting daemon
  // binds its socket in well under a second, and a dead one is not hammered.
  // Until when a full queue of connections is waited out: `timeout` from now, and a second at
  // least, "try once" included (a queue full for a moment: many workers starting together),
  // where connect() used to wait for it for ever. Taken when a call begins, so that calls queued
  // behind connect_mutex_ on a stopped daemon give up together, not a second apart.
  static std::chrono::steady_clock::time_point queue_full_grace(std::chrono::milliseconds timeout) {
    return std::max(modelcast::deadline_after(timeout), modelcast::deadline_after(kFullQueueGrace));
  }

  std::shared_ptr<Connection> connect(std::chrono::milliseconds timeout,
                                      std::chrono::steady_clock::time_point queue_full_until,
                                      const std::string& failure) {
    auto deadline = modelcast::deadline_after(timeout);
    auto pause = std::chrono::milliseconds(10);
    for (;;) {
      int fd = modelcastd::attach::connect_to(socket_path);
      if (fd >= 0) {
        // Not retried: while another user's process holds the path, the daemon cannot bind it.
        try {
          modelcastd::attach::check_listener(fd, socket_path);
        } catch (const Error&) {
          close(fd);
          throw;
        }
        auto connection = std::make_shared<Connection>();
        connection->fd = fd;
        return connection;
      }
      const int error = errno;
      const auto until = error == EAGAIN ? queue_full_until : deadline;
      auto now = std::chrono::steady_clock::now();
      if (now >= until) throw Error(ErrorCode::kTransport, failure + ": " + why_not_connected(error));
      // Nothing to wait on before the daemon binds: polling for its socket is all there is.
      std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(pause, until - now));
      pause = std::min(pause * 2, std::chrono::milliseconds(500));
    }
  }

  // poll() until `due`, a signal's interruption included: each one restarted the whole wait, so
  // a profiler's or a watchdog's timer kept a call on a hung daemon waiting for good.
  static int poll_until(pollfd& p, std::chrono::steady_clock::time_point due) {
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(due - std::chrono::steady_clock::now());
      const int ready = poll(&p, 1, static_cast<int>(std::max<std::int64_t>(left.count(), 0)));
      if (ready >= 0 || errno != EINTR) return ready;
    }
  }

  static constexpr std::chrono::seconds kFullQueueGrace{1};

  View exchange(const std::shared_ptr<Connection>& connection, std::uint64_t min_version,
                std::chrono::milliseconds timeout) {
    modelcastd::attach::Request request;
    request.model = model;
    request.min_version = min_version;
    request.timeout_ms = static_cast<std::uint64_t>(std::max<std::int64_t>(timeout.count(), 0));
    auto message = modelcastd::attach::encode(request);
    std::vector<char> answer;
    std::vector<int> fds;
    {
      std::lock_guard exchange(connection->request_mutex);
      if (connection->broken) throw Lost{"an earlier request on its connection failed half-way"};
      // Marked broken until the answer is in, so an exception half-way leaves it marked.
      connection->broken = true;
      // The daemon answers by the deadline; the margin covers a loaded machine.
      const int wait_ms = static_cast<int>(timeout.count() + 10'000);  // timeout <= kLongestWait
      const auto answer_due = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
      // Releases first, then the request, each waiting for room only until the answer is due: a
      // daemon that reads nothing (stopped) held this call, and every view's release, for ever.
      // The room is waited for without send_mutex, so that a view's release never waits on it.
      for (;;) {
        {
          std::lock_guard lock(connection->send_mutex);
          if (connection->flush_releases()) {
            if (modelcastd::attach::send_message(connection->fd, message, {}, /*wait=*/false)) break;
            if (errno != EAGAIN && errno != EWOULDBLOCK) throw Lost{std::strerror(errno)};
          }
        }
        pollfd room{connection->fd, POLLOUT, 0};
        if (poll_until(room, answer_due) <= 0) gone("it reads no requests (its socket stayed full)");
      }
      pollfd p{connection->fd, POLLIN, 0};
      const int ready = poll_until(p, answer_due);
      // A hung daemon is not retried here (the caller's wait is over); the next call reconnects.
      if (ready <= 0) {
        std::lock_guard lock(connection->send_mutex);
        connection->answer_outstanding = true;
        gone("no answer from the daemon");
      }
      if (!modelcastd::attach::receive_message(connection->fd, answer, fds)) {
        // Not worth sending again (it was, some ten thousand times): the daemon sent what this
        // client does not take. The connection stays marked broken; the next call reconnects.
        if (errno == EMSGSIZE) {
          throw Error(ErrorCode::kProtocol, "modelcastd at " + shown_path() + ": its reply was over " +
                                                std::to_string(modelcastd::attach::kMaxMessageBytes) +
                                                " bytes or carried over " +
                                                std::to_string(modelcastd::attach::kMaxFdsPerMessage) + " descriptors");
        }
        throw Lost{"it closed the connection"};
      }
      connection->broken = false;
    }
    struct Closer {
      std::vector<int>& fds;
      ~Closer() {
        for (int fd : fds) close(fd);
      }
    } closer{fds};
    modelcastd::attach::Reply reply;
    std::vector<char> in_memfd;
    try {
      reply = modelcastd::attach::decode_reply(answer);
      if (reply.manifest_in_fd) {
        if (fds.size() != 2) throw Error(ErrorCode::kProtocol, "modelcastd: a manifest in a memfd came without it");
        in_memfd = detail::read_all(fds[1]);
        reply = modelcastd::attach::decode_reply(in_memfd);
      }
    } catch (const Error&) {
      // Refused, it may still hold a version for this client: released, or the daemon kept its
      // buffer pinned for good (and updates waited on it).
      if (auto hold = modelcastd::attach::hold_in_reply(in_memfd.empty() ? std::span<const char>(answer) : in_memfd)) {
        connection->release(*hold);
      } else {
        // A hold it cannot name (a manifest it could not read) is let go with the connection.
        connection->broken = true;
      }
      throw;
    }
    int fd = fds.empty() ? -1 : fds[0];
    if (reply.code != 0) {
      // Only the library's codes are passed on (C callers switch on them): another is the
      // daemon's protocol broken, and a refusal says what it was.
      if (reply.code < static_cast<int>(ErrorCode::kInvalidArgument) ||
          reply.code > static_cast<int>(ErrorCode::kAuthentication)) {
        connection->broken = true;
        throw Error(ErrorCode::kProtocol, "modelcastd: refused with an unknown error code " +
                                              std::to_string(reply.code) + ": " + printable_text(reply.error, 1000));
      }
      if (reply.error.empty()) reply.error = "refused (it said no more)";
      // The daemon closes a connection it refuses at its cap or over a malformed request: not one
      // to keep for the next call (it cost that call a lost request and a pause).
      const auto code = static_cast<ErrorCode>(reply.code);
      if (code == ErrorCode::kResource || code == ErrorCode::kProtocol) connection->broken = true;
      throw Error(code, "modelcastd: " + reply.error);
    }
    if (!reply.manifest) return {};
    auto state = std::make_shared<AttachedVersion>();
    state->connection = connection;  // from here on, the destructor releases the hold
    state->manifest = std::move(*reply.manifest);
    // Released by the destructor if refused: as asked, or never shown.
    if (state->manifest.version < min_version) {
      throw Error(ErrorCode::kProtocol, "modelcastd: asked for version " + std::to_string(min_version) +
                                            " or newer, it answered with version " +
                                            std::to_string(state->manifest.version));
    }
    state->mapping = map(*connection, state->manifest, fd);
    for (const auto& t : state->manifest.tensors) {
      TensorSpec spec{t.name, t.dtype, t.shape};
      if (auto size = spec.checked_size_bytes(); !size || *size != t.bytes) {
        throw Error(ErrorCode::kProtocol,
                    "modelcastd: tensor '" + t.name + "' has " + std::to_string(t.bytes) + " bytes, its shape and dtype say " +
                        (size ? std::to_string(*size) : std::string("a negative extent or over 2^64 bytes")));
      }
      state->specs.push_back(std::move(spec));
    }
    state->first_at.reserve(state->specs.size());
    for (std::size_t i = 0; i < state->specs.size(); ++i) state->first_at.emplace(state->specs[i].name, i);
    return View(std::move(state));
  }

  [[noreturn]] void gone(const std::string& why) {
    throw Error(ErrorCode::kTransport, "modelcastd at " + shown_path() + ": " + why);
  }

  std::shared_ptr<Mapping> map(Connection& connection, const modelcastd::attach::Manifest& manifest, int fd) {
    std::lock_guard lock(connection.cache_mutex);
    for (auto it = connection.mappings.begin(); it != connection.mappings.end(); ++it) {
      if (it->first == manifest.buffer_id && it->second->size == manifest.buffer_bytes) {
        // The most recently used last: the first ones are what eviction below drops.
        std::rotate(it, it + 1, connection.mappings.end());
        return connection.mappings.back().second;
      }
    }
    if (fd < 0) throw Error(ErrorCode::kProtocol, "modelcastd: a version arrived without its buffer");
    struct stat st {};
    // A buffer shorter than the manifest says would raise SIGBUS on access: refuse it, and one
    // that could be made shorter later (modelcastd seals its buffers against it).
    if (fstat(fd, &st) != 0 || static_cast<std::uint64_t>(st.st_size) < manifest.buffer_bytes) {
      throw Error(ErrorCode::kProtocol, "modelcastd: the buffer is smaller than its manifest says");
    }
    if (const int seals = fcntl(fd, F_GET_SEALS); seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
      throw Error(ErrorCode::kProtocol,
                  "modelcastd: the buffer is not sealed against shrinking (mapped, a buffer cut short later ends "
                  "this process with SIGBUS)");
    }
    void* p = mmap(nullptr, manifest.buffer_bytes, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) throw Error(ErrorCode::kResource, std::string("mapping the model: ") + std::strerror(errno));
    auto mapping = std::make_shared<Mapping>();
    mapping->base = static_cast<const std::byte*>(p);
    mapping->size = manifest.buffer_bytes;
    connection.mappings.emplace_back(manifest.buffer_id, mapping);
    // Buffers a restarted model (a reload) or a replaced copy buffer left behind stay mapped, and
    // resident, as long as the cache has them: past kMostCachedMappings, the least recently used
    // that no view holds are unmapped (a buffer the daemon still serves is mapped again when
    // next acquired: a mapping, and its page faults at first read). A model's receive and copy
    // buffers stay cached while in rotation if it has at most 8 of each ([model] buffers may be
    // up to 64: more are mapped again as they come round).
    std::size_t unused = 0;
    for (const auto& entry : connection.mappings) unused += entry.second.use_count() == 1 ? 1 : 0;
    for (auto it = connection.mappings.begin(); unused > kMostCachedMappings && it != connection.mappings.end();) {
      if (it->second.use_count() == 1 && it->second != mapping) {
        it = connection.mappings.erase(it);
        --unused;
      } else {
        ++it;
      }
    }
    return mapping;
  }

  static constexpr std::size_t kMostIdleConnections = 4;
  // Mappings a connection keeps that no view uses (see map()).
  static constexpr std::size_t kMostCachedMappings = 16;
  std::mutex idle_mutex_;                          // guards the three below
  std::vector<std::shared_ptr<Connection>> idle_;  // connected, no request in flight
  std::string lost_why_;                           // why the last connection was given up, until one is made
  // Connections given up with an answer outstanding, while views still use them: read at each
  // request, so that a late answer arriving after the last release holds nothing for long.
  std::vector<std::weak_ptr<Connection>> answering_;
  std::mutex connect_mutex_;                       // one thread connects at a time
};

Client::Client(ClientOptions options) : impl_(std::make_shared<Impl>()) {
  if (options.model.empty()) throw Error(ErrorCode::kInvalidArgument, "sidecar client: no model name");
  if (options.socket_path.empty()) throw Error(ErrorCode::kInvalidArgument, "sidecar client: no socket_path");
  // The daemon's own limit (a model's name names a directory, NAME_MAX): a longer one can name no
  // model, and past a socket message it failed only after reconnect_timeout, as a lost connection.
  if (options.model.size() > 255) {
    throw Error(ErrorCode::kInvalidArgument, "sidecar client: the model name is " + std::to_string(options.model.size()) +
                                                 " bytes; a model's name is at most 255");
  }
  // modelcastd refuses such names in its configuration, so none can be served; and its answer
  // quoted the name back, where a newline or an escape sequence reached the caller's logs.
  if (const auto at = modelcast::control_character_at(options.model); at != std::string::npos) {
    throw Error(ErrorCode::kInvalidArgument, "sidecar client: the model name has a control character at byte " +
                                                 std::to_string(at) + "; modelcastd serves no such name");
  }
  // As the C API refuses them: a negative wait is no wait, and was taken as "try once".
  if (options.connect_timeout.count() < 0) {
    throw Error(ErrorCode::kInvalidArgument,
                "sidecar client: connect_timeout is negative (" + std::to_string(options.connect_timeout.count()) + " ms)");
  }
  if (options.reconnect_timeout.count() < 0) {
    throw Error(ErrorCode::kInvalidArgument, "sidecar client: reconnect_timeout is negative");
  }
  impl_->model = options.model;
  impl_->socket_path = options.socket_path;
  // Longer than kLongestWait means for ever: milliseconds::max() overflowed in nanoseconds (the
  // time since the first loss was compared with it) and gave up at the first lost connection.
  impl_->reconnect_timeout = std::min(options.reconnect_timeout, modelcast::kLongestWait);
  impl_->connect_first(options.connect_timeout);
}

Client::~Client() = default;

// Each call holds the state it works on: a thread may close the client (destroy it) while
// another's call is under way, which then ends as it would have (its Impl was freed under it).
// A call that begins as the client is destroyed is the caller's error, as for any object.
View Client::acquire() const {
  const auto impl = impl_;
  return impl->request(0, std::chrono::milliseconds(0));
}

View Client::wait_for_version(std::uint64_t version, std::chrono::milliseconds timeout) const {
  if (timeout.count() < 0) {
    throw Error(ErrorCode::kInvalidArgument,
                "sidecar client: wait_for_version timeout is negative (" + std::to_string(timeout.count()) + " ms)");
  }
  const auto impl = impl_;
  return impl->request(std::max<std::uint64_t>(version, 1), timeout);
}

// ---- View ----

View::View(std::shared_ptr<const detail::AttachedVersion> state) : state_(std::move(state)) {}

const detail::AttachedVersion& View::state() const {
  if (!state_) throw Error(ErrorCode::kState, "empty sidecar View: no version acquired");
  return *state_;
}

std::uint64_t View::version() const { return state().manifest.version; }
std::int64_t View::step() const { return state().manifest.step; }
std::uint64_t View::producer_incarnation() const { return state().manifest.incarnation; }
const std::map<std::string, std::string>& View::metadata() const { return state().manifest.metadata; }
const std::string& View::source() const { return state().manifest.source; }
std::size_t View::tensor_count() const { return state().specs.size(); }

std::vector<TensorView> View::tensors() const {
  const auto& held = state();
  std::vector<TensorView> out;
  out.reserve(held.specs.size());
  for (std::size_t i = 0; i < held.specs.size(); ++i) out.push_back(held.view(i));
  return out;
}

std::optional<TensorView> View::find(std::string_view name) const {
  const auto& held = state();
  const auto it = held.first_at.find(name);
  if (it == held.first_at.end()) return std::nullopt;
  return held.view(it->second);
}

TensorView View::tensor(std::string_view name) const {
  if (auto t = find(name)) return *t;
  throw Error(ErrorCode::kInvalidArgument, "no tensor '" + std::string(name) + "' in version " + std::to_string(version()));
}

}  // namespace modelcast::sidecar
