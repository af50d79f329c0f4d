#include "daemon/ops_http.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include <httplib.h>

#include "common/shown_text.h"
#include "daemon/config.h"
#include "daemon/ops_connection.h"
#include "daemon/ops_task_queue.h"
#include "modelcast/error.h"

namespace modelcastd {

namespace {

std::string host_of(const std::string& listen) {
  std::string host = listen.substr(0, listen.rfind(':'));
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return host;
}

}  // namespace

// httplib's bind says only that it failed, so an unknown name or another machine's address read
// as "is another process listening there?"; resolving and binding port 0 here says which.
void check_http_host(const std::string& listen) {
  const std::string host = host_of(listen);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(host.c_str(), "0", &hints, &found); rc != 0) {
    throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument,
                           "http listen address '" + listen + "': host '" + host + "' does not resolve (" + gai_strerror(rc) + ")");
  }
  std::string why;
  bool bound = false;
  for (addrinfo* a = found; a != nullptr && !bound; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    bound = bind(fd, a->ai_addr, a->ai_addrlen) == 0;
    if (!bound) why = std::strerror(errno);
    close(fd);
  }
  freeaddrinfo(found);
  if (!bound) {
    throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument, "http listen address '" + listen + "': cannot bind host '" +
                                                                       host + "' (" + why + "; is it an address of this machine?)");
  }
}

OpsHttp::OpsHttp(const std::string& listen, OpsProviders providers) : server_(std::make_unique<BoundedServer>()) {
  const std::string host = host_of(listen);
  check_http_host(listen);
  auto parsed = listen_port(listen);
  if (!parsed) {
    throw modelcast::Error(modelcast::ErrorCode::kInvalidArgument,
                           "http listen address '" + listen + "' has no port in 0-65535");
  }
  int port = *parsed;
  server_->Get("/healthz", [](const httplib::Request&, httplib::Response& res) { res.set_content("ok\n", "text/plain"); });
  server_->Get("/readyz", [ready = providers.ready](const httplib::Request& req, httplib::Response& res) {
    // A probe with an unset variable (?model=) or a misspelt parameter (?modle=x) was answered
    // for the daemon as a whole, and passed while its model was not served.
    for (const auto& [name, value] : req.params) {
      if (name != "model") {
        res.status = 400;
        std::string why = "/readyz takes one parameter, model=NAME; got ";
        why.append(modelcast::shown_text(name)).append("\n");
        res.set_content(why, "text/plain");
        return;
      }
      if (value.empty()) {
        res.status = 400;
        res.set_content("/readyz?model= names no model: give model=NAME, or no parameter for the daemon as a whole\n", "text/plain");
        return;
      }
    }
    if (req.params.count("model") > 1) {
      res.status = 400;
      res.set_content("/readyz takes one model=NAME\n", "text/plain");
      return;
    }
    std::string detail;
    res.status = ready(req.get_param_value("model"), detail);
    res.set_content(detail + "\n", "text/plain");
  });
  server_->Get("/v1/models", [models = providers.models_json](const httplib::Request&, httplib::Response& res) {
    res.set_content(models(), "application/json");
  });
  server_->Get("/metrics", [metrics = providers.metrics_text](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics(), "text/plain; version=0.0.4");
  });
  // Read-only endpoints: another method was a 400 or 404 with no body, which names nothing.
  static constexpr const char* kPaths = "/healthz, /readyz[?model=NAME], /v1/models, /metrics";
  // Said in every answer, the 416 cpp-httplib gives a Range it cannot parse included: it tells
  // each HEAD "Accept-Ranges: bytes" before this handler runs, and set_header adds a second
  // value rather than replacing the first.
  server_->set_post_routing_handler([](const httplib::Request&, httplib::Response& res) {
    res.headers.erase("Accept-Ranges");
    res.set_header("Accept-Ranges", "none");
  });
  server_->set_pre_routing_handler([](const httplib::Request& req, httplib::Response& res) {
    // cpp-httplib 0.11 serves every range asked for, unmerged: 2600 ranges of /metrics in an
    // 8 KB request made a 12 MB answer, and a few such requests at once took a gigabyte. These
    // answers are small and made anew each time: no client needs a part of one, so a Range is
    // ignored and the whole answer sent, as RFC 9110 lets a server do (a 416 is only for ranges
    // that miss the answer, and "curl -r 0-" got one). The request is the server's own object,
    // handed over const: clearing its ranges is what makes cpp-httplib send the whole. A Range it
    // cannot parse (another unit, a reversed range) it answers 416 itself, before any handler.
    const_cast<httplib::Request&>(req).ranges.clear();
    if (req.method == "GET" || req.method == "HEAD") return httplib::Server::HandlerResponse::Unhandled;
    res.status = 405;
    res.set_header("Allow", "GET, HEAD");
    res.set_content("modelcastd's ops endpoints answer GET and HEAD only: " + std::string(kPaths) + "\n", "text/plain");
    return httplib::Server::HandlerResponse::Handled;
  });
  server_->set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (res.status == 404 && res.body.empty()) {
      res.set_content(std::string("no such path; modelcastd serves ") + kPaths + "\n", "text/plain");
    }
  });
  // cpp-httplib gives each connection a pooled thread while it is served: 8 threads by default,
  // so 8 idle connections from anyone who can reach the port kept probes unanswered. Probes and
  // scrapes send their request at once and are answered in microseconds; BoundedServer gives a
  // connection a second from its accept for its request (64 KiB at most) and a second for its
  // answer, so 64 threads (idle, they cost a stack each) take a flood of that many connections
  // a second to starve, and what queues behind them is closed once its second is gone
  // (OpsTaskQueue). A body is never needed (GET and HEAD only): the cap bounds it as well.
  server_->new_task_queue = [] { return new OpsTaskQueue(64); };
  server_->set_payload_max_length(ConnectionLimits{}.request_bytes);
  // cpp-httplib sets SO_REUSEPORT by default: a second daemon on the same address would then
  // bind too and take every other scrape. SO_REUSEADDR alone lets a restart rebind at once
  // (past TIME_WAIT) and refuses an address another process listens on.
  server_->set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  port_ = port == 0 ? server_->bind_to_any_port(host) : (server_->bind_to_port(host, port) ? port : -1);
  if (port_ <= 0) {
    throw modelcast::Error(modelcast::ErrorCode::kTransport,
                           "cannot serve HTTP at '" + listen + "' (is another process listening there?)");
  }
  thread_ = std::thread([this, host, warn = providers.warn] {
    serve(host, warn);
    listening_ended_ = true;
  });
}

