// A Python callable that library threads may call and destroy without holding the GIL.
//
// Copies share one reference (a shared_ptr), so copying it into the library's std::function
// touches no Python reference count; the last copy drops the reference under the GIL. A call
// takes the GIL, and an exception the callable raises is reported through sys.unraisablehook
// (like one raised in __del__) and counted, never propagated into the library's thread.
#pragma once

#include <pybind11/pybind11.h>

#include <atomic>
#include <memory>
#include <utility>

#include "gil_released.h"

namespace modelcast::python {

namespace py = pybind11;

// True on a library thread while it runs one of our callbacks (PyCallback::call).
inline thread_local bool in_library_callback = false;

class PyCallback {
 public:
  PyCallback() = default;
  // Needs the GIL. `errors` (may be null) is incremented for every exception the callable raises.
  PyCallback(py::function fn, std::shared_ptr<std::atomic<std::uint64_t>> errors)
      : fn_(new py::function(std::move(fn)), &release), errors_(std::move(errors)) {}

  explicit operator bool() const { return fn_ != nullptr; }

  // The callable, for the garbage collector to see (null when none or cleared). Needs the GIL.
  PyObject* object() const { return fn_ ? fn_->ptr() : nullptr; }
  // Drops the callable for every copy (they share it): later calls do nothing. Needs the GIL; the
  // garbage collector's way to break a cycle through it (collectable.h).
  void clear() {
    if (!fn_) return;
    py::function dropped = std::move(*fn_);  // *fn_ is left empty; the reference goes here
  }

  // Calls the callable with `make_args()` (run under the GIL, returns a py::tuple). `where` names
  // the callback in the report of an exception. Any thread; takes the GIL.
  template <typename MakeArgs>
  void call(const char* where, MakeArgs&& make_args) const {
    if (!fn_ || !python_alive()) return;
    struct Mark {
      bool was = in_library_callback;
      Mark() { in_library_callback = true; }
      ~Mark() { in_library_callback = was; }
    } mark;
    py::gil_scoped_acquire gil;
    if (!*fn_) return;  // cleared by the garbage collector
    try {
      py::object result = (*fn_)(*make_args());
      // An async function behind a decorator passes the check at construction
      // (check_callback): what it returns is a coroutine nothing awaits, so its body never ran.
      // Closed (no "never awaited" warning) and reported as the callback's error.
      if (!result.is_none() && py::hasattr(result, "__await__")) {
        if (py::hasattr(result, "close")) result.attr("close")();
        PyErr_SetString(PyExc_TypeError,
                        "the callback returned an awaitable (an async function, perhaps behind a decorator), which "
                        "nothing awaits: its body never ran. Callbacks run on a library thread with no event loop: "
                        "pass a plain function (it may hand its argument to your loop with "
                        "loop.call_soon_threadsafe)");
        throw py::error_already_set();
      }
    } catch (py::error_already_set& e) {
      if (errors_) errors_->fetch_add(1);
      e.discard_as_unraisable(where);
    } catch (const std::exception& e) {  // argument conversion failed in C++
      if (errors_) errors_->fetch_add(1);
      PyErr_SetString(PyExc_RuntimeError, e.what());
      py::error_already_set err;
      err.discard_as_unraisable(where);
    }
  }

 private:
  static void release(py::function* fn) {
    GilReleased::drop(std::move(*fn));
    delete fn;
  }

  std::shared_ptr<py::function> fn_;
  std::shared_ptr<std::atomic<std::uint64_t>> errors_;
};

}  // namespace modelcast::python
