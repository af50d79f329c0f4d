// The GIL released for a call into the library, and Python references dropped where taking the
// GIL cannot kill the process.
//
// A thread that takes the GIL back while the interpreter finalizes (a daemon thread whose
// publish() or wait returns as the program exits) is ended by Python with pthread_exit, an
// unwind. Out of a noexcept destructor that unwind std::terminate()s the whole process: it did
// out of py::gil_scoped_release's, and out of the destructors that took the GIL to drop the
// arrays a Producer kept or a callback. So the GIL is taken back here in a destructor that lets
// the unwind through (pybind11 passes it on), and references a destructor must drop wait for
// that, on threads that released the GIL here.
#pragma once

#include <pybind11/pybind11.h>

#include <utility>
#include <vector>

namespace modelcast::python {

namespace py = pybind11;

// True while Python code may run; false once the interpreter is shutting down (a library thread
// must then neither call into Python nor touch reference counts).
inline bool python_alive() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsInitialized() && !Py_IsFinalizing();
#else
  return Py_IsInitialized() && !_Py_IsFinalizing();
#endif
}

// As py::gil_scoped_release (also as a py::call_guard); one thread's scopes nest.
class GilReleased {
 public:
  GilReleased() : state_(PyEval_SaveThread()) { ++depth_; }
  // noexcept(false): see above; nothing else is thrown here.
  ~GilReleased() noexcept(false) {
    PyEval_RestoreThread(state_);
    if (--depth_ == 0 && !parked_.empty()) std::vector<py::object>(std::move(parked_)).clear();
  }
  GilReleased(const GilReleased&) = delete;
  GilReleased& operator=(const GilReleased&) = delete;

  // Drops `object`, a reference this thread may hold without the GIL (a destructor's): when a
  // GilReleased of this thread takes the GIL back, if there is one; at once under the GIL
  // otherwise (a library thread: those end before the interpreter finalizes). After
  // finalizing began, the reference is left alone.
  static void drop(py::object object) {
    if (!python_alive()) {
      object.release();
      return;
    }
    if (depth_ > 0) {
      parked_.push_back(std::move(object));
      return;
    }
    py::gil_scoped_acquire gil;
    object = py::object();
  }

 private:
  PyThreadState* state_;
  static inline thread_local int depth_ = 0;
  static inline thread_local std::vector<py::object> parked_;  // this thread's, dropped with the GIL
};

}  // namespace modelcast::python
