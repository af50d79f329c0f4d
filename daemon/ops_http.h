// The operations endpoint (cpp-httplib, Debian's libcpp-httplib-dev): /healthz, /readyz,
// /v1/models and /metrics. Loopback by default; it offers no control, only status.
//
// Threads: httplib's listener thread and its worker pool call the providers; they must be
// thread-safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace httplib {
class Server;
}

namespace modelcastd {

struct OpsProviders {
  // The HTTP status of /readyz (model empty: the daemon; else that model) and its detail.
  std::function<int(const std::string& model, std::string& detail)> ready;
  std::function<std::string()> models_json;
  std::function<std::string()> metrics_text;
  // What happened to the endpoint itself (it stopped listening, listens again); from the
  // listener thread. May be empty.
  std::function<void(const std::string& message)> warn;
};

// Throws modelcast::Error(kInvalidArgument) naming `listen` (HOST:PORT) when HOST does not
// resolve or is not an address of this machine. Any thread; may ask the resolver.
void check_http_host(const std::string& listen);

class OpsHttp {
 public:
  // Binds HOST:PORT (PORT 0 picks one; see port()) and starts serving. Throws
  // modelcast::Error: kInvalidArgument as check_http_host(), kTransport if the port is taken.
  OpsHttp(const std::string& listen, OpsProviders providers);
  ~OpsHttp();
  OpsHttp(const OpsHttp&) = delete;
  OpsHttp& operator=(const OpsHttp&) = delete;
  int port() const { return port_; }

 private:
  // The listener thread: serves, and binds and listens again (backing off) whenever the listen
  // ends without a stop (cpp-httplib ends it on an accept error other than EMFILE, EINTR and
  // EAGAIN, ENFILE or ECONNABORTED say, and closes the socket: the endpoint was gone for good).
  void serve(const std::string& host, const std::function<void(const std::string&)>& warn);

  std::unique_ptr<httplib::Server> server_;
  int port_ = 0;
  std::mutex mutex_;
  std::condition_variable stopping_changed_;
  bool stopping_ = false;                     // under mutex_: the destructor runs
  std::atomic<bool> listening_ended_{false};  // set by the listener thread as it returns
  std::thread thread_;
};

}  // namespace modelcastd
