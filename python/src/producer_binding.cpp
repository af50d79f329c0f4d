// Producer for Python. Tensors are registered by address together with the Python object that
// owns the memory (a NumPy array or a torch tensor, checked by modelcast/producer.py); the
// object is kept referenced for as long as the Producer, so publish() always reads live memory.
// Every call into the library runs with the GIL released: the service thread may need the GIL
// for on_delivery while the library holds a lock the calling thread waits for.
#include <pybind11/chrono.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gil_released.h"
#include "wait_in_slices.h"
#include "bindings.h"
#include "common/shown_text.h"
#include "errors.h"
#include "modelcast/producer.h"
#include "collectable.h"
#include "deferred_destruction.h"
#include "py_callback.h"

namespace modelcast::python {
namespace {

double seconds(std::chrono::nanoseconds d) { return std::chrono::duration<double>(d).count(); }

// The Producer together with the Python objects whose memory it reads, so that neither outlives
// the other, whichever thread drops the last reference. Must be destroyed without the GIL held:
// stopping the Producer waits for its service thread, which may be waiting for the GIL.
struct Registered {
  std::unique_ptr<Producer> producer;
  std::vector<py::object> owners;  // changed under the GIL only

  ~Registered() {
    producer.reset();
    for (auto& o : owners) GilReleased::drop(std::move(o));
  }
};

// Where a registered NumPy array's or torch tensor's memory is: its address, size and dtype. For
// a NumPy array `size` counts bytes; for a torch tensor elements (numel: with the dtype unchanged
// that is the same bytes, and element_size() would be one more call per tensor and publish).
struct Storage {
  std::uintptr_t address = 0;
  std::size_t size = 0;
  py::object dtype;

  // Under the GIL. `torch`: a torch tensor (its methods are asked); otherwise a NumPy array
  // (read from the array's struct, without building its __array_interface__ dict).
  static Storage of(const py::handle& object, bool torch) {
    if (torch) {
      // CPython's calls with interned names: pybind11's attr("...")() made a new name and an
      // argument tuple per call, four times slower than the same loop in Python.
      static PyObject* const data_ptr = PyUnicode_InternFromString("data_ptr");
      static PyObject* const numel = PyUnicode_InternFromString("numel");
      static PyObject* const dtype = PyUnicode_InternFromString("dtype");
      Storage s;
      s.address = call(object, data_ptr).cast<std::uintptr_t>();
      s.size = call(object, numel).cast<std::size_t>();
      s.dtype = py::reinterpret_steal<py::object>(PyObject_GetAttr(object.ptr(), dtype));
      if (!s.dtype) throw py::error_already_set();
      return s;
    }
    const auto array = py::reinterpret_borrow<py::array>(object);
    return Storage{reinterpret_cast<std::uintptr_t>(array.data()), static_cast<std::size_t>(array.nbytes()),
                   array.dtype()};
  }
  // The bytes this storage spans, `object` being what it was read from (asked for a torch tensor).
  std::size_t nbytes(const py::handle& object, bool torch) const {
    static PyObject* const element_size = PyUnicode_InternFromString("element_size");
    return torch ? size * call(object, element_size).cast<std::size_t>() : size;
  }
  bool same(const Storage& other) const {
    return address == other.address && size == other.size && (dtype.is(other.dtype) || dtype.equal(other.dtype));
  }

 private:
  static py::object call(const py::handle& object, PyObject* method) {
    auto result = py::reinterpret_steal<py::object>(PyObject_CallMethodNoArgs(object.ptr(), method));
    if (!result) throw py::error_already_set();
    return result;
  }
};

class PyProducer {
 public:
  // Binds the endpoint and starts the threads. `on_delivery` (None or a callable taking a
  // Delivery) runs on the service thread with the GIL taken.
  PyProducer(ProducerOptions options, const py::object& on_delivery)
      : callback_errors_(std::make_shared<std::atomic<std::uint64_t>>(0)) {
    if (!on_delivery.is_none()) {
      PyCallback cb(on_delivery.cast<py::function>(), callback_errors_);
      callbacks_.push_back(cb);
      options.on_delivery = [cb](const Delivery& d) {
        cb.call("modelcast.Producer on_delivery callback", [&] { return py::make_tuple(d); });
      };
    }
    auto state = destroyed_off_callback_threads(std::make_unique<Registered>());
    {
      GilReleased nogil;
      state->producer = std::make_unique<Producer>(std::move(options));
    }
    state_ = std::move(state);
  }
  ~PyProducer() { close(); }

