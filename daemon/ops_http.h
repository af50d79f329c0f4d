// The operations endpoint (cpp-httplib, Debian's libcpp-httplib-dev): /healthz, /readyz,
// /v1/models and /metrics. Loopback by default; it offers no control, only status.
//
// Threads: httplib's listener thread and its worker pool call the providers; they must be
// thread-safe.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
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
  std::unique_ptr<httplib::Server> server_;
  int port_ = 0;
  std::atomic<bool> listening_ended_{false};  // set by the listener thread as it returns
  std::thread thread_;
};

}  // namespace modelcastd
