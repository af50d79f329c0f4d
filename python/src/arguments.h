// Arguments that the bindings check themselves rather than through pybind11's conversion: its
// refusal ("incompatible function arguments", listing the signature) is raised before our code
// runs, names no parameter, and is a TypeError that escapes an `except modelcast.Error`.
#pragma once

#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace modelcast::python {

namespace py = pybind11;

// `value` as text; InvalidArgumentError "<what> must be a str, not <type>" for anything but a str.
// Needs the GIL.
std::string text_argument(const py::handle& value, const std::string& what);

// `value` as an index (an int >= 0, or what operator.index takes, such as NumPy's integers; not a
// bool); InvalidArgumentError naming `what` and the value otherwise. Needs the GIL.
std::size_t index_argument(const py::handle& value, const std::string& what);

// `value` as a signed 64-bit integer (an int, or what operator.index takes; not a bool: a step of
// True was taken as 1); InvalidArgumentError naming `what` and the value otherwise. Needs the GIL.
std::int64_t integer_argument(const py::handle& value, const std::string& what);

}  // namespace modelcast::python
