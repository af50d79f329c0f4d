// The pieces of the _core extension module, one per binding file; module.cpp calls them in order.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "modelcast/types.h"

namespace modelcast::python {

namespace py = pybind11;

void bind_errors(py::module_& m);     // errors.cpp: C++ Error -> modelcast.errors classes
void bind_types(py::module_& m);      // types_binding.cpp: dtypes, TensorSpec, keys
void bind_view(py::module_& m);       // view_binding.cpp: ModelView, NumPy arrays, DLPack
void bind_producer(py::module_& m);   // producer_binding.cpp
void bind_consumer(py::module_& m);   // consumer_binding.cpp
void bind_forecast(py::module_& m);   // forecast_binding.cpp: predictor forecasting and planning
void bind_online(py::module_& m);     // online_binding.cpp: predictor OnlineScheduler
void bind_device(py::module_& m);     // device_binding.cpp: memory kinds, DLPack import, testing helpers

// MemoryKind named "host" or "cuda"; InvalidArgumentError starting with `what` for another name.
MemoryKind memory_kind(const std::string& name, const std::string& what);

// "TypeName(field=value, ...)" over the instance properties of `self`'s class, in the order they
// were bound: a counters snapshot printed in a REPL or a log shows its numbers, and a field
// added to the binding shows up without anyone updating a format string.
inline py::str fields_repr(const py::object& self) {
  py::object type = py::type::of(self);
  py::object property = py::module_::import("builtins").attr("property");
  std::string text = py::cast<std::string>(type.attr("__name__")) + "(";
  bool first = true;
  for (auto item : py::dict(type.attr("__dict__"))) {
    auto name = py::cast<std::string>(item.first);
    if (name.empty() || name[0] == '_' || !py::isinstance(item.second, property)) continue;
    text += (first ? "" : ", ") + name + "=" + py::cast<std::string>(py::repr(self.attr(item.first)));
    first = false;
  }
  return text + ")";
}

}  // namespace modelcast::python
