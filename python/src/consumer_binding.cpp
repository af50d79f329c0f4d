// Consumer for Python. Blocking calls (construction, wait_for_version, close) run with the GIL
// released; on_update/on_error run on the consumer's service thread with the GIL taken, and an
// exception they raise is reported (sys.unraisablehook) and counted, never fatal.
#include <pybind11/chrono.h>
#include <pybind11/stl.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gil_released.h"
#include "wait_in_slices.h"
#include "bindings.h"
#include "common/shown_text.h"
#include "errors.h"
#include "modelcast/consumer.h"
#include "deferred_destruction.h"
#include "collectable.h"
#include "py_callback.h"

namespace modelcast::python {
namespace {

double seconds(std::chrono::nanoseconds d) { return std::chrono::duration<double>(d).count(); }

std::optional<ModelView> or_none(ModelView v) {
  if (v.empty()) return std::nullopt;
  return v;
}

class PyConsumer {
 public:
  // `on_update` (a callable taking a ModelView) and `on_error` (taking a modelcast.Error) may
  // be None.
  PyConsumer(ConsumerOptions options, const py::object& on_update, const py::object& on_error)
      : callback_errors_(std::make_shared<std::atomic<std::uint64_t>>(0)) {
    if (!on_update.is_none()) {
      PyCallback cb(on_update.cast<py::function>(), callback_errors_);
      callbacks_.push_back(cb);
      options.on_update = [cb](const ModelView& v) {
        cb.call("modelcast.Consumer on_update callback", [&] { return py::make_tuple(v); });
      };
    }
    if (!on_error.is_none()) {
      PyCallback cb(on_error.cast<py::function>(), callback_errors_);
      callbacks_.push_back(cb);
      options.on_error = [cb](const Error& e) {
        cb.call("modelcast.Consumer on_error callback", [&] { return py::make_tuple(python_error(e.code(), e.what())); });
      };
    }
    GilReleased nogil;
    consumer_ = destroyed_off_callback_threads(std::make_unique<Consumer>(std::move(options)));
  }
  ~PyConsumer() { close(); }

  std::optional<ModelView> acquire() { return with_consumer([](Consumer& c) { return or_none(c.acquire()); }); }
  std::optional<ModelView> wait_for_version(std::uint64_t version, std::chrono::milliseconds timeout) {
    bool first = true;
    return wait_in_slices(timeout, [&](std::chrono::milliseconds slice) {
      if (!first && closed()) throw Error(ErrorCode::kState, "the Consumer was closed during wait_for_version");
      first = false;
      auto view = with_consumer([&](Consumer& c) { return or_none(c.wait_for_version(version, slice)); });
      if (!view && closed()) throw Error(ErrorCode::kState, "the Consumer was closed during wait_for_version");
      return view;
    });
  }
  ConsumerStats stats() { return with_consumer([](Consumer& c) { return c.stats(); }); }
  std::uint64_t callback_errors() const { return callback_errors_->load(); }
  bool closed() const { return consumer_ == nullptr; }
  std::vector<PyCallback>& callbacks() { return callbacks_; }  // collectable.h

  // Stops the consumer; its threads finish with the GIL released (a callback in flight needs
  // it). Views already handed out stay valid. A wait_for_version on another thread returns at
  // once (raising: closed); any other call still running keeps the Consumer alive until it returns.
  void close() {
    std::shared_ptr<Consumer> c = std::move(consumer_);
    if (!c) return;
    c->cancel_waits();
    GilReleased nogil;
    c.reset();
  }

 private:
  template <typename F>
  auto with_consumer(F&& f) -> decltype(f(std::declval<Consumer&>())) {
    std::shared_ptr<Consumer> c = consumer_;
    if (!c) throw Error(ErrorCode::kState, "the Consumer is closed");
    GilReleased nogil;
    struct Drop {
      std::shared_ptr<Consumer>& c;
      ~Drop() { c.reset(); }
    } drop{c};
    return f(*c);
  }

