// The extension module modelcast._core. The Python package (python/modelcast/) wraps it; users
// import modelcast, not _core.
#include "gil_released.h"
#include "bindings.h"
#include "deferred_destruction.h"

namespace {

// A class with no Python constructor (ModelView, the stats, a publish ticket) is made only by the
// library; Cls.__new__(Cls) made one with no C++ object behind it, whose first use read freed
// memory or crashed. Without tp_new Python refuses to make one (a TypeError). Instances the
// library returns are allocated without it. Classes with a constructor keep theirs.
void refuse_bare_instances(const pybind11::module_& m) {
  for (auto item : pybind11::reinterpret_borrow<pybind11::dict>(m.attr("__dict__"))) {
    PyObject* value = item.second.ptr();
    if (!PyType_Check(value)) continue;
    auto* type = reinterpret_cast<PyTypeObject*>(value);
    if (pybind11::detail::get_type_info(type) == nullptr) continue;  // not a bound C++ class (the errors)
    // pybind11 gives a class without py::init its own C slot (which raises "No constructor
    // defined!"), one with py::init a method.
    PyObject* init = PyDict_GetItemString(type->tp_dict, "__init__");
    if (init == nullptr || !Py_IS_TYPE(init, &PyWrapperDescr_Type)) continue;
    type->tp_new = nullptr;
    PyType_Modified(type);
  }
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  namespace mp = modelcast::python;
  m.doc() = "modelcast C++ core (use the modelcast package, which wraps it)";
  mp::bind_errors(m);
  mp::bind_types(m);
  mp::bind_device(m);
  mp::bind_view(m);
  mp::bind_producer(m);
  mp::bind_consumer(m);
  auto predictor = m.def_submodule("predictor", "loss-curve forecasting and publish scheduling");
  mp::bind_forecast(predictor);
  mp::bind_online(predictor);
  refuse_bare_instances(m);
  refuse_bare_instances(predictor);
  // Before finalizing: a Producer or Consumer closed inside its own callback may still be
  // stopping on a thread of its own, which takes the GIL to drop its callbacks.
  pybind11::module_::import("atexit").attr("register")(pybind11::cpp_function([] {
    mp::GilReleased nogil;
    mp::wait_for_later_destructions();
  }));
}
