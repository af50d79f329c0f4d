// Device memory for Python: the memory-kind names, reading what an object's DLPack capsule
// describes (for registering device tensors that only speak DLPack), and private testing helpers
// that allocate and copy device memory through the library's own DeviceRuntime.
//
// The testing helpers exist because tests run on machines without a GPU, on the simulated device
// (MODELCAST_DEVICE=simulated): there, "device memory" is whatever the library's runtime
// allocated, so a test needs that very runtime to make device tensors and to read device views
// back. They are named _testing_* and are not part of the package's API.
#include <dlpack/dlpack.h>
#include <pybind11/stl.h>

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gil_released.h"
#include "bindings.h"
#include "device/device_runtime.h"
#include "errors.h"
#include "modelcast/error.h"

namespace modelcast::python {

MemoryKind memory_kind(const std::string& name, const std::string& what) {
  if (name == "host") return MemoryKind::kHost;
  if (name == "cuda") return MemoryKind::kCuda;
  throw_invalid(what + ": memory '" + name + "' is not one modelcast knows (expected 'host' or 'cuda')");
}

namespace {

device::DeviceRuntime& testing_runtime() {
  if (auto* runtime = device::device_runtime()) return *runtime;
  throw Error(ErrorCode::kState, "modelcast._testing_* need a device: none in this process (MODELCAST_DEVICE="
                                 "simulated gives one in host memory)");
}

// What the DLTensor inside an unconsumed "dltensor" capsule describes; the capsule stays
// unconsumed (its producer's deleter runs when the capsule is dropped).
py::dict dlpack_info(const py::capsule& capsule) {
  if (!PyCapsule_IsValid(capsule.ptr(), "dltensor"))
    throw_invalid("__dlpack__() returned a capsule that is not an unconsumed 'dltensor' (DLPack 0.x) capsule");
  const auto* managed = static_cast<const DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
  if (!managed) throw py::error_already_set();
  const DLTensor& t = managed->dl_tensor;
  py::dict info;
  info["device_type"] = static_cast<int>(t.device.device_type);
  info["device_id"] = t.device.device_id;
  std::vector<std::int64_t> shape(t.shape, t.shape + t.ndim);
  info["shape"] = shape;
  if (t.strides) {
    info["strides"] = std::vector<std::int64_t>(t.strides, t.strides + t.ndim);
  } else {
    info["strides"] = py::none();  // compact row-major by DLPack's definition
  }
  info["code"] = static_cast<int>(t.dtype.code);
  info["bits"] = static_cast<int>(t.dtype.bits);
  info["lanes"] = static_cast<int>(t.dtype.lanes);
  info["data"] = reinterpret_cast<std::uintptr_t>(t.data) + static_cast<std::uintptr_t>(t.byte_offset);
  return info;
}

// Holds a stream's later work until open(): lets a test queue device work that is certain not to
// have run when publish() is called, so only publish()'s ordering on the stream can pick it up.
class TestingGate {
 public:
  explicit TestingGate(std::uintptr_t stream) : state_(std::make_shared<State>()) {
    testing_runtime().host_function(reinterpret_cast<void*>(stream), [state = state_] {
      std::unique_lock lock(state->mutex);
      state->cv.wait(lock, [&] { return state->open; });
    });
  }
  ~TestingGate() { open(); }  // never leave the stream blocked
  void open() {
    {
      std::lock_guard lock(state_->mutex);
      state_->open = true;
    }
    state_->cv.notify_all();
  }

 private:
  struct State {
    std::mutex mutex;
    std::condition_variable cv;
    bool open = false;
  };
  std::shared_ptr<State> state_;
};

}  // namespace

void bind_device(py::module_& m) {
  m.attr("DLPACK_CPU") = static_cast<int>(kDLCPU);
  m.attr("DLPACK_CUDA") = static_cast<int>(kDLCUDA);
  m.def("_dlpack_info", &dlpack_info, py::arg("capsule"),
        "Internal: {device_type, device_id, shape, strides (None: compact), code, bits, lanes, data} of "
        "an unconsumed DLPack capsule, which stays unconsumed.");
  m.def("_device_of", [](std::uintptr_t address) -> py::object {
    auto* runtime = device::device_runtime();
    if (!runtime) return py::none();
    auto info = runtime->pointer_info(reinterpret_cast<const void*>(address));
    if (info.kind != MemoryKind::kCuda) return py::none();
    return py::int_(info.device);
  }, py::arg("address"),
        "Internal: the device ordinal `address` points into, or None for host memory or without a device.");

  m.def("_testing_device_count", [] { return testing_runtime().device_count(); },
        "Testing only, not API: how many devices the library's device runtime has.");
  m.def("_testing_device_alloc", [](std::size_t nbytes, int device) {
    return reinterpret_cast<std::uintptr_t>(testing_runtime().allocate(device, nbytes));
  }, py::arg("nbytes"), py::arg("device") = 0,
        "Testing only, not API: `nbytes` of device memory on `device` from the library's device runtime "
        "(the simulated one under MODELCAST_DEVICE=simulated); its address. Free with _testing_device_free.");
  m.def("_testing_device_free", [](std::uintptr_t address) {
    testing_runtime().release(reinterpret_cast<void*>(address));
  }, py::arg("address"), "Testing only, not API: releases what _testing_device_alloc returned.");
  m.def("_testing_device_copy", [](std::uintptr_t destination, std::uintptr_t source, std::size_t n) {
    auto& runtime = testing_runtime();
    GilReleased nogil;
    runtime.copy_async(reinterpret_cast<void*>(destination), reinterpret_cast<const void*>(source), n, nullptr);
    runtime.synchronize_stream(nullptr);
  }, py::arg("destination"), py::arg("source"), py::arg("n"),
        "Testing only, not API: copies `n` bytes between addresses, host or device at either end, and "
        "waits for the copy (legacy default stream).");

  m.def("_testing_device_stream", [](int device) {
    return reinterpret_cast<std::uintptr_t>(testing_runtime().create_stream(device));
  }, py::arg("device") = 0, "Testing only, not API: a new stream of the device runtime (its handle).");
  m.def("_testing_destroy_stream", [](std::uintptr_t stream) {
    auto& runtime = testing_runtime();
    GilReleased nogil;
    runtime.destroy_stream(reinterpret_cast<void*>(stream));
  }, py::arg("stream"), "Testing only, not API: destroys a stream once its work is done.");
  m.def("_testing_copy_async", [](std::uintptr_t destination, std::uintptr_t source, std::size_t n,
                                  std::uintptr_t stream) {
    testing_runtime().copy_async(reinterpret_cast<void*>(destination), reinterpret_cast<const void*>(source), n,
                                 reinterpret_cast<void*>(stream));
  }, py::arg("destination"), py::arg("source"), py::arg("n"), py::arg("stream"),
        "Testing only, not API: queues a copy on `stream` without waiting for it.");
  py::class_<TestingGate>(m, "_TestingGate",
                          "Testing only, not API: blocks the work queued on a stream after it until open().")
      .def(py::init<std::uintptr_t>(), py::arg("stream"))
      .def("open", &TestingGate::open);
}

}  // namespace modelcast::python
