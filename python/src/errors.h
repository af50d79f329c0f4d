// Mapping modelcast::Error onto the Python exception classes of modelcast.errors.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "modelcast/error.h"

namespace modelcast::python {

namespace py = pybind11;

// A new instance of the modelcast.errors class for `code` (modelcast.Error or its subclass),
// carrying `message`. Needs the GIL; throws py::error_already_set if modelcast.errors is missing.
py::object python_error(ErrorCode code, const std::string& message);

// Raises modelcast.errors' InvalidArgumentError with `message` (as a C++ exception that the
// registered translator turns into the Python one).
[[noreturn]] void throw_invalid(const std::string& message);

}  // namespace modelcast::python