  std::shared_ptr<Consumer> consumer_;
  std::shared_ptr<std::atomic<std::uint64_t>> callback_errors_;
  std::vector<PyCallback> callbacks_;  // shared with the options' functions; seen by the collector
};

}  // namespace

void bind_consumer(py::module_& m) {
  py::class_<TensorConversion>(m, "TensorConversion",
                               "A tensor views hold in another dtype: `tensor` (a name, or '*'), `to` "
                               "('f32', 'f16', 'bf16' or 'f8e4m3') and, for f8e4m3, `fp8_block` elements per "
                               "scale (0: one scale for the tensor).")
      .def(py::init([](std::string tensor, const std::string& to, std::size_t fp8_block) {
             auto d = parse_dtype(to);
             if (!d) throw Error(ErrorCode::kInvalidArgument, "conversion of '" + tensor + "': unknown dtype " + shown_text(to));
             return TensorConversion{std::move(tensor), *d, fp8_block};
           }),
           py::arg("tensor"), py::arg("to"), py::arg("fp8_block") = 0)
      .def_readonly("tensor", &TensorConversion::tensor)
      .def_property_readonly("to", [](const TensorConversion& c) { return std::string(dtype_name(c.to)); })
      .def_readonly("fp8_block", &TensorConversion::fp8_block);

  py::class_<TensorWant>(m, "TensorWant",
                         "What views hold of a tensor: `tensor` (a name, or '*'), `kind` ('whole', "
                         "'shard', 'boxes' or 'nothing'), for a shard part `index` of `count` along `dim` "
                         "(as torch.chunk splits it), for boxes a list of (offset, extent) tuples.")
      .def(py::init([](std::string tensor, const std::string& kind, std::size_t dim, std::size_t index,
                       std::size_t count, const std::vector<std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>>>& boxes) {
             static const std::pair<const char*, TensorWant::Kind> kinds[] = {{"whole", TensorWant::Kind::kWhole},
                                                                               {"shard", TensorWant::Kind::kShard},
                                                                               {"boxes", TensorWant::Kind::kBoxes},
                                                                               {"nothing", TensorWant::Kind::kNothing}};
             for (const auto& [name, k] : kinds) {
               if (kind != name) continue;
               TensorWant want{std::move(tensor), k, dim, index, count, {}};
               for (const auto& [offset, extent] : boxes) want.boxes.push_back({offset, extent});
               return want;
             }
             throw Error(ErrorCode::kInvalidArgument, "the want of '" + tensor + "' is of kind '" + kind +
                                                          "': one of 'whole', 'shard', 'boxes', 'nothing'");
           }),
           py::arg("tensor"), py::arg("kind"), py::arg("dim") = 0, py::arg("index") = 0, py::arg("count") = 1,
           py::arg("boxes") = std::vector<std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>>>{})
      .def_readonly("tensor", &TensorWant::tensor);

  py::class_<ConsumerOptions>(m, "ConsumerOptions", "Mirrors modelcast::ConsumerOptions; durations in seconds.")
      .def(py::init<>())
      .def_readwrite("producer_endpoint", &ConsumerOptions::producer_endpoint)
      .def_readwrite("model_name", &ConsumerOptions::model_name)
      .def_readwrite("consumer_name", &ConsumerOptions::consumer_name)
      .def_readwrite("expected_layout", &ConsumerOptions::expected_layout)
      .def_readwrite("buffers", &ConsumerOptions::buffers)
      .def_readwrite("transports", &ConsumerOptions::transports)
      .def_readwrite("path", &ConsumerOptions::path)
      .def_readwrite("producer_timeout", &ConsumerOptions::producer_timeout)
      .def_readwrite("transfer_timeout", &ConsumerOptions::transfer_timeout)
      .def_readwrite("serve_peers", &ConsumerOptions::serve_peers)
      .def_readwrite("conversions", &ConsumerOptions::conversions)
      .def_readwrite("wants", &ConsumerOptions::wants)
      .def_readwrite("group", &ConsumerOptions::group)
      .def_readwrite("group_size", &ConsumerOptions::group_size)
      .def_readwrite("max_model_bytes", &ConsumerOptions::max_model_bytes)
      .def_readwrite("producer_public_key", &ConsumerOptions::producer_public_key)
      .def_readwrite("key", &ConsumerOptions::key)
      .def_readwrite("key_file", &ConsumerOptions::key_file)
      .def_readwrite("allow_plaintext_remote", &ConsumerOptions::allow_plaintext_remote)
      // Where views' tensors live: "host", or "cuda" on `device` (views then hold device pointers).
      .def_property(
          "memory", [](const ConsumerOptions& o) { return std::string(memory_kind_name(o.memory)); },
          [](ConsumerOptions& o, const std::string& memory) { o.memory = memory_kind(memory, "Consumer"); })
      .def_readwrite("device", &ConsumerOptions::device);

  py::class_<ConsumerStats>(m, "ConsumerStats", "Counters of a Consumer (a snapshot).")
      .def_readonly("current_version", &ConsumerStats::current_version)
      .def_readonly("producer_connected", &ConsumerStats::producer_connected)
      .def_readonly("producer_stopped", &ConsumerStats::producer_stopped)
      .def_readonly("versions_installed", &ConsumerStats::versions_installed)
      .def_readonly("versions_rejected", &ConsumerStats::versions_rejected)
      .def_readonly("transfers_aborted", &ConsumerStats::transfers_aborted)
      .def_readonly("bad_messages", &ConsumerStats::bad_messages)
      .def_readonly("reconnects", &ConsumerStats::reconnects)
      .def_readonly("failed_handshakes", &ConsumerStats::failed_handshakes)
      .def_readonly("bytes_received", &ConsumerStats::bytes_received)
      .def_readonly("arriving_version", &ConsumerStats::arriving_version)
      .def_readonly("arriving_bytes", &ConsumerStats::arriving_bytes)
      .def_readonly("wanted_bytes", &ConsumerStats::wanted_bytes)
      .def_readonly("bytes_relayed", &ConsumerStats::bytes_relayed)
      .def_readonly("relay_faults", &ConsumerStats::relay_faults)
      .def_readonly("group_version", &ConsumerStats::group_version)
      .def_readonly("prepared_version", &ConsumerStats::prepared_version)
      .def_readonly("group_waiting", &ConsumerStats::group_waiting)
      .def_property_readonly("last_update_latency_s",
                             [](const ConsumerStats& s) { return seconds(s.last_update_latency); })
      .def_property_readonly("last_notify_latency_s",
                             [](const ConsumerStats& s) { return seconds(s.last_notify_latency); })
      .def_readonly("last_error", &ConsumerStats::last_error)
      .def_readonly("transport", &ConsumerStats::transport)
      .def_readonly("path", &ConsumerStats::path)
      .def("__repr__", &fields_repr);

  py::class_<PyConsumer>(m, "_Consumer", "Internal: use modelcast.Consumer.", collectable<PyConsumer>())
      .def(py::init<ConsumerOptions, py::object, py::object>(), py::arg("options"), py::arg("on_update"),
           py::arg("on_error"))
      .def("acquire", &PyConsumer::acquire)
      .def("wait_for_version", &PyConsumer::wait_for_version, py::arg("version"), py::arg("timeout"))
      .def("stats", &PyConsumer::stats)
      .def_property_readonly("callback_errors", &PyConsumer::callback_errors)
      .def_property_readonly("closed", &PyConsumer::closed)
      .def("close", &PyConsumer::close);
}

}  // namespace modelcast::python
