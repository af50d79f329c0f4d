#include "arguments.h"

#include "errors.h"

namespace modelcast::python {
namespace {

std::string type_name(const py::handle& value) { return Py_TYPE(value.ptr())->tp_name; }

std::string repr_of(const py::handle& value) {
  std::string text = py::repr(value).cast<std::string>();
  return text.size() > 60 ? text.substr(0, 57) + "..." : text;
}

// A truth value in any of its forms (bool, NumPy's bool_, a boolean 0-d array or tensor), which
// operator.index takes as 0 or 1; as _service.py's is_boolean.
bool is_boolean(const py::handle& value) {
  if (PyBool_Check(value.ptr())) return true;
  try {
    if (!py::hasattr(value, "dtype")) return false;
    const auto dtype = py::str(value.attr("dtype")).cast<std::string>();
    return dtype == "bool" || dtype == "torch.bool";
  } catch (const py::error_already_set&) {
    return false;  // a dtype that cannot be read: not a boolean array
  }
}

// operator.index(value); InvalidArgumentError naming `what` where it refuses it with a TypeError
// (a float array or tensor, an array of several elements), which named nothing.
py::object as_index(const py::handle& value, const std::string& what) {
  auto number = py::reinterpret_steal<py::object>(PyNumber_Index(value.ptr()));
  if (number) return number;
  if (!PyErr_ExceptionMatches(PyExc_TypeError)) throw py::error_already_set();
  PyErr_Clear();
  throw_invalid(what + " must be an integer, got " + repr_of(value) + " (" + type_name(value) + ")");
}

}  // namespace

std::string text_argument(const py::handle& value, const std::string& what) {
  if (!PyUnicode_Check(value.ptr())) throw_invalid(what + " must be a str, not " + type_name(value));
  Py_ssize_t size = 0;
  const char* utf8 = PyUnicode_AsUTF8AndSize(value.ptr(), &size);
  if (utf8 == nullptr) {
    // A lone surrogate ('\udc80', from surrogateescape) has no UTF-8: pybind11 raised its own
    // cast error, no modelcast.Error, naming nothing.
    PyErr_Clear();
    throw_invalid(what + " is not valid text: it holds a lone surrogate (" + repr_of(value) + "), which UTF-8 cannot encode");
  }
  return std::string(utf8, static_cast<std::size_t>(size));
}

std::size_t index_argument(const py::handle& value, const std::string& what) {
  // As Python's own indexing takes it (operator.index); a bool is an int there, but `part=True`
  // is a slip, not a request for part 1.
  if (is_boolean(value) || !PyIndex_Check(value.ptr()))
    throw_invalid(what + " must be an integer, got " + repr_of(value) + " (" + type_name(value) + ")");
  auto number = as_index(value, what);
  if (PyObject_RichCompareBool(number.ptr(), py::int_(0).ptr(), Py_LT) == 1)
    throw_invalid(what + " must not be negative, got " + repr_of(number));
  const std::size_t index = PyLong_AsSize_t(number.ptr());
  if (index == static_cast<std::size_t>(-1) && PyErr_Occurred()) {
    PyErr_Clear();
    throw_invalid(what + " is too large, got " + repr_of(number));
  }
  return index;
}

std::int64_t integer_argument(const py::handle& value, const std::string& what) {
  if (is_boolean(value) || !PyIndex_Check(value.ptr()))
    throw_invalid(what + " must be an integer, got " + repr_of(value) + " (" + type_name(value) + ")");
  auto number = as_index(value, what);
  int overflow = 0;
  const long long result = PyLong_AsLongLongAndOverflow(number.ptr(), &overflow);
  if (overflow != 0) throw_invalid(what + " is out of the 64-bit range, got " + repr_of(number));
  if (result == -1 && PyErr_Occurred()) throw py::error_already_set();
  return static_cast<std::int64_t>(result);
}

}  // namespace modelcast::python