  // Registers `nbytes` at `address` as tensor `name` and keeps `owner` (the object owning that
  // memory) referenced for as long as the Producer exists. `memory` is "host" or "cuda" (then
  // `address` is a device pointer on `device`); the library checks that the memory is there.
  void register_memory(const std::string& name, const std::string& dtype, std::vector<std::int64_t> shape,
                       std::uintptr_t address, std::size_t nbytes, py::object owner, const std::string& memory,
                       int device, std::vector<std::int64_t> global_shape, std::vector<std::int64_t> global_offset) {
    auto d = parse_dtype(dtype);
    if (!d) throw_invalid("tensor '" + name + "': unknown dtype " + shown_text(dtype));
    TensorRef ref{{name, *d, std::move(shape)}, reinterpret_cast<const void*>(address)};
    ref.spec.memory = memory_kind(memory, "tensor '" + name + "'");
    ref.global_shape = std::move(global_shape);
    ref.global_offset = std::move(global_offset);
    ref.spec.device = device;
    if (ref.spec.memory == MemoryKind::kCuda && device < 0)
      throw_invalid("tensor '" + name + "': device ordinal " + std::to_string(device) + " is negative");
    // A shape whose size overflows (or has a negative extent) is refused by register_tensor
    // naming the shape; comparing its wrapped size here would quote a wrong number.
    const auto shaped = ref.spec.checked_size_bytes();
    if (shaped && *shaped != nbytes)
      throw_invalid("tensor '" + name + "': " + std::to_string(nbytes) + " bytes of memory for a shape and dtype of " +
                    std::to_string(*shaped) + " bytes");
    // Our own reference, so the owner is recorded even if close() runs meanwhile on another thread.
    struct Hold {
      std::shared_ptr<Registered> state;
      ~Hold() noexcept(false) { release_without_gil(std::move(state)); }  // see GilReleased
    } hold{state_};
    with_producer([&](Producer& p) { p.register_tensor(ref); });
    hold.state->owners.push_back(std::move(owner));  // under the GIL again
  }

  // Remembers where `tensor` (a NumPy array, or a torch tensor when `torch`) keeps its memory now,
  // for moved_storage(). Under the GIL.
  void watch(const std::string& name, py::object tensor, bool torch) {
    auto storage = Storage::of(tensor, torch);
    const std::size_t nbytes = storage.nbytes(tensor, torch);
    watched_->push_back({name, std::move(tensor), torch, std::move(storage), nbytes});
  }

  // The first watched tensor whose memory is no longer where it was registered, as (name, (address,
  // nbytes, dtype) then, the same now); None when none moved. Under the GIL.
  py::object moved_storage() const {
    const auto watched = watched_;  // a tensor's own Python code (a subclass) may let close() run meanwhile
    for (const auto& w : *watched) {
      auto now = Storage::of(w.object, w.torch);
      if (!now.same(w.storage)) {
        return py::make_tuple(w.name, py::make_tuple(w.storage.address, w.nbytes, w.storage.dtype),
                              py::make_tuple(now.address, now.nbytes(w.object, w.torch), now.dtype));
      }
    }
    return py::none();
  }

  // `stream` and `event` are raw cudaStream_t / cudaEvent_t values (0: none), see DeviceOrder.
  PublishTicket publish(std::int64_t step, const Metadata& metadata, std::uintptr_t stream, std::uintptr_t event) {
    DeviceOrder order{reinterpret_cast<void*>(stream), reinterpret_cast<void*>(event)};
    return with_producer([&](Producer& p) { return p.publish(step, metadata, order); });
  }
  void prepare() { with_producer([](Producer& p) { p.prepare(); }); }
  bool wait_for_consumers(std::size_t count, std::chrono::milliseconds timeout) {
    bool first = true;
    return wait_in_slices(timeout, [&](std::chrono::milliseconds slice) {
      if (!first && closed()) throw Error(ErrorCode::kState, "the Producer was closed during wait_for_consumers");
      first = false;
      bool joined = with_producer([&](Producer& p) { return p.wait_for_consumers(count, slice); });
      if (!joined && closed()) throw Error(ErrorCode::kState, "the Producer was closed during wait_for_consumers");
      return joined;
    });
  }
  ProducerStats stats() { return with_producer([](Producer& p) { return p.stats(); }); }
  std::string control_endpoint() { return with_producer([](Producer& p) { return p.control_endpoint(); }); }
  std::uint64_t callback_errors() const { return callback_errors_->load(); }
  std::vector<PyCallback>& callbacks() { return callbacks_; }  // collectable.h
  bool closed() const { return state_ == nullptr; }