void OpsHttp::serve(const std::string& host, const std::function<void(const std::string&)>& warn) {
  constexpr std::chrono::milliseconds kFirstRetry{100}, kLongestRetry{5000};
  const std::string where = host + ":" + std::to_string(port_);
  for (;;) {
    server_->listen_after_bind();
    const int why = errno;  // the accept's, as cpp-httplib left it (it closed the socket since)
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
    }
    if (warn) warn("ops endpoint at " + where + " stopped listening (accept: " + std::strerror(why) + "); listening again");
    // At once, then backing off while the bind fails (the descriptors that ENFILE said were
    // lacking may take a while to come back).
    auto retry = kFirstRetry;
    bool said = false;
    while (!server_->bind_to_port(host, port_)) {
      if (warn && !said) warn("ops endpoint at " + where + " cannot bind again yet; trying every few seconds");
      said = true;
      std::unique_lock lock(mutex_);
      if (stopping_changed_.wait_for(lock, retry, [&] { return stopping_; })) return;
      retry = std::min(retry * 2, kLongestRetry);
    }
    if (warn) warn("ops endpoint at " + where + " listens again");
  }
}

OpsHttp::~OpsHttp() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  stopping_changed_.notify_all();
  // httplib's stop() does nothing until the listener runs (it checks is_running(), which the
  // listener thread sets as it starts): stopped any earlier, the listener would then run for
  // ever and the join below hang. So each listen the thread starts is stopped once it runs
  // (one may start after stopping_ was set: the thread checked it just before); a listener
  // that failed to start, or a thread waiting to bind again, ends on its own.
  bool stopped_this_listen = false;
  while (!listening_ended_) {
    if (!server_->is_running()) {
      stopped_this_listen = false;
    } else if (!stopped_this_listen) {
      server_->stop();
      stopped_this_listen = true;
    }
    std::this_thread::yield();
  }
  thread_.join();
}

}  // namespace modelcastd
