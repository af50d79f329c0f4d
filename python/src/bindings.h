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

}  // namespace modelcast::python
