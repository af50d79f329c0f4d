// The sidecar client: requests on one SOCK_SEQPACKET connection, one read-only mapping per
// daemon buffer (cached, so attaching costs a message round trip whatever the model's size).
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "daemon/attach/seqpacket.h"
#include "daemon/client/attached_version.h"
#include "modelcast/error.h"

namespace modelcast::sidecar {
namespace detail {

Connection::~Connection() {
  if (fd >= 0) close(fd);
}

void Connection::release(std::uint64_t hold) noexcept {
  try {
    modelcastd::attach::Request request;
    request.op = modelcastd::attach::Request::Op::kRelease;
    request.hold = hold;
    auto message = modelcastd::attach::encode(request);
    std::lock_guard lock(send_mutex);
    // A daemon that is gone has released every hold of this connection already.
    modelcastd::attach::send_message(fd, message);
  } catch (...) {
    // Out of memory while encoding: the hold is released when the connection closes.
  }
}

}  // namespace detail

using detail::AttachedVersion;
using detail::Connection;
using detail::Mapping;

class Client::Impl {
 public:
  std::shared_ptr<Connection> connection = std::make_shared<Connection>();
  std::string model;
  std::string socket_path;

  View request(std::uint64_t min_version, std::chrono::milliseconds timeout) {
    modelcastd::attach::Request request;
    request.model = model;
    request.min_version = min_version;
    request.timeout_ms = static_cast<std::uint64_t>(std::max<std::int64_t>(timeout.count(), 0));
    auto message = modelcastd::attach::encode(request);
    std::vector<char> answer;
    std::vector<int> fds;
    {
      std::lock_guard exchange(connection->request_mutex);
      if (connection->broken) gone("the connection failed earlier; make a new Client");
      // Marked broken until the answer is in, so an exception half-way leaves it marked.
      connection->broken = true;
      {
        std::lock_guard lock(connection->send_mutex);
        if (!modelcastd::attach::send_message(connection->fd, message)) gone(std::strerror(errno));
      }
      // The daemon answers by the deadline; the margin covers a loaded machine.
      pollfd p{connection->fd, POLLIN, 0};
      int wait_ms = static_cast<int>(std::min<std::int64_t>(timeout.count() + 10'000, 86'400'000));
      int ready;
      do {
        ready = poll(&p, 1, wait_ms);
      } while (ready < 0 && errno == EINTR);
      if (ready <= 0) gone("no answer from the daemon");
      if (!modelcastd::attach::receive_message(connection->fd, answer, fds)) gone("the daemon closed the connection");
      connection->broken = false;
    }
    struct Closer {
      std::vector<int>& fds;
      ~Closer() {
        for (int fd : fds) close(fd);
      }
    } closer{fds};
    auto reply = modelcastd::attach::decode_reply(answer);
    if (reply.manifest_in_fd) {
      if (fds.size() != 2) throw Error(ErrorCode::kProtocol, "modelcastd: a manifest in a memfd came without it");
      reply = modelcastd::attach::decode_reply(read_all(fds[1]));
    }
    int fd = fds.empty() ? -1 : fds[0];
    if (reply.code != 0) throw Error(static_cast<ErrorCode>(reply.code), "modelcastd: " + reply.error);
    if (!reply.manifest) return {};
    auto state = std::make_shared<AttachedVersion>();
    state->connection = connection;  // from here on, the destructor releases the hold
    state->manifest = std::move(*reply.manifest);
    state->mapping = map(state->manifest, fd);
    for (const auto& t : state->manifest.tensors) {
      TensorSpec spec{t.name, t.dtype, t.shape};
      if (spec.size_bytes() != t.bytes) {
        throw Error(ErrorCode::kProtocol, "modelcastd: tensor '" + t.name + "' has " + std::to_string(t.bytes) +
                                              " bytes, its shape and dtype say " + std::to_string(spec.size_bytes()));
      }
      state->specs.push_back(std::move(spec));
    }
    return View(std::move(state));
  }

 private:
  // The whole of a (sealed) manifest memfd, bounded by the protocol's manifest limit.
  static std::vector<char> read_all(int fd) {
    struct stat st {};
    if (fstat(fd, &st) != 0 || st.st_size <= 0 ||
        static_cast<std::uint64_t>(st.st_size) > modelcastd::attach::kMaxManifestBytes) {
      throw Error(ErrorCode::kProtocol, "modelcastd: the manifest memfd is empty or too large");
    }
    std::vector<char> bytes(static_cast<std::size_t>(st.st_size));
    if (pread(fd, bytes.data(), bytes.size(), 0) != static_cast<ssize_t>(bytes.size())) {
      throw Error(ErrorCode::kProtocol, "modelcastd: the manifest memfd cannot be read");
    }
    return bytes;
  }

  [[noreturn]] void gone(const std::string& why) {
    throw Error(ErrorCode::kTransport, "modelcastd at '" + socket_path + "': " + why);
  }

  std::shared_ptr<Mapping> map(const modelcastd::attach::Manifest& manifest, int fd) {
    std::lock_guard lock(connection->cache_mutex);
    for (auto& [id, mapping] : connection->mappings) {
      if (id == manifest.buffer_id && mapping->size == manifest.buffer_bytes) return mapping;
    }
    if (fd < 0) throw Error(ErrorCode::kProtocol, "modelcastd: a version arrived without its buffer");
    struct stat st {};
    // A buffer shorter than the manifest says would raise SIGBUS on access: refuse it.
    if (fstat(fd, &st) != 0 || static_cast<std::uint64_t>(st.st_size) < manifest.buffer_bytes) {
      throw Error(ErrorCode::kProtocol, "modelcastd: the buffer is smaller than its manifest says");
    }
    void* p = mmap(nullptr, manifest.buffer_bytes, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) throw Error(ErrorCode::kResource, std::string("mapping the model: ") + std::strerror(errno));
    auto mapping = std::make_shared<Mapping>();
    mapping->base = static_cast<const std::byte*>(p);
    mapping->size = manifest.buffer_bytes;
    // Buffers a reloaded daemon dropped are mapped until the Client is gone: a few per model.
    connection->mappings.emplace_back(manifest.buffer_id, mapping);
    return mapping;
  }
};

Client::Client(ClientOptions options) : impl_(std::make_shared<Impl>()) {
  if (options.model.empty()) throw Error(ErrorCode::kInvalidArgument, "sidecar client: no model name");
  impl_->model = options.model;
  impl_->socket_path = options.socket_path;
  auto deadline = std::chrono::steady_clock::now() + options.connect_timeout;
  for (;;) {
    impl_->connection->fd = modelcastd::attach::connect_to(options.socket_path);
    if (impl_->connection->fd >= 0) return;
    if (std::chrono::steady_clock::now() >= deadline) {
      throw Error(ErrorCode::kTransport,
                  "cannot connect to modelcastd at '" + options.socket_path + "': " + std::strerror(errno));
    }
    // Polling for a socket file to appear: there is nothing to wait on before the daemon binds.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

Client::~Client() = default;

View Client::acquire() const { return impl_->request(0, std::chrono::milliseconds(0)); }

View Client::wait_for_version(std::uint64_t version, std::chrono::milliseconds timeout) const {
  return impl_->request(std::max<std::uint64_t>(version, 1), timeout);
}

// ---- View ----

View::View(std::shared_ptr<const detail::AttachedVersion> state) : state_(std::move(state)) {}

std::uint64_t View::version() const { return state_->manifest.version; }
std::int64_t View::step() const { return state_->manifest.step; }
std::uint64_t View::producer_incarnation() const { return state_->manifest.incarnation; }
const std::map<std::string, std::string>& View::metadata() const { return state_->manifest.metadata; }
const std::string& View::source() const { return state_->manifest.source; }
std::size_t View::tensor_count() const { return state_->specs.size(); }

std::vector<TensorView> View::tensors() const {
  std::vector<TensorView> out;
  out.reserve(state_->specs.size());
  for (std::size_t i = 0; i < state_->specs.size(); ++i) out.push_back({&state_->specs[i], state_->data(i)});
  return out;
}

std::optional<TensorView> View::find(std::string_view name) const {
  for (std::size_t i = 0; i < state_->specs.size(); ++i) {
    if (state_->specs[i].name == name) return TensorView{&state_->specs[i], state_->data(i)};
  }
  return std::nullopt;
}

TensorView View::tensor(std::string_view name) const {
  if (auto t = find(name)) return *t;
  throw Error(ErrorCode::kInvalidArgument, "no tensor '" + std::string(name) + "' in version " + std::to_string(version()));
}

}  // namespace modelcast::sidecar
