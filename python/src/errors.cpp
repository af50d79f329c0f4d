// C++ modelcast::Error -> Python modelcast.Error (or the subclass for its code). The classes are
// defined in Python (modelcast/errors.py) so that they can also derive from the matching
// builtin (ValueError, TimeoutError), which pybind11's register_exception cannot express.
#include "errors.h"

#include "bindings.h"

namespace modelcast::python {

py::object python_error(ErrorCode code, const std::string& message) {
  // A message quotes input (a file's bytes, a name) that need not be UTF-8: decoded strictly, it
  // became a UnicodeDecodeError that lost the error and what it named.
  auto text = py::reinterpret_steal<py::str>(
      PyUnicode_DecodeUTF8(message.data(), static_cast<Py_ssize_t>(message.size()), "backslashreplace"));
  if (!text) throw py::error_already_set();
  return py::module_::import("modelcast.errors").attr("error_for")(static_cast<int>(code), text);
}

void throw_invalid(const std::string& message) { throw Error(ErrorCode::kInvalidArgument, message); }

void bind_errors(py::module_& m) {
  (void)m;
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      py::object exc = python_error(e.code(), e.what());
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
    }
  });
}

}  // namespace modelcast::python
