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

// modelcast.errors' class for each code, and Error for any other, looked up once at import.
// The translator runs inside pybind11's catch (...), where no Python code may run: at interpreter
// exit, a daemon thread that gives up the GIL there (an import, a call into errors.py) is ended
// with pthread_exit, whose unwinding that catch swallows, and the process aborted (or crashed).
// So the translator only sets the class and the constructor's arguments (C calls); Python makes
// the instance when it first looks at the exception, outside every catch. Leaked: the classes
// are used until the interpreter ends.
struct ErrorClasses {
  PyObject* base = nullptr;
  std::map<int, PyObject*> by_code;
};
const ErrorClasses* error_classes = nullptr;

}  // namespace

void bind_errors(py::module_& m) {
  (void)m;
  auto errors = py::module_::import("modelcast.errors");
  auto* classes = new ErrorClasses;
  classes->base = py::object(errors.attr("Error")).release().ptr();
  for (auto item : errors.attr("_BY_CODE").cast<py::dict>()) {
    classes->by_code[item.first.cast<int>()] = py::reinterpret_borrow<py::object>(item.second).release().ptr();
  }
  error_classes = classes;
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      const std::string message = e.what();
      // Not UTF-8 need not be the message's fault (it quotes input): decoded leniently.
      PyObject* text = PyUnicode_DecodeUTF8(message.data(), static_cast<Py_ssize_t>(message.size()), "backslashreplace");
      if (text == nullptr) return;  // that failure (memory) is the exception set
      const int code = static_cast<int>(e.code());
      if (auto it = error_classes->by_code.find(code); it != error_classes->by_code.end()) {
        PyErr_SetObject(it->second, text);  // the subclass's constructor takes the message
        Py_DECREF(text);
      } else if (PyObject* args = Py_BuildValue("(iN)", code, text)) {  // Error(code, message)
        PyErr_SetObject(error_classes->base, args);
        Py_DECREF(args);
      }
    }
  });
}

}  // namespace modelcast::python