  // Stops the producer and drops the owners. A wait_for_consumers on another thread returns at
  // once (raising: closed); any other call still running (a publish()) keeps both alive until it
  // returns, so it never reads released memory.
  void close() {
    if (state_) state_->producer->cancel_waits();
    release_without_gil(std::move(state_));
    // The GIL is held (close() is called from Python or the object's deallocation); a check
    // running on another thread keeps the list it reads.
    watched_ = std::make_shared<std::vector<Watched>>();
  }

 private:
  static void release_without_gil(std::shared_ptr<Registered> state) {
    if (!state) return;
    GilReleased nogil;
    state.reset();
  }

  // Runs f on the producer with the GIL released; the last reference, if it is ours, is also
  // dropped without the GIL.
  template <typename F>
  auto with_producer(F&& f) -> decltype(f(std::declval<Producer&>())) {
    std::shared_ptr<Registered> state = state_;
    if (!state) throw Error(ErrorCode::kState, "the Producer is closed");
    GilReleased nogil;
    struct Drop {
      std::shared_ptr<Registered>& s;
      ~Drop() { s.reset(); }
    } drop{state};
    return f(*state->producer);
  }

  std::shared_ptr<Registered> state_;
  std::shared_ptr<std::atomic<std::uint64_t>> callback_errors_;
  std::vector<PyCallback> callbacks_;  // shared with the options' function; seen by the collector
  // The registered objects whose memory can be replaced under the same object: torch's `.data =
  // ...`, `.half()` assigned back or `.set_()`, NumPy's resize(refcheck=False); either may free the
  // old memory, which publish() would go on reading. Checked before every publish here, not in
  // Python: a 64 MiB model of 20,000 NumPy arrays spent 95 ms a publish there (NumPy builds a dict
  // per array for its address) and of torch tensors 43 ms, against 2 and 13 ms here and a 10 ms
  // memcpy of the model (bench/run.sh pypublish). Changed and read under the GIL only; watch()
  // runs before the first publish, close() replaces the list.
  struct Watched {
    std::string name;
    py::object object;
    bool torch = false;
    Storage storage;
    std::size_t nbytes = 0;  // what storage spanned at registration
  };
  std::shared_ptr<std::vector<Watched>> watched_ = std::make_shared<std::vector<Watched>>();
};

}  // namespace

void bind_producer(py::module_& m) {
  py::class_<ProducerOptions>(m, "ProducerOptions", "Mirrors modelcast::ProducerOptions; durations in seconds.")
      .def(py::init<>())
      .def_readwrite("model_name", &ProducerOptions::model_name)
      .def_readwrite("control_endpoint", &ProducerOptions::control_endpoint)
      .def_readwrite("snapshot_slots", &ProducerOptions::snapshot_slots)
      .def_readwrite("integrity", &ProducerOptions::integrity)
      .def_readwrite("first_version", &ProducerOptions::first_version)
      .def_readwrite("lease_timeout", &ProducerOptions::lease_timeout)
      .def_readwrite("heartbeat_interval", &ProducerOptions::heartbeat_interval)
      .def_readwrite("transfer_chunk_bytes", &ProducerOptions::transfer_chunk_bytes)
      .def_readwrite("relay_fanout", &ProducerOptions::relay_fanout)
      .def_readwrite("rank", &ProducerOptions::rank)
      .def_readwrite("rank_count", &ProducerOptions::rank_count)
      .def_readwrite("rank_endpoints", &ProducerOptions::rank_endpoints)
      .def_readwrite("run_id", &ProducerOptions::run_id)
      .def_readwrite("device_stage_bytes", &ProducerOptions::device_stage_bytes)
      .def_readwrite("max_consumers", &ProducerOptions::max_consumers)
      .def_readwrite("transports", &ProducerOptions::transports)
      .def_readwrite("key", &ProducerOptions::key)
      .def_readwrite("key_file", &ProducerOptions::key_file)
      .def_readwrite("allowed_consumer_keys", &ProducerOptions::allowed_consumer_keys)
      .def_readwrite("allow_any_consumer", &ProducerOptions::allow_any_consumer)
      .def_readwrite("allow_plaintext_remote", &ProducerOptions::allow_plaintext_remote)
      // ProducerOptions::persist, flattened so that they are plain keyword options in Python.
      .def_property(
          "persist_directory", [](const ProducerOptions& o) { return o.persist.directory; },
          [](ProducerOptions& o, std::string directory) { o.persist.directory = std::move(directory); })
      .def_property(
          "persist_every", [](const ProducerOptions& o) { return o.persist.every; },
          [](ProducerOptions& o, std::uint64_t every) { o.persist.every = every; })
      .def_property(
          "persist_keep", [](const ProducerOptions& o) { return o.persist.keep; },
          [](ProducerOptions& o, std::size_t keep) { o.persist.keep = keep; });

  py::class_<PublishTicket>(m, "PublishTicket", "What publish() returns once the snapshot is taken.")
      .def_readonly("version", &PublishTicket::version)
      .def_readonly("step", &PublishTicket::step)
      .def_property_readonly("stall_s", [](const PublishTicket& t) { return seconds(t.stall); })
      .def_readonly("bytes", &PublishTicket::bytes)
      .def("__repr__", [](const PublishTicket& t) {
        return "PublishTicket(version=" + std::to_string(t.version) + ", step=" + std::to_string(t.step) + ")";
      });

  py::class_<Delivery>(m, "Delivery", "A consumer has a version in memory, verified.")
      .def_readonly("version", &Delivery::version)
      .def_readonly("consumer", &Delivery::consumer)
      .def_property_readonly("since_publish_s", [](const Delivery& d) { return seconds(d.since_publish); })
      .def_readonly("bytes", &Delivery::bytes)
      .def_readonly("relay", &Delivery::relay)
      .def("__repr__", &fields_repr);

  py::class_<ProducerStats>(m, "ProducerStats", "Counters of a Producer (a snapshot).")
      .def_readonly("latest_version", &ProducerStats::latest_version)
      .def_readonly("versions_published", &ProducerStats::versions_published)
      .def_readonly("deliveries", &ProducerStats::deliveries)
      .def_readonly("failed_deliveries", &ProducerStats::failed_deliveries)
      .def_readonly("leases_expired", &ProducerStats::leases_expired)
      .def_readonly("connections_opened", &ProducerStats::connections_opened)
      .def_readonly("connections_cut", &ProducerStats::connections_cut)
      .def_readonly("sends_abandoned", &ProducerStats::sends_abandoned)
      .def_readonly("bad_messages", &ProducerStats::bad_messages)
      .def_readonly("refused_peers", &ProducerStats::refused_peers)
      .def_readonly("refused_joins", &ProducerStats::refused_joins)
      .def_readonly("bytes_sent", &ProducerStats::bytes_sent)
      .def_readonly("relayed_deliveries", &ProducerStats::relayed_deliveries)
      .def_readonly("bytes_relayed", &ProducerStats::bytes_relayed)
      .def_readonly("relay_faults", &ProducerStats::relay_faults)
      .def_readonly("consumers", &ProducerStats::consumers)
      .def_readonly("fetches_in_flight", &ProducerStats::fetches_in_flight)
      .def_readonly("failed_snapshots", &ProducerStats::failed_snapshots)
      .def_readonly("host_copies", &ProducerStats::host_copies)
      .def_readonly("snapshot_bytes_copied", &ProducerStats::snapshot_bytes_copied)
      .def_property_readonly("last_stall_s", [](const ProducerStats& s) { return seconds(s.last_stall); })
      .def_readonly("transport", &ProducerStats::transport)
      .def_readonly("persisted_versions", &ProducerStats::persisted_versions)
      .def_readonly("persist_failures", &ProducerStats::persist_failures)
      .def_readonly("persist_skipped", &ProducerStats::persist_skipped)
      .def_readonly("persist_last_error", &ProducerStats::persist_last_error)
      .def("__repr__", &fields_repr);

  py::class_<PyProducer>(m, "_Producer", "Internal: use modelcast.Producer.", collectable<PyProducer>())
      .def(py::init<ProducerOptions, py::object>(), py::arg("options"), py::arg("on_delivery"))
      .def("register_memory", &PyProducer::register_memory, py::arg("name"), py::arg("dtype"), py::arg("shape"),
           py::arg("address"), py::arg("nbytes"), py::arg("owner"), py::arg("memory") = "host",
           py::arg("device") = 0, py::arg("global_shape") = std::vector<std::int64_t>{},
           py::arg("global_offset") = std::vector<std::int64_t>{})
      .def("publish", &PyProducer::publish, py::arg("step"), py::arg("metadata"), py::arg("stream") = 0,
           py::arg("event") = 0)
      .def("watch", &PyProducer::watch, py::arg("name"), py::arg("tensor"), py::arg("torch"))
      .def("moved_storage", &PyProducer::moved_storage)
      .def("prepare", &PyProducer::prepare)
      .def("wait_for_consumers", &PyProducer::wait_for_consumers, py::arg("count"), py::arg("timeout"))
      .def("stats", &PyProducer::stats)
      .def("control_endpoint", &PyProducer::control_endpoint)
      .def_property_readonly("callback_errors", &PyProducer::callback_errors)
      .def_property_readonly("closed", &PyProducer::closed)
      .def("close", &PyProducer::close);
}

}  // namespace modelcast::python
