// The extension module modelcast._core. The Python package (python/modelcast/) wraps it; users
// import modelcast, not _core.
#include <string>

#include "gil_released.h"
#include "bindings.h"
#include "deferred_destruction.h"

namespace {

// Cls.__new__(Cls) makes an instance with no C++ object behind it (pybind11 allocates, only
// __init__ constructs), whose first use reads uninitialised memory or crashes.
//
// A class with no Python constructor (ModelView, the stats, a publish ticket) is made only by the
// library: without tp_new Python refuses to make one (a TypeError); instances the library returns
// are allocated without it.
//
// A class with a constructor needs its tp_new slot, which Cls(...) calls; only the `__new__` entry
// of its dict is replaced, by refuse_new() below. Python reads that entry for Cls.__new__ (and
// copy, pickle), never for Cls(...), and PyType_Modified leaves the slot as it was. A Python
// subclass's slot calls the entry too: for a subclass it makes the instance as the slot would have,
// and its __init__ must call the base's (pybind11's metaclass checks that).
PyObject* refuse_new(PyTypeObject* type) {
  const newfunc allocate = type->tp_new;
  return pybind11::cpp_function(
             [type, allocate](pybind11::handle cls, pybind11::args args, pybind11::kwargs kwargs) -> pybind11::object {
               if (cls.ptr() == reinterpret_cast<PyObject*>(type) || !PyType_Check(cls.ptr()) ||
                   !PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(cls.ptr()), type)) {
                 throw pybind11::type_error(std::string(type->tp_name) + ".__new__() would make an object with no value: "
                                            "call " + type->tp_name + "(...) instead");
               }
               PyObject* made = allocate(reinterpret_cast<PyTypeObject*>(cls.ptr()), args.ptr(), kwargs.ptr());
               if (made == nullptr) throw pybind11::error_already_set();
               return pybind11::reinterpret_steal<pybind11::object>(made);
             },
             pybind11::name("__new__"))
      .release()
      .ptr();
}

void refuse_bare_instances(const pybind11::module_& m) {
  for (auto item : pybind11::reinterpret_borrow<pybind11::dict>(m.attr("__dict__"))) {
    PyObject* value = item.second.ptr();
    if (!PyType_Check(value)) continue;
    auto* type = reinterpret_cast<PyTypeObject*>(value);
    if (pybind11::detail::get_type_info(type) == nullptr) continue;  // not a bound C++ class (the errors)
    // pybind11 gives a class without py::init its own C slot (which raises "No constructor
    // defined!"), one with py::init a method.
    PyObject* init = PyDict_GetItemString(type->tp_dict, "__init__");
    if (init == nullptr || !Py_IS_TYPE(init, &PyWrapperDescr_Type)) {
      // A class with __setstate__ (the enums) is unpickled by __new__ then __setstate__, which
      // constructs the value in place: its __new__ stays.
      if (PyDict_GetItemString(type->tp_dict, "__setstate__") != nullptr) continue;
      PyObject* guard = refuse_new(type);
      const int rc = PyDict_SetItemString(type->tp_dict, "__new__", guard);
      Py_DECREF(guard);
      if (rc != 0) throw pybind11::error_already_set();
    } else {
      type->tp_new = nullptr;
    }
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
