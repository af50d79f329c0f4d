// C++ modelcast::Error -> Python modelcast.Error (or the subclass for its code). The classes are
// defined in Python (modelcast/errors.py) so that they can also derive from the matching
// builtin (ValueError, TimeoutError), which pybind11's register_exception cannot express.
#include "errors.h"

#include "bindings.h"

#include <map>

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

namespace {

// modelcast.errors' class and ErrorCode member for each code, and Error for any other, looked up
// once at import. The translator runs inside pybind11's catch (...), where no Python code may
// run: at interpreter exit, a daemon thread that gives up the GIL there (an import, a call into
// errors.py, a constructor) is ended with pthread_exit, whose unwinding that catch swallows, and
// the process aborted (or crashed). So the instance is made with C calls only: the class's
// tp_new (none of them defines __new__) and the attributes their __init__ would set. Handing
// PyErr_SetObject the class and the message instead is not enough: it constructs the instance at
// once inside an except block (and always from Python 3.12). Leaked: used until the end.
struct ErrorClasses {
  PyObject* base = nullptr;
  std::map<int, std::pair<PyObject*, PyObject*>> by_code;  // class, ErrorCode member
};
const ErrorClasses* error_classes = nullptr;

// The exception for `code` and `message`, made without running Python code; null (with the
// failure set) when out of memory.
PyObject* make_error(int code, const std::string& message) {
  // A message quotes input (a file's bytes, a name) that need not be UTF-8.
  PyObject* text = PyUnicode_DecodeUTF8(message.data(), static_cast<Py_ssize_t>(message.size()), "backslashreplace");
  if (text == nullptr) return nullptr;
  const auto known = error_classes->by_code.find(code);
  auto* cls = reinterpret_cast<PyTypeObject*>(known != error_classes->by_code.end() ? known->second.first
                                                                                       : error_classes->base);
  PyObject* code_value = known != error_classes->by_code.end() ? (Py_INCREF(known->second.second), known->second.second)
                                                               : PyLong_FromLong(code);
  PyObject* args = PyTuple_Pack(1, text);
  PyObject* error = args && code_value ? cls->tp_new(cls, args, nullptr) : nullptr;
  const bool ok = error && PyObject_SetAttrString(error, "args", args) == 0 &&
                  PyObject_SetAttrString(error, "code", code_value) == 0 &&
                  PyObject_SetAttrString(error, "message", text) == 0;
  Py_XDECREF(args);
  Py_XDECREF(code_value);
  Py_DECREF(text);
  if (!ok) {
    Py_XDECREF(error);
    return nullptr;
  }
  return error;
}

}  // namespace

void bind_errors(py::module_& m) {
  (void)m;
  auto errors = py::module_::import("modelcast.errors");
  auto* classes = new ErrorClasses;
  classes->base = py::object(errors.attr("Error")).release().ptr();
  auto codes = errors.attr("ErrorCode");
  for (auto item : errors.attr("_BY_CODE").cast<py::dict>()) {
    const int code = item.first.cast<int>();
    classes->by_code[code] = {py::reinterpret_borrow<py::object>(item.second).release().ptr(),
                              py::object(codes(code)).release().ptr()};
  }
  error_classes = classes;
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      if (PyObject* error = make_error(static_cast<int>(e.code()), e.what())) {
        PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error)), error);
        Py_DECREF(error);
      }
    }
  });
}

}  // namespace modelcast::python
