// The extension module modelcast._core. The Python package (python/modelcast/) wraps it; users
// import modelcast, not _core.
#include "gil_released.h"
#include "bindings.h"
#include "deferred_destruction.h"

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
  // Before finalizing: a Producer or Consumer closed inside its own callback may still be
  // stopping on a thread of its own, which takes the GIL to drop its callbacks.
  pybind11::module_::import("atexit").attr("register")(pybind11::cpp_function([] {
    mp::GilReleased nogil;
    mp::wait_for_later_destructions();
  }));
}
